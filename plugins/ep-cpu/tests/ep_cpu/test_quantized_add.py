"""``com.epoxy.cpu::QuantizedAdd`` / ``QuantizedMul`` (the core's QDQAddPass): a QDQ residual
addition or a product of two tensors run as one op on the codes gives the QDQ graph's codes bit
for bit (level ``extended`` against ``disable``, jit on and off; onnxruntime with its optimizer
off as the oracle), in C order and on the channels-last codes QLinearConv hands on; inputs of
the wrong kind are named."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _qdq_codes import StubNode
from _qdq_codes import codes as _codes
from _qdq_codes import run_epoxy as _run
from _qdq_codes import run_ort as _ort
from onnx import TensorProto, helper, numpy_helper

CODES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}


def _residual(a_dtype, b_dtype, y_dtype, relu: bool, shape, b_shape=None, prefix=(), op="Add") -> onnx.ModelProto:
    """``DQ(a) + DQ(b) [-> Relu] -> Q``, the scales chosen so the sum often leaves the range."""
    inits = {"sa": np.float32(0.043), "za": np.array(7, a_dtype), "sb": np.float32(0.0271),
             "zb": np.array(-5 if np.dtype(b_dtype) == np.int8 else 140, b_dtype), "sy": np.float32(0.0389),
             "zy": np.array(3 if np.dtype(y_dtype) == np.int8 else 100, y_dtype)}
    nodes = list(prefix)
    a_name = nodes[-1].output[0] if nodes else "a"
    nodes += [helper.make_node("DequantizeLinear", [a_name, "sa", "za"], ["da"]),
              helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["db"]),
              helper.make_node(op, ["da", "db"], ["s"])]
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["r"]))
    nodes.append(helper.make_node("QuantizeLinear", ["r" if relu else "s", "sy", "zy"], ["y"]))
    inputs = [helper.make_tensor_value_info("a", CODES[np.dtype(a_dtype)], list(shape)),
              helper.make_tensor_value_info("b", CODES[np.dtype(b_dtype)], list(b_shape or shape))]
    graph = helper.make_graph(nodes, "residual", inputs, [helper.make_tensor_value_info("y", CODES[np.dtype(y_dtype)],
                                                                                         list(shape))],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("dtypes", [(np.uint8, np.uint8, np.uint8), (np.int8, np.uint8, np.int8),
                                    (np.uint8, np.int8, np.int8)], ids=["u8", "s8-u8-s8", "u8-s8-s8"])
@pytest.mark.parametrize("relu", [False, True], ids=["plain", "relu"])
@pytest.mark.parametrize("jit", [True, False], ids=["jit", "numpy"])
@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_codes_equal_the_qdq_graph(dtypes, relu, jit, op):
    rng = np.random.default_rng(11)
    shape = (2, 16, 33, 35)  # more elements than one compiled chunk
    model = _residual(*dtypes, relu, shape, op=op)
    feeds = {"a": _codes(rng, dtypes[0], shape), "b": _codes(rng, dtypes[1], shape)}
    graph, graph_ops = _run(model, feeds, "disable", jit)
    fused, fused_ops = _run(model, feeds, "extended", jit)
    assert op in graph_ops and fused_ops == [f"Quantized{op}"]
    np.testing.assert_array_equal(fused, graph)
    np.testing.assert_array_equal(fused, _ort(model, feeds))
    assert fused.dtype == np.dtype(dtypes[2])


@pytest.mark.parametrize("op", ["Add", "Mul"])
@pytest.mark.parametrize(("a_shape", "b_shape"), [((2, 8, 6, 7), (2, 8, 1, 1)), ((2, 8, 1, 1), (2, 8, 6, 7)),
                                                  ((1, 8, 6, 7), (1, 1, 6, 7))],
                         ids=["gate-second", "gate-first", "other-broadcast"])
@pytest.mark.parametrize("jit", [True, False], ids=["jit", "numpy"])
def test_broadcast_inputs_equal_the_qdq_graph(op, a_shape, b_shape, jit):
    """A squeeze-excite gate ([N, C, H, W] * [N, C, 1, 1], either side: one compiled pass over
    the planes) and another broadcast (the numpy steps) give the QDQ graph's codes."""
    rng = np.random.default_rng(5)
    out_shape = tuple(max(x, y) for x, y in zip(a_shape, b_shape))
    model = _residual(np.uint8, np.int8, np.uint8, True, out_shape, b_shape=b_shape, op=op)
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = a_shape[2]
    model.graph.input[0].type.tensor_type.shape.dim[3].dim_value = a_shape[3]
    feeds = {"a": _codes(rng, np.uint8, a_shape), "b": _codes(rng, np.int8, b_shape)}
    fused, ops = _run(model, feeds, "extended", jit)
    assert ops == [f"Quantized{op}"]
    np.testing.assert_array_equal(fused, _run(model, feeds, "disable", jit)[0])
    np.testing.assert_array_equal(fused, _ort(model, feeds))


def test_channels_last_codes_from_qlinear_conv_stay_channels_last(monkeypatch):
    """QLinearConv (on the int8 GEMM where this CPU has VNNI: its codes come channels last) ->
    QuantizedAdd with a C-ordered residual: equal to the QDQ graph."""
    from epoxy_ep_cpu.jit import kernels_int8_gemm, kernels_quantize

    seen: list[bool] = []
    real = kernels_quantize.run_quantized_binary
    monkeypatch.setattr(kernels_quantize, "run_quantized_binary",
                        lambda a, *rest: seen.append(a.flags.c_contiguous) or real(a, *rest))
    rng = np.random.default_rng(2)
    w = _codes(rng, np.int8, (64, 64, 1, 1))
    params = {"cs": np.float32(0.043), "cz": np.uint8(7), "w": w, "ws": np.float32(0.01), "wz": np.int8(0)}
    conv_inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in params.items()]
    conv = helper.make_node("QLinearConv", ["a", "cs", "cz", "w", "ws", "wz", "cs", "cz"], ["c"])
    shape = (1, 64, 66, 66)  # above the int8 GEMM's smallest layer
    model = _residual(np.uint8, np.uint8, np.uint8, True, shape, prefix=[conv])
    model.graph.initializer.extend(conv_inits)
    feeds = {"a": _codes(rng, np.uint8, shape), "b": _codes(rng, np.uint8, shape)}
    fused, ops = _run(model, feeds, "extended")
    assert ops == ["QLinearConv", "QuantizedAdd"]
    assert seen == [kernels_int8_gemm.support() is not None]  # channels-last codes where the GEMM ran
    np.testing.assert_array_equal(fused, _run(model, feeds, "disable")[0])
    assert fused.flags.c_contiguous


def test_wrong_codes_are_named():
    from epoxy_ep_cpu.ops.quantized_add import QuantizedAddError, quantized_add

    run = quantized_add(StubNode("res", "QuantizedAdd"))
    s, z = np.float32(0.1), np.uint8(3)
    with pytest.raises(QuantizedAddError, match="input b must hold 8-bit codes"):
        run(np.zeros(4, np.uint8), s, z, np.zeros(4, np.float32), s, z, s, z)
    with pytest.raises(QuantizedAddError, match="y_scale must be a scalar float32"):
        run(np.zeros(4, np.uint8), s, z, np.zeros(4, np.uint8), s, z, np.ones(2, np.float32), z)
