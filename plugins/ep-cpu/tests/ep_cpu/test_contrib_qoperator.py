"""The com.microsoft ops onnxruntime's quantization tools write beyond the older QLinear set:
QLinearAveragePool, QLinearSoftmax, QLinearWhere, contrib QuantizeLinear/DequantizeLinear
(QOperator / 16-bit QDQ), QAttention and QEmbedLayerNormalization (quantize_dynamic on a
fused transformer graph). Each against onnxruntime, which defines them; integer outputs
exactly. Plus whole models produced by quantize_static / quantize_dynamic."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _contrib_oracle import MS, check, codes, epoxy_session, qparams, run_both, single_node
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy_sdk.conformance.onnxruntime_oracle import reduce_range, weight_codes

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

INT8 = [np.uint8, np.int8]


# ============================================================================ QLinearAveragePool
POOLS = [
    ({"kernel_shape": [2, 2], "strides": [2, 2]}, (2, 3, 8, 8)),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (1, 4, 7, 9)),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}, (1, 4, 7, 9)),
    ({"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}, (1, 2, 7, 8)),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1], "count_include_pad": 1},
     (1, 2, 7, 8)),
    ({"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, (2, 3, 11)),
    ({"kernel_shape": [2, 2, 2]}, (1, 2, 4, 5, 3)),
    ({"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER"}, (1, 2, 6, 6)),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "channels_last": 1}, (1, 7, 9, 4)),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "channels_last": 1, "count_include_pad": 1}, (2, 7, 9, 5)),
    ({"kernel_shape": [2], "channels_last": 1}, (2, 6, 3)),
]


@pytest.mark.parametrize("dtype", INT8)
@pytest.mark.parametrize("attrs,shape", POOLS, ids=[str(i) for i in range(len(POOLS))])
def test_qlinear_average_pool(dtype, attrs, shape):
    rng = np.random.default_rng(len(shape) * 7 + len(attrs))
    x = codes(rng, dtype, shape)
    (sx, zx), (sy, zy) = qparams(rng, dtype), qparams(rng, dtype)
    check("QLinearAveragePool", [x, sx, zx, sy, zy], attrs, exact=True)


def test_qlinear_average_pool_ties_round_after_the_zero_point():
    # windows averaging to exactly k + 0.5 codes: onnxruntime adds the zero point before it rounds
    x = np.array([[[[0, 1, 2, 3, 4, 5, 6, 7]]]], np.uint8)
    one = np.array(1.0, np.float32)
    for zp in (0, 3):
        check("QLinearAveragePool", [x, one, np.array(0, np.uint8), one, np.array(zp, np.uint8)],
              {"kernel_shape": [1, 2], "strides": [1, 1]}, exact=True)


# ============================================================================ QLinearSoftmax
@pytest.mark.parametrize("dtype", INT8)
@pytest.mark.parametrize("attrs,shape", [
    ({"opset": 13}, (4, 10)), ({"opset": 13, "axis": 1}, (2, 5, 3)), ({"opset": 13, "axis": 0}, (7, 3)),
    ({"opset": 11, "axis": 1}, (2, 5, 3)), ({"opset": 11}, (3, 4, 2)), ({"opset": 13}, (2, 300)),
], ids=["2d", "mid-axis", "axis0", "coerced-axis1", "coerced-default", "long-row"])
@pytest.mark.parametrize("x_scale", [0.02, 0.2, 1.5])
def test_qlinear_softmax(dtype, attrs, shape, x_scale):
    rng = np.random.default_rng(int(x_scale * 100) + shape[-1])
    x = codes(rng, dtype, shape)
    zx = qparams(rng, dtype)[1]
    y_zp = np.array(0 if dtype == np.uint8 else -128, dtype)  # what quantize_static picks
    check("QLinearSoftmax", [x, np.array(x_scale, np.float32), zx, np.array(1 / 256, np.float32), y_zp], attrs,
          exact=True)


@pytest.mark.parametrize("dtype", INT8)
def test_qlinear_softmax_saturates_and_other_output_scales(dtype):
    # a dominant logit: probability ~1 lands on the top code (saturated, not wrapped)
    x = np.array([[127, 5, 5, 5], [0, 0, 0, 0], [7, 7, 6, 5]], dtype)
    lo = np.iinfo(dtype).min
    for ys, yz in [(1 / 256, lo), (1 / 100, lo), (1 / 300, 0)]:
        check("QLinearSoftmax", [x, np.array(1.5, np.float32), np.array(0, dtype), np.array(ys, np.float32),
                                 np.array(yz, dtype)], {"opset": 13}, exact=True)


def test_qlinear_softmax_needs_its_opset_attribute():
    x = np.zeros((2, 3), np.uint8)
    inputs = [x, np.array(0.1, np.float32), np.array(0, np.uint8), np.array(1 / 256, np.float32), np.array(0, np.uint8)]
    with pytest.raises(epoxy.errors.EpoxyError, match=r"the_QLinearSoftmax.*opset.*expected"):
        epoxy_session(single_node("QLinearSoftmax", inputs, {}))


# ============================================================================ QLinearWhere
# (onnxruntime 1.32's quantize_static cannot write it: its QLinearWhere quantizer leaves the
# float branch names behind and the tool fails with "unknown initializers/tensors")
@pytest.mark.parametrize("dtype", INT8)
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), (3, 4)), ((4,), (3, 4), (1,)),
                                    ((), (2, 3), (2, 3))], ids=["same", "broadcast", "scalar-y", "scalar-cond"])
@pytest.mark.parametrize("x_like_z", [False, True], ids=["requantize", "copy"])
def test_qlinear_where(dtype, shapes, x_like_z):
    rng = np.random.default_rng(len(shapes[0]) + 3 * x_like_z)
    cond = np.asarray(rng.random(shapes[0]) < 0.5)
    x, y = codes(rng, dtype, shapes[1]), codes(rng, dtype, shapes[2])
    (sx, zx), (sy, zy), (sz, zz) = qparams(rng, dtype), qparams(rng, dtype), qparams(rng, dtype)
    if x_like_z:
        sx, zx = sz, zz
    check("QLinearWhere", [cond, x, sx, zx, y, sy, zy, sz, zz], exact=True)


# ============================================================================ contrib Q / DQ
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
@pytest.mark.parametrize("axis,scale_shape", [(1, ()), (1, (3,)), (0, (2,)), (-1, (4,))],
                         ids=["per-tensor", "axis1", "axis0", "axis-1"])
def test_contrib_quantize_dequantize(dtype, axis, scale_shape):
    rng = np.random.default_rng(np.iinfo(dtype).bits + axis)
    x = (rng.standard_normal((2, 3, 4)) * 50).astype(np.float32)
    x.flat[:3] = [1e6, -1e6, 0.5]  # saturation, and a tie
    scale = rng.uniform(0.05, 0.5, scale_shape).astype(np.float32)
    zp = np.asarray(codes(rng, dtype, scale_shape) // 4).astype(dtype)
    q = check("QuantizeLinear", [x, scale, zp], {"axis": axis}, exact=True)[0]
    assert q.dtype == dtype
    check("DequantizeLinear", [q, scale, zp], {"axis": axis}, exact=True)


def test_contrib_quantize_dequantize_defaults_and_float16():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    check("QuantizeLinear", [x, np.array(0.01, np.float32)], exact=True)  # no zero point: uint8
    check("DequantizeLinear", [codes(rng, np.int32, (5,)), np.array(0.01, np.float32)], exact=True)
    check("QuantizeLinear", [x.astype(np.float16), np.array(0.01, np.float16), np.array(3, np.int8)], exact=True)
    check("DequantizeLinear", [codes(rng, np.int16, (5,)), np.array(0.01, np.float16), np.array(3, np.int16)],
          exact=True)


def test_contrib_quantize_rejects_unknown_attributes():
    inputs = [np.zeros(3, np.float32), np.array(0.1, np.float32)]
    with pytest.raises(epoxy.errors.EpoxyError, match=r"the_QuantizeLinear.*block_size.*expected only axis"):
        epoxy_session(single_node("QuantizeLinear", inputs, {"block_size": 2}))


# ============================================================================ QAttention
@pytest.mark.parametrize("w_dtype", INT8)
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("mask", [None, "lengths", "2d"])
@pytest.mark.parametrize("past", [False, True])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_qattention(w_dtype, per_column, mask, past, unidirectional):
    rng = np.random.default_rng(17)
    b, s, d, heads, hidden, p = 2, 4, 8, 2, 8, 3
    total = s + (p if past else 0)
    x = codes(rng, np.uint8, (b, s, d))
    w = weight_codes(rng, w_dtype, (d, 3 * hidden))
    bias = rng.standard_normal(3 * hidden).astype(np.float32)
    col = (3 * hidden,) if per_column else ()
    w_scale = rng.uniform(0.001, 0.01, col).astype(np.float32)
    w_zp = np.asarray(codes(rng, w_dtype, col) // 8).astype(w_dtype)
    mask_index = {None: None, "lengths": np.array([total, 2], np.int32),
                  "2d": (rng.random((b, total)) < 0.8).astype(np.int32)}[mask]
    past_kv = rng.standard_normal((2, b, heads, p, hidden // heads)).astype(np.float32) if past else None
    inputs = [x, w, bias, np.array(0.02, np.float32), w_scale, mask_index, np.array(120, np.uint8), w_zp, past_kv]
    check("QAttention", inputs, {"num_heads": heads, "unidirectional": unidirectional}, consts=(1,),
          n_out=2 if past else 1, rtol=1e-4, atol=1e-4)


def test_qattention_optional_zero_points_absent():
    rng = np.random.default_rng(18)
    x, w = codes(rng, np.uint8, (1, 3, 4)), weight_codes(rng, np.int8, (4, 12))
    inputs = [x, w, rng.standard_normal(12).astype(np.float32), np.array(0.05, np.float32),
              np.array(0.01, np.float32)]
    check("QAttention", inputs, {"num_heads": 2}, rtol=1e-4, atol=1e-4)


def test_qattention_bad_num_heads_names_the_node():
    rng = np.random.default_rng(19)
    inputs = [codes(rng, np.uint8, (1, 3, 4)), codes(rng, np.int8, (4, 12)), np.zeros(12, np.float32),
              np.array(0.05, np.float32), np.array(0.01, np.float32)]
    with pytest.raises(epoxy.errors.EpoxyError, match=r"the_QAttention.*num_heads=0.*expected a positive int"):
        epoxy_session(single_node("QAttention", inputs, {"num_heads": 0}))


# ============================================================================ whole quantized models
class _Reader(quantization.CalibrationDataReader):
    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self._it = iter(feeds)

    def get_next(self):  # type: ignore[no-untyped-def]
        return next(self._it, None)


def _cnn() -> onnx.ModelProto:
    """A small seeded CNN touching everything QOperator quantization rewrites."""
    rng = np.random.default_rng(0)

    def init(name: str, a: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(a, np.float32), name)

    inits = [init("w1", rng.standard_normal((8, 3, 3, 3)) * 0.3), init("b1", rng.standard_normal(8) * 0.1),
             init("w2", rng.standard_normal((8, 8, 3, 3)) * 0.2), init("b2", rng.standard_normal(8) * 0.1),
             init("wg", rng.standard_normal((10, 8)) * 0.3), init("bg", rng.standard_normal(10) * 0.1),
             init("half", np.array(0.5))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("AveragePool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("LeakyRelu", ["c2"], ["l2"], alpha=0.1),
        helper.make_node("Sigmoid", ["l2"], ["s2"]),
        helper.make_node("Mul", ["l2", "s2"], ["m2"]),
        helper.make_node("Add", ["m2", "p1"], ["a2"]),
        helper.make_node("AveragePool", ["a2"], ["p2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["p2"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Concat", ["mp", "mp"], ["cc"], axis=1),
        helper.make_node("ReduceMean", ["a2"], ["rm"], axes=[2, 3], keepdims=0),
        helper.make_node("Greater", ["rm", "half"], ["cond"]),
        helper.make_node("Where", ["cond", "rm", "half"], ["wh"]),
        helper.make_node("Gemm", ["wh", "wg", "bg"], ["g"], transB=1),
        helper.make_node("Softmax", ["g"], ["y"], axis=-1),
        helper.make_node("GlobalAveragePool", ["cc"], ["y2"]),
    ]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10]),
                               helper.make_tensor_value_info("y2", TensorProto.FLOAT, [2, 16, 1, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("activation,per_channel", [("QUInt8", False), ("QInt8", True)])
def test_quantize_static_qoperator_model(tmp_path, activation, per_channel):
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(_cnn(), src)
    rng = np.random.default_rng(1)
    calib = [{"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)} for _ in range(4)]
    quantization.quantize_static(str(src), str(dst), _Reader(calib), quant_format=quantization.QuantFormat.QOperator,
                                 activation_type=getattr(quantization.QuantType, activation),
                                 weight_type=quantization.QuantType.QInt8, per_channel=per_channel,
                                 reduce_range=reduce_range())
    model = onnx.load(dst)
    written = {n.op_type for n in model.graph.node if n.domain == MS}
    assert {"QLinearAveragePool", "QLinearSoftmax", "QLinearConcat", "QGemm"} <= written, written
    for _ in range(3):
        feeds = {"x": (rng.standard_normal((2, 3, 8, 8)) * 1.5).astype(np.float32)}
        got, want = run_both(model, feeds)  # asserts every node ran on cpu
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-6)  # float outputs of the same codes


def _fused_bert() -> onnx.ModelProto:
    """A one-layer BERT as onnxruntime's transformer optimizer leaves it (fused contrib ops)."""
    rng = np.random.default_rng(0)
    vocab, positions, d, heads, ff = 30, 16, 16, 2, 32

    def init(name: str, a: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(a, np.float32), name)

    inits = [
        init("wemb", rng.standard_normal((vocab, d)) * 0.5),
        init("pemb", rng.standard_normal((positions, d)) * 0.5),
        init("semb", rng.standard_normal((2, d)) * 0.5),
        init("g0", 1 + 0.1 * rng.standard_normal(d)),
        init("b0", 0.1 * rng.standard_normal(d)),
        init("wqkv", rng.standard_normal((d, 3 * d)) * 0.3),
        init("bqkv", rng.standard_normal(3 * d) * 0.1),
        init("wo", rng.standard_normal((d, d)) * 0.3),
        init("bo", rng.standard_normal(d) * 0.1),
        init("g1", np.ones(d)),
        init("b1", np.zeros(d)),
        init("w1", rng.standard_normal((d, ff)) * 0.3),
        init("bf1", rng.standard_normal(ff) * 0.1),
        init("w2", rng.standard_normal((ff, d)) * 0.3),
        init("bf2", rng.standard_normal(d) * 0.1),
        init("g2", np.ones(d)),
        init("b2", np.zeros(d)),
    ]
    nodes = [
        helper.make_node("EmbedLayerNormalization", ["ids", "seg", "wemb", "pemb", "semb", "g0", "b0", "mask"],
                         ["emb", "mi"], domain=MS, epsilon=1e-12),
        helper.make_node("Attention", ["emb", "wqkv", "bqkv", "mi"], ["att"], domain=MS, num_heads=heads),
        helper.make_node("MatMul", ["att", "wo"], ["ao"]),
        helper.make_node("SkipLayerNormalization", ["ao", "emb", "g1", "b1", "bo"], ["ln1"], domain=MS, epsilon=1e-12),
        helper.make_node("MatMul", ["ln1", "w1"], ["f1"]),
        helper.make_node("BiasGelu", ["f1", "bf1"], ["gl"], domain=MS),
        helper.make_node("MatMul", ["gl", "w2"], ["f2"]),
        helper.make_node("SkipLayerNormalization", ["f2", "ln1", "g2", "b2", "bf2"], ["y"], domain=MS, epsilon=1e-12),
    ]
    infos = [helper.make_tensor_value_info(n, TensorProto.INT32, ["B", "S"]) for n in ("ids", "seg", "mask")]
    graph = helper.make_graph(
        nodes, "bert", infos, [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", d])], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("weight_type,per_channel", [("QInt8", False), ("QUInt8", True)])
def test_quantize_dynamic_transformer_model(tmp_path, weight_type, per_channel):
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(_fused_bert(), src)
    quantization.quantize_dynamic(str(src), str(dst), weight_type=getattr(quantization.QuantType, weight_type),
                                  per_channel=per_channel, reduce_range=reduce_range(),
                                  extra_options={"DefaultTensorType": TensorProto.FLOAT})
    model = onnx.load(dst)
    assert {"QAttention", "QEmbedLayerNormalization"} <= {n.op_type for n in model.graph.node if n.domain == MS}
    rng = np.random.default_rng(3)
    for batch, seq in [(2, 5), (1, 7)]:
        mask = np.ones((batch, seq), np.int32)
        mask[-1, seq // 2:] = 0
        feeds = {"ids": rng.integers(0, 30, (batch, seq)).astype(np.int32),
                 "seg": rng.integers(0, 2, (batch, seq)).astype(np.int32), "mask": mask}
        got, want = run_both(model, feeds)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)


# ============================================================================ QEmbedLayerNormalization
def _quantize_table(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return codes(rng, np.uint8, shape), np.array(rng.uniform(0.005, 0.02), np.float32), \
        np.array(rng.integers(100, 156), np.uint8)


@pytest.mark.parametrize("with_segment", [True, False])
@pytest.mark.parametrize("with_mask", [True, False])
def test_qembed_layer_normalization(with_segment, with_mask):
    rng = np.random.default_rng(4)
    b, s, d = 2, 5, 8
    word, pos, seg = _quantize_table(rng, (20, d)), _quantize_table(rng, (s, d)), _quantize_table(rng, (2, d))
    gamma, beta = _quantize_table(rng, (d,)), _quantize_table(rng, (d,))
    ids = rng.integers(0, 20, (b, s)).astype(np.int32)
    seg_ids = rng.integers(0, 2, (b, s)).astype(np.int32) if with_segment else None
    mask = np.array([[1] * s, [1, 1, 0, 0, 0]], np.int32) if with_mask else None
    tables = [word, pos, seg if with_segment else (None, None, None), gamma, beta]
    inputs = ([ids, seg_ids] + [t[0] for t in tables] + [mask] + [t[1] for t in tables] + [t[2] for t in tables])
    check("QEmbedLayerNormalization", inputs, {"epsilon": 1e-5}, consts=tuple(range(2, 7)) + tuple(range(8, 18)),
          n_out=2, rtol=1e-4, atol=1e-4)


# ============================================================================ DynamicQuantizeLSTM
# onnxruntime with one intra-op thread: with more it quantizes per-thread chunks of the batch
# (see contrib_qlstm.py), so its own outputs depend on the machine.
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("w_dtype", INT8)
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("optional", [False, True], ids=["minimal", "all-inputs"])
def test_dynamic_quantize_lstm(direction, w_dtype, per_column, optional):
    rng = np.random.default_rng(len(direction) + 2 * per_column + 4 * optional)
    t, n, i, h = 5, 3, 4, 6
    d = 2 if direction == "bidirectional" else 1
    col = (d, 4 * h) if per_column else (d,)
    x = rng.standard_normal((t, n, i)).astype(np.float32)
    w, r = weight_codes(rng, w_dtype, (d, i, 4 * h)), weight_codes(rng, w_dtype, (d, h, 4 * h))
    w_scale, r_scale = (rng.uniform(0.005, 0.02, col).astype(np.float32) for _ in range(2))
    zero = np.zeros(col, w_dtype)  # onnxruntime requires zero weight zero points
    extra = [None] * 5
    if optional:
        # sequence_lens present but full: rows ending early change onnxruntime's per-step
        # quantization range in a way not reproduced (see contrib_qlstm.py)
        extra = [rng.standard_normal((d, 8 * h)).astype(np.float32), np.array([5, 5, 5], np.int32),
                 rng.standard_normal((d, n, h)).astype(np.float32), rng.standard_normal((d, n, h)).astype(np.float32),
                 rng.standard_normal((d, 3 * h)).astype(np.float32)]
    inputs = [x, w, r, *extra, w_scale, zero, r_scale, zero]
    check("DynamicQuantizeLSTM", inputs, {"hidden_size": h, "direction": direction}, consts=(1, 2, 8, 9, 10, 11),
          n_out=3, rtol=1e-5, atol=1e-5, threads=1)


def test_quantize_dynamic_lstm_model(tmp_path):
    rng = np.random.default_rng(6)
    t, i, h = 4, 5, 8
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.4, name)
             for name, s in (("W", (2, 4 * h, i)), ("R", (2, 4 * h, h)), ("B", (2, 8 * h)))]
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "yh", "yc"], hidden_size=h, direction="bidirectional")
    graph = helper.make_graph([node], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [t, "N", i])],
                              [helper.make_tensor_value_info(v, TensorProto.FLOAT, None) for v in ("y", "yh", "yc")],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(model, src)
    quantization.quantize_dynamic(str(src), str(dst), weight_type=quantization.QuantType.QInt8,
                                  reduce_range=reduce_range())
    q = onnx.load(dst)
    assert "DynamicQuantizeLSTM" in {n.op_type for n in q.graph.node}
    for batch in (1, 3):
        got, want = run_both(q, {"x": rng.standard_normal((t, batch, i)).astype(np.float32)}, threads=1)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
