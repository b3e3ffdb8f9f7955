"""The cpu factory declares onnxruntime's name for it, so ``providers=["CPUExecutionProvider"]``
and ``"CPUExecutionProvider" in epoxy.get_available_providers()`` work as with onnxruntime."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

import epoxy
from epoxy.plugins import default_registry
from epoxy_ep_cpu.factory import CpuProviderFactory

ALIAS = "CPUExecutionProvider"


def test_factory_declares_its_onnxruntime_name():
    assert CpuProviderFactory.aliases == (ALIAS,)


def test_installed_provider_answers_to_it():
    registry = default_registry()
    assert registry.get("cpu").aliases == (ALIAS,)
    assert registry.resolve(ALIAS) is registry.get("cpu")
    assert not [f for f in registry.failures if f.stage == "alias"], registry.failures
    assert ALIAS in epoxy.get_available_providers() and "cpu" in epoxy.get_available_providers()


def test_session_by_its_onnxruntime_name():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = epoxy.InferenceSession(model, providers=[ALIAS])
    assert len(session.get_providers()) == 1  # the fallback is not appended a second time
    x = np.array([[-1, 2], [3, -4]], np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], np.maximum(x, 0))
