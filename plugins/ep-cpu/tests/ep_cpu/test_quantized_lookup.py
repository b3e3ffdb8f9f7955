"""``com.epoxy.cpu::QuantizedLookup`` (the core's QDQLookupPass / QDQConcatRequantizePass): a
QDQ model's one-input ops and mixed-scale Concats run on the codes by table, the tables folded
once at session creation by the provider's own kernels. The codes equal the QDQ graph's bit for
bit (level ``extended`` against ``disable``, jit on and off), onnxruntime with its optimizer off
agrees within one code (its float kernels are not ours), only the lookups run per call, the
channels-last codes QLinearConv hands on keep their layout, and wrong inputs are named."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _qdq_codes import StubNode
from _qdq_codes import codes as _codes
from _qdq_codes import run_ort as _ort
from onnx import TensorProto, helper, numpy_helper

import epoxy

CODES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}
SHAPE = (2, 8, 37, 41)  # more elements than one compiled chunk

#: op -> (extra inputs as initializers, attributes): the ops quantizers wrap in DQ/Q
OPS = {
    "Sigmoid": ({}, {}), "Tanh": ({}, {}), "LeakyRelu": ({}, {"alpha": 0.1}), "HardSigmoid": ({}, {}),
    "HardSwish": ({}, {}), "Gelu": ({}, {}), "Elu": ({}, {"alpha": 0.7}), "Softplus": ({}, {}),
    "Clip": ({"lo": np.float32(0.0), "hi": np.float32(6.0)}, {}), "Exp": ({}, {}), "Relu": ({}, {}),
    "Mul": ({"k": np.float32(-0.75)}, {}), "Div": ({"k": np.array([2.5], np.float32)}, {}),
}


def _params(dtype, scale, zero):
    return np.float32(scale), np.array(zero if np.dtype(dtype) == np.uint8 else zero - 128, dtype)


def _unary(op: str, in_dtype, out_dtype) -> onnx.ModelProto:
    extra, attrs = OPS[op]
    sx, zx = _params(in_dtype, 0.031, 120)
    sy, zy = _params(out_dtype, 0.0207 if op not in ("Exp", "Mul", "Div") else 0.37, 90)
    inits = {"sx": sx, "zx": zx, "sy": sy, "zy": zy, **extra}
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["dx"]),
             helper.make_node(op, ["dx", *extra], ["f"], name="act", **attrs),
             helper.make_node("QuantizeLinear", ["f", "sy", "zy"], ["y"])]
    graph = helper.make_graph(nodes, "unary", [helper.make_tensor_value_info("x", CODES[np.dtype(in_dtype)], SHAPE)],
                              [helper.make_tensor_value_info("y", CODES[np.dtype(out_dtype)], SHAPE)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def _concat(dtypes, out_dtype) -> onnx.ModelProto:
    nodes, inputs, inits, names = [], [], {}, []
    for i, dtype in enumerate(dtypes):
        inits[f"s{i}"], inits[f"z{i}"] = _params(dtype, 0.02 + 0.013 * i, 100 + 9 * i)
        nodes.append(helper.make_node("DequantizeLinear", [f"x{i}", f"s{i}", f"z{i}"], [f"d{i}"]))
        inputs.append(helper.make_tensor_value_info(f"x{i}", CODES[np.dtype(dtype)], SHAPE))
        names.append(f"d{i}")
    inits["sy"], inits["zy"] = _params(out_dtype, 0.033, 110)
    if len(dtypes) > 2:  # the last input already in the output's parameters: taken as it is
        inits[f"s{len(dtypes) - 1}"], inits[f"z{len(dtypes) - 1}"] = inits["sy"], inits["zy"]
        inputs[-1] = helper.make_tensor_value_info(f"x{len(dtypes) - 1}", CODES[np.dtype(out_dtype)], SHAPE)
    nodes += [helper.make_node("Concat", names, ["c"], axis=1, name="join"),
              helper.make_node("QuantizeLinear", ["c", "sy", "zy"], ["y"])]
    out_shape = [SHAPE[0], SHAPE[1] * len(dtypes), *SHAPE[2:]]
    graph = helper.make_graph(nodes, "concat", inputs,
                              [helper.make_tensor_value_info("y", CODES[np.dtype(out_dtype)], out_shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _run(model, feeds, level, jit=True):
    """The output and the op types that ran per call (profiled: folded constants do not run)."""
    opts = epoxy.SessionOptions(graph_optimization_level=level, enable_profiling=True)
    sess = epoxy.InferenceSession(model.SerializeToString(), opts, providers=[("cpu", {"jit": jit})])
    out = sess.run(None, feeds)[0]
    ran = sorted({row["op_type"] for row in sess.profile_summary(50)})
    sess.end_profiling()
    return out, ran


def _within_one_code(a, b):
    assert a.dtype == b.dtype
    assert np.abs(a.astype(np.int32) - b.astype(np.int32)).max() <= 1


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("dtypes", [(np.uint8, np.uint8), (np.int8, np.uint8), (np.uint8, np.int8)],
                         ids=["u8", "s8-u8", "u8-s8"])
def test_unary_op_on_codes_equals_the_qdq_graph(op, dtypes, tmp_path):
    rng = np.random.default_rng(3)
    model = _unary(op, *dtypes)
    feeds = {"x": _codes(rng, dtypes[0], SHAPE)}
    graph, graph_ran = _run(model, feeds, "disable")
    fused, fused_ran = _run(model, feeds, "extended")
    assert op in graph_ran and fused_ran == ["QuantizedLookup"]  # the table chain was folded
    np.testing.assert_array_equal(fused, graph)
    assert fused.dtype == np.dtype(dtypes[1]) and fused.shape == SHAPE
    _within_one_code(fused, _ort(model, feeds))


@pytest.mark.parametrize("jit", [True, False], ids=["jit", "numpy"])
def test_every_code_maps_as_the_graph_does(jit):
    """All 256 codes through LeakyRelu, numpy and compiled lookups alike."""
    model = _unary("LeakyRelu", np.int8, np.int8)
    x = np.broadcast_to(np.arange(-128, 128, dtype=np.int8), SHAPE[:-1] + (256,))
    model.graph.input[0].type.tensor_type.shape.dim[-1].dim_value = 256
    model.graph.output[0].type.tensor_type.shape.dim[-1].dim_value = 256
    feeds = {"x": np.ascontiguousarray(x)}
    fused, ran = _run(model, feeds, "extended", jit)
    assert ran == ["QuantizedLookup"]
    np.testing.assert_array_equal(fused, _run(model, feeds, "disable", jit)[0])


@pytest.mark.parametrize("dtypes", [(np.uint8, np.uint8), (np.uint8, np.int8, np.uint8)], ids=["two", "three"])
@pytest.mark.parametrize("out_dtype", [np.uint8, np.int8], ids=["to-u8", "to-s8"])
def test_concat_of_different_scales_joins_codes(dtypes, out_dtype):
    rng = np.random.default_rng(4)
    model = _concat(dtypes, out_dtype)
    feeds = {f"x{i}": _codes(rng, d, SHAPE) for i, d in enumerate(dtypes)}
    if len(dtypes) > 2:
        feeds[f"x{len(dtypes) - 1}"] = _codes(rng, out_dtype, SHAPE)
    graph, graph_ran = _run(model, feeds, "disable")
    fused, fused_ran = _run(model, feeds, "extended")
    assert "DequantizeLinear" in graph_ran
    assert "DequantizeLinear" not in fused_ran and "QuantizeLinear" not in fused_ran
    assert "Concat" in fused_ran and "QuantizedLookup" in fused_ran
    np.testing.assert_array_equal(fused, graph)
    np.testing.assert_array_equal(fused, _ort(model, feeds))  # a requantization: no float op in between


def test_channels_last_codes_keep_their_layout():
    from epoxy_ep_cpu.jit import kernels_quantize

    rng = np.random.default_rng(6)
    codes = np.ascontiguousarray(_codes(rng, np.uint8, (1, 13, 17, 64))).transpose(0, 3, 1, 2)  # NCHW view
    table = rng.integers(-128, 128, 256).astype(np.int8)
    out = kernels_quantize.run_lookup(codes, table, 2)
    np.testing.assert_array_equal(out, table[codes])
    assert out.strides == tuple(s for s in codes.strides) and out.dtype == np.int8
    odd = _codes(rng, np.uint8, (4, 6, 8))[:, ::2]  # not one dense block: copied first
    np.testing.assert_array_equal(kernels_quantize.run_lookup(odd, table, 1), table[odd])


def test_wrong_inputs_are_named():
    from epoxy_ep_cpu.ops.quantized_lookup import QuantizedLookupError, quantized_lookup

    run = quantized_lookup(StubNode("act", "QuantizedLookup"))
    with pytest.raises(QuantizedLookupError, match="input codes must hold 8-bit codes"):
        run(np.zeros(4, np.float32), np.zeros(256, np.uint8))
    with pytest.raises(QuantizedLookupError, match="input table must be 256 8-bit codes"):
        run(np.zeros(4, np.uint8), np.zeros(255, np.uint8))


def _per_channel(op: str, in_dtype, out_dtype, quantized_operand: bool) -> onnx.ModelProto:
    """``DQ -> op -> Q`` with one constant per channel: Mul/Add by a (C, 1, 1) operand (an
    initializer, or a DequantizeLinear of constant codes as onnxruntime's tool writes it), or an
    inference BatchNormalization."""
    rng = np.random.default_rng(4)
    c = SHAPE[1]
    sx, zx = _params(in_dtype, 0.031, 120)
    sy, zy = _params(out_dtype, 0.05, 90)
    inits = {"sx": sx, "zx": zx, "sy": sy, "zy": zy}
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["dx"])]
    if op == "BatchNormalization":
        inits.update(g=rng.uniform(0.5, 2, c).astype(np.float32), b=rng.uniform(-1, 1, c).astype(np.float32),
                     m=rng.uniform(-1, 1, c).astype(np.float32), v=rng.uniform(0.5, 2, c).astype(np.float32))
        nodes.append(helper.make_node(op, ["dx", "g", "b", "m", "v"], ["f"], name="bn"))
    elif quantized_operand:
        inits.update(kq=rng.integers(-127, 128, (c, 1, 1)).astype(np.int8), ks=np.float32(0.02), kz=np.int8(0))
        nodes += [helper.make_node("DequantizeLinear", ["kq", "ks", "kz"], ["k"]),
                  helper.make_node(op, ["dx", "k"], ["f"], name="per_channel")]
    else:
        inits["k"] = rng.uniform(-2, 2, (c, 1, 1)).astype(np.float32)
        nodes.append(helper.make_node(op, ["k", "dx"], ["f"], name="per_channel"))  # the constant first
    nodes.append(helper.make_node("QuantizeLinear", ["f", "sy", "zy"], ["y"]))
    x_info = helper.make_tensor_value_info("x", CODES[np.dtype(in_dtype)], SHAPE)
    graph = helper.make_graph(nodes, "per_channel", [x_info],
                              [helper.make_tensor_value_info("y", CODES[np.dtype(out_dtype)], SHAPE)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize(("op", "quantized_operand"), [("Mul", False), ("Add", False), ("Mul", True), ("Add", True),
                                                       ("BatchNormalization", False)],
                         ids=["mul", "add", "mul-of-dq", "add-of-dq", "batchnorm"])
@pytest.mark.parametrize("dtypes", [(np.uint8, np.uint8), (np.int8, np.uint8), (np.uint8, np.int8)],
                         ids=["u8", "s8-u8", "u8-s8"])
@pytest.mark.parametrize("jit", [True, False], ids=["jit", "numpy"])
def test_per_channel_ops_take_one_table_per_channel(op, quantized_operand, dtypes, jit):
    """A constant per channel (onnxruntime's DenseNet file keeps BN, Mul and Add so between Q/DQ
    pairs): one lookup with a table per channel, the table chain folded, the QDQ graph's codes
    bit for bit, onnxruntime's within one code."""
    rng = np.random.default_rng(5)
    model = _per_channel(op, *dtypes, quantized_operand)
    feeds = {"x": _codes(rng, dtypes[0], SHAPE)}
    graph, graph_ran = _run(model, feeds, "disable", jit)
    fused, fused_ran = _run(model, feeds, "extended", jit)
    assert op in graph_ran and fused_ran == ["QuantizedLookup"]
    np.testing.assert_array_equal(fused, graph)
    _within_one_code(fused, _ort(model, feeds))


def test_per_channel_lookup_keeps_channels_last_codes():
    from epoxy_ep_cpu.jit import kernels_quantize

    rng = np.random.default_rng(7)
    codes = np.ascontiguousarray(_codes(rng, np.uint8, (2, 5, 6, 24))).transpose(0, 3, 1, 2)  # NCHW view
    tables = rng.integers(-128, 128, (24, 256)).astype(np.int8)
    want = tables[np.arange(24)[None, :, None, None], codes]
    out = kernels_quantize.run_channel_lookup(codes, tables, 2)
    np.testing.assert_array_equal(out, want)
    assert out.strides == codes.strides
    dense = np.ascontiguousarray(codes)
    np.testing.assert_array_equal(kernels_quantize.run_channel_lookup(dense, tables, 1), want)


def test_a_table_that_fits_no_channel_count_is_named():
    from epoxy_ep_cpu.ops.quantized_lookup import QuantizedLookupError, quantized_lookup

    run = quantized_lookup(StubNode("bn", "QuantizedLookup"))
    with pytest.raises(QuantizedLookupError, match=r"256 per channel .* shape \[1, 5, 1, 256\] for codes of shape "
                                                   r"\[1, 4, 3, 3\]"):
        run(np.zeros((1, 4, 3, 3), np.uint8), np.zeros((1, 5, 1, 256), np.uint8))
