"""com.microsoft nodes inside larger graphs: one openvino group across domains, a declined
variant left to cpu with openvino's reason, the domain's opset gate, the MatMulNBits compile
setting, and ``epoxy ops`` listing the tables."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy_ep_openvino import support

ort = pytest.importorskip("onnxruntime")
MS = "com.microsoft"
F = TensorProto.FLOAT


def _block(rng: np.random.Generator, *, attention_bias: bool, ms_opset: int = 1) -> onnx.ModelProto:
    """MatMul -> FastGelu -> SkipLayerNormalization -> Attention -> MatMul, random weights."""
    d, n = 16, 2
    inits = {"w1": rng.normal(size=(d, d)) * 0.3, "b1": rng.normal(size=d), "gamma": rng.normal(size=d),
             "beta": rng.normal(size=d), "wqkv": rng.normal(size=(d, 3 * d)) * 0.3, "w2": rng.normal(size=(d, d)) * 0.3}
    if attention_bias:
        inits["bqkv"] = rng.normal(size=3 * d)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
        helper.make_node("FastGelu", ["h", "b1"], ["g"], name="gelu", domain=MS),
        helper.make_node("SkipLayerNormalization", ["g", "x", "gamma", "beta"], ["ln"], name="ln", domain=MS,
                         epsilon=1e-5),
        helper.make_node("Attention", ["ln", "wqkv", "bqkv" if attention_bias else ""], ["att"], name="attention",
                         domain=MS, num_heads=n),
        helper.make_node("MatMul", ["att", "w2"], ["y"], name="mm2"),
    ]
    # the values ONNX shape inference cannot type (com.microsoft outputs) are declared, as exporters do
    info = [helper.make_tensor_value_info(v, F, [2, 4, d]) for v in ("g", "ln", "att")]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", F, [2, 4, d])],
                              [helper.make_tensor_value_info("y", F, [2, 4, d])],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()],
                              value_info=info)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, ms_opset)])
    model.ir_version = 8
    return model


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _placement(sess: epoxy.InferenceSession) -> dict[str, str]:
    return {d.node: d.provider for d in sess.partition_report().nodes}


def _declines(sess: epoxy.InferenceSession, node: str) -> dict[str, str]:
    return dict(next(d for d in sess.partition_report().nodes if d.node == node).declined)


def test_transformer_block_is_one_openvino_group(rng: np.random.Generator) -> None:
    model = _block(rng, attention_bias=True)
    sess = epoxy.InferenceSession(model, providers=[("openvino", {"min_group_cost": 0}), "cpu"])
    assert set(_placement(sess).values()) == {"openvino"}
    assert len(sess.partition_report().groups) == 1
    x = rng.normal(size=(2, 4, 16)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_declined_variant_falls_back_to_cpu_with_the_reason(rng: np.random.Generator) -> None:
    model = _block(rng, attention_bias=False)  # Attention without bias crashes OpenVINO's frontend
    sess = epoxy.InferenceSession(model, providers=[("openvino", {"min_group_cost": 0}), "cpu"])
    placement = _placement(sess)
    assert placement["attention"] == "cpu"
    assert {placement[n] for n in ("mm1", "gelu", "ln", "mm2")} == {"openvino"}
    assert "segfault" in _declines(sess, "attention")["openvino"]
    x = rng.normal(size=(2, 4, 16)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_newer_com_microsoft_opset_than_checked_is_declined(rng: np.random.Generator) -> None:
    model = _block(rng, attention_bias=True, ms_opset=2)
    sess = epoxy.InferenceSession(model, providers=[("openvino", {"min_group_cost": 0}), "cpu"])
    assert "newer than checked (1)" in _declines(sess, "gelu")["openvino"]
    assert _placement(sess)["mm1"] == "openvino"


def test_f32_turns_off_dynamic_quantization_for_matmul_nbits(monkeypatch: pytest.MonkeyPatch) -> None:
    from epoxy_ep_openvino.factory import OpenVINOProviderFactory
    from epoxy_ep_openvino.provider import OpenVINOProvider

    factory = OpenVINOProviderFactory()
    device = factory.devices()[0]
    exact = factory.create(device, {})
    assert isinstance(exact, OpenVINOProvider)
    assert exact.config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] == 0 and exact._exact_matmul
    kept = factory.create(device, {"config": {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 32}})
    assert not kept._exact_matmul  # the user's setting wins; MatMulNBits then stays on cpu
    node = type("N", (), {"domain": MS, "op_type": "MatMulNBits", "opset": 1, "inputs": (), "outputs": (),
                          "input_types": (), "output_types": (), "attr": lambda self, k, d=None: d,
                          "qualified_op": "com.microsoft::MatMulNBits-1"})()
    assert "DYNAMIC_QUANTIZATION_GROUP_SIZE" in support.gate(node, None, exact_matmul=False)  # type: ignore[arg-type]
    assert support.gate(node, None, exact_matmul=True) is None  # type: ignore[arg-type]


def test_epoxy_ops_lists_the_com_microsoft_table(capsys: pytest.CaptureFixture[str]) -> None:
    from epoxy.cli.main import main

    assert main(["ops", "--provider", "openvino", "--json"]) == 0
    listed = {(o["domain"], o["op"]): o["since"] for o in json.loads(capsys.readouterr().out)}
    for op, version in support.MS_OPS.items():
        assert listed[(MS, op)][-1] == version
    assert ("ai.onnx.ml", "Normalizer") in listed and ("ai.onnx", "SimplifiedLayerNormalization") in listed
    assert ("ai.onnx", "Relu") in listed and (MS, "QLinearAdd") not in listed
