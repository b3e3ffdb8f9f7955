"""The openvino factory declares onnxruntime's name for it, so code written for onnxruntime's
``OpenVINOExecutionProvider`` runs on epoxy's openvino unchanged."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

import epoxy
from epoxy.plugins import ProviderRegistry, default_registry
from epoxy_ep_openvino.factory import OpenVINOProviderFactory

ALIAS = "OpenVINOExecutionProvider"


def test_factory_declares_its_onnxruntime_name():
    assert OpenVINOProviderFactory.aliases == (ALIAS,)


def test_installed_provider_answers_to_it():
    registry = ProviderRegistry()
    assert registry.resolve(ALIAS) is registry.get("openvino") is not None
    assert not [f for f in registry.failures if f.stage == "alias"], registry.failures


def test_session_by_its_onnxruntime_name():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "x"], ["y"])],
                              "relu_mul", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = epoxy.InferenceSession(model, providers=[(ALIAS, {"min_group_cost": 0}), "CPUExecutionProvider"])
    registry = default_registry()
    assert {registry.canonical_name(d.provider) for d in session.partition_report().nodes} == {"openvino"}
    x = np.array([[-1, 2], [3, -4]], np.float32)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], np.maximum(x, 0) * x)
