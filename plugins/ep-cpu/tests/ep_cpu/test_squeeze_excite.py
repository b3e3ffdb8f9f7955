"""Squeeze-and-excitation blocks become one ``SqueezeExcite`` node (ops/squeeze_excite.py): the
values of the unfused graph (and onnxruntime's) with the jit tier on and off, over both pool
spellings, the activations exporters write, the Mul's operand order, biases or none; blocks
that do not fit (an intermediate read twice, a strided or grouped conv, a fed weight) stay."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy

F = TensorProto.FLOAT
C, R = 12, 4


def _act_nodes(name: str, src: str, dst: str) -> list:  # type: ignore[type-arg]
    if name == "SiLU":
        return [helper.make_node("Sigmoid", [src], [dst + "_s"]), helper.make_node("Mul", [src, dst + "_s"], [dst])]
    if name == "HardSigmoid":
        return [helper.make_node("HardSigmoid", [src], [dst], alpha=0.3, beta=0.4)]
    if not name:
        return [helper.make_node("Identity", [src], [dst])]
    return [helper.make_node(name, [src], [dst])]


def _model(act1: str = "Relu", act2: str = "HardSigmoid", *, pool: str = "gap", order: str = "xs",
           bias: bool = True, reread: str = "", stride: int = 1, opset: int = 17,
           fed_weight: bool = False) -> tuple[bytes, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((R, C, 1, 1)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((C, R, 1, 1)).astype(np.float32), "w2")]
    if bias:
        inits += [numpy_helper.from_array(rng.standard_normal(R).astype(np.float32), "b1"),
                  numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), "b2")]
    if pool == "gap":
        nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"])]
    elif opset >= 18:
        inits.append(numpy_helper.from_array(np.array([-1, -2], np.int64), "axes"))
        nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["p"], keepdims=1)]
    else:
        nodes = [helper.make_node("ReduceMean", ["x"], ["p"], axes=[2, 3], keepdims=1)]
    nodes.append(helper.make_node("Conv", ["p", "w1"] + (["b1"] if bias else []), ["c1"], strides=[stride, stride]))
    nodes += _act_nodes(act1, "c1", "h")
    nodes.append(helper.make_node("Conv", ["h", "w2"] + (["b2"] if bias else []), ["c2"]))
    nodes += _act_nodes(act2, "c2", "g")
    nodes.append(helper.make_node("Mul", ["x", "g"] if order == "xs" else ["g", "x"], ["y"]))
    outputs = [helper.make_tensor_value_info("y", F, None)]
    if reread:
        nodes.append(helper.make_node("Neg", [reread], ["other"]))
        outputs.append(helper.make_tensor_value_info("other", F, None))
    inputs = [helper.make_tensor_value_info("x", F, [2, C, 5, 6])]
    if fed_weight:
        inputs.append(helper.make_tensor_value_info("w1", F, [R, C, 1, 1]))
    graph = helper.make_graph(nodes, "se", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    feeds = {"x": (rng.standard_normal((2, C, 5, 6)) * 3).astype(np.float32)}
    if fed_weight:
        feeds["w1"] = numpy_helper.to_array(inits[0])
    return onnx.shape_inference.infer_shapes(model).SerializeToString(), feeds


def _sessions(model: bytes, jit: bool) -> tuple[epoxy.InferenceSession, epoxy.InferenceSession]:
    plain = epoxy.InferenceSession(model, epoxy.SessionOptions(graph_optimization_level="disable"),
                                   providers=[("cpu", {"jit": jit})])
    fused = epoxy.InferenceSession(model, epoxy.SessionOptions(graph_optimization_level="extended"),
                                   providers=[("cpu", {"jit": jit})])
    return plain, fused


def _ops(session: epoxy.InferenceSession) -> list[str]:
    return [n.op_type for n in session._graph.nodes]


CASES = [("Relu", "HardSigmoid", "gap", "xs", True, 17),  # MobileNetV3
         ("SiLU", "Sigmoid", "gap", "sx", True, 17),  # EfficientNet
         ("Relu", "Sigmoid", "mean", "xs", False, 17),  # SE-ResNet, ReduceMean with axes attribute
         ("HardSwish", "HardSigmoid", "mean", "sx", True, 18),  # dynamo's ReduceMean, axes as input
         ("", "Sigmoid", "gap", "xs", True, 17)]


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize(("act1", "act2", "pool", "order", "bias", "opset"), CASES)
def test_block_becomes_one_node_with_the_unfused_values(act1, act2, pool, order, bias, opset, jit):
    model, feeds = _model(act1, act2, pool=pool, order=order, bias=bias, opset=opset)
    plain, fused = _sessions(model, jit)
    assert "SqueezeExcite" in _ops(fused) and "Mul" not in _ops(fused), _ops(fused)
    want = plain.run(None, feeds)[0]
    for _ in range(2):
        got = fused.run(None, feeds)[0]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, oracle, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("change", [{"reread": "p"}, {"reread": "h"}, {"reread": "g"}, {"stride": 2},
                                    {"fed_weight": True}])
def test_blocks_that_do_not_fit_stay_apart(change):
    model, feeds = _model(**change)
    plain, fused = _sessions(model, True)
    assert "SqueezeExcite" not in _ops(fused)
    for a, b in zip(plain.run(None, feeds), fused.run(None, feeds)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_non_finite_inputs_as_the_unfused_graph():
    model, feeds = _model("SiLU", "HardSigmoid")
    feeds["x"][0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    plain, fused = _sessions(model, True)
    with np.errstate(all="ignore"):
        want, got = plain.run(None, feeds)[0], fused.run(None, feeds)[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_jit_on_runs_the_compiled_block(monkeypatch):
    pytest.importorskip("numba")
    from epoxy_ep_cpu.jit import kernels_squeeze_excite

    calls = []
    real = kernels_squeeze_excite.SqueezeExciteCall.__call__
    monkeypatch.setattr(kernels_squeeze_excite.SqueezeExciteCall, "__call__",
                        lambda self, x: calls.append(x.shape) or real(self, x))
    model, feeds = _model()
    plain, fused = _sessions(model, True)
    np.testing.assert_allclose(fused.run(None, feeds)[0], plain.run(None, feeds)[0], rtol=1e-5, atol=1e-6)
    assert calls == [(2, C, 5, 6)]


def test_float16_blocks_keep_their_ops():
    """A float16 model (onnxruntime's fp16 conversion of a MobileNetV3) keeps the unfused ops,
    which widen to float32 one by one, and runs."""
    from onnx import numpy_helper as nh

    model = onnx.load_from_string(_model("Relu", "HardSigmoid")[0])
    for tensor in model.graph.initializer:
        tensor.CopyFrom(nh.from_array(nh.to_array(tensor).astype(np.float16), tensor.name))
    for value in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        value.type.tensor_type.elem_type = TensorProto.FLOAT16
    feeds = {"x": np.random.default_rng(1).standard_normal((2, C, 5, 6)).astype(np.float16)}
    plain, fused = _sessions(model.SerializeToString(), True)
    assert "SqueezeExcite" not in _ops(fused)
    np.testing.assert_allclose(fused.run(None, feeds)[0].astype(np.float32),
                               plain.run(None, feeds)[0].astype(np.float32), rtol=1e-2, atol=1e-2)
