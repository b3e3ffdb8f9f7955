"""The cuda factory (and its simulated twin) declares onnxruntime's name for it, so code
written for onnxruntime's ``CUDAExecutionProvider`` runs on epoxy's cuda unchanged."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

import epoxy
from epoxy.plugins import ProviderRegistry
from epoxy_ep_cuda.factory import CudaProviderFactory
from epoxy_ep_cuda.testing import FakeCudaFactory, fake_registry

ALIAS = "CUDAExecutionProvider"


def test_factory_declares_its_onnxruntime_name():
    assert CudaProviderFactory.aliases == (ALIAS,)
    assert FakeCudaFactory.aliases == CudaProviderFactory.aliases


def test_installed_provider_answers_to_it():
    registry = ProviderRegistry()
    assert registry.resolve(ALIAS) is registry.get("cuda") is not None
    assert not [f for f in registry.failures if f.stage == "alias"], registry.failures


def test_session_by_onnxruntime_names_runs_on_the_simulated_gpu():
    registry = fake_registry()
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = epoxy.InferenceSession(model, providers=[ALIAS, "CPUExecutionProvider"], registry=registry)
    assert [registry.canonical_name(n) for n in session.get_providers()] == ["cuda", "cpu"]
    assert {registry.canonical_name(d.provider) for d in session.partition_report().nodes} == {"cuda"}
    x = np.array([[-1, 2], [3, -4]], np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], np.maximum(x, 0))
