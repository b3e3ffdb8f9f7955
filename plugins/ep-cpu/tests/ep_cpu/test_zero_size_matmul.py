"""Matrix products with a zero-size dimension (K = 0: LoRA rank 0, empty features, a Conv
without input channels; M = 0 or N = 0; empty batch axes) at every optimization level,
against onnxruntime.

A product over an empty inner dimension is all zeros of shape (M, N), plus the bias where
there is one. The static shapes matter: with them the planner hands MatMul an ``out=``
buffer (levels disable and basic), and extended/all fuse MatMul + Add + activation.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy

ort = pytest.importorskip("onnxruntime")

LEVELS = ("disable", "basic", "extended", "all")
RNG = np.random.default_rng(7)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _vi(name: str, shape, elem=TensorProto.FLOAT):  # type: ignore[no-untyped-def]
    return helper.make_tensor_value_info(name, elem, list(shape))


def _model(nodes, inputs, outputs, initializers=()):  # type: ignore[no-untyped-def]
    graph = helper.make_graph(nodes, "zero_size", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _compare(model, feeds, level: str, expected=None) -> None:  # type: ignore[no-untyped-def]
    if expected is None:
        ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        expected = ref.run(None, feeds)
    sess = epoxy.InferenceSession(model, providers=["cpu"],
                                  sess_options=epoxy.SessionOptions(graph_optimization_level=level))
    for _ in range(2):  # the second run reuses the planned buffers
        got = sess.run(None, feeds)
        for g, e in zip(got, expected):
            assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, e.shape, g.dtype, e.dtype)
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------ LoRA
def _lora(batch: int, dim: int, rank: int, residual: bool):  # type: ignore[no-untyped-def]
    """``x @ A @ B + bias`` (or ``x + x @ A @ B``) with A [dim, rank], B [rank, dim]."""
    inits = [numpy_helper.from_array(_f32(dim, rank), "A"), numpy_helper.from_array(_f32(rank, dim), "B")]
    nodes = [helper.make_node("MatMul", ["x", "A"], ["t"]), helper.make_node("MatMul", ["t", "B"], ["u"])]
    if residual:
        nodes.append(helper.make_node("Add", ["x", "u"], ["y"]))
    else:
        inits.append(numpy_helper.from_array(_f32(dim), "bias"))
        nodes.append(helper.make_node("Add", ["u", "bias"], ["y"]))
    model = _model(nodes, [_vi("x", [batch, dim])], [_vi("y", [batch, dim])], inits)
    return model, {"x": _f32(batch, dim)}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("residual", [False, True], ids=["bias", "residual"])
@pytest.mark.parametrize("batch,dim,rank", [(3, 4, 0), (3, 0, 2), (0, 4, 2), (1, 8, 0)])
def test_lora(level: str, residual: bool, batch: int, dim: int, rank: int) -> None:
    model, feeds = _lora(batch, dim, rank, residual)
    _compare(model, feeds, level)


def test_lora_rank_zero_is_bias_only() -> None:
    """What onnxruntime gives, spelled out: (B, D) zeros plus the bias."""
    model, feeds = _lora(3, 4, 0, residual=False)
    bias = numpy_helper.to_array(model.graph.initializer[2])
    got = epoxy.InferenceSession(
        model, providers=["cpu"], sess_options=epoxy.SessionOptions(graph_optimization_level="basic")
    ).run(None, feeds)[0]
    np.testing.assert_array_equal(got, np.broadcast_to(bias, (3, 4)))


# ------------------------------------------------------------------------------ MatMul
MATMUL_SHAPES = [
    ((3, 0), (0, 4)),        # K = 0
    ((0, 4), (4, 3)),        # M = 0
    ((3, 4), (4, 0)),        # N = 0
    ((0, 0), (0, 0)),
    ((2, 3, 0), (0, 5)),     # batched, K = 0, 2-D weight (one GEMM over the rows)
    ((2, 3, 0), (2, 0, 5)),  # batched both sides
    ((0, 3, 4), (4, 5)),     # empty batch
    ((2, 3, 4), (2, 4, 0)),
    ((2, 1, 3, 4), (0, 4, 2)),  # batch axis broadcast against 0
    ((0,), (0, 3)),          # 1-D left operand
    ((3, 0), (0,)),          # 1-D right operand
]


def _matmul_model(sa, sb, *, const_b: bool, bias: bool, relu: bool):  # type: ignore[no-untyped-def]
    out_shape = np.matmul(np.zeros(sa), np.zeros(sb)).shape
    b = _f32(*sb)
    inputs, feeds, inits = [_vi("a", sa)], {"a": _f32(*sa)}, []
    if const_b:
        inits.append(numpy_helper.from_array(b, "b"))
    else:
        inputs.append(_vi("b", sb))
        feeds["b"] = b
    nodes = [helper.make_node("MatMul", ["a", "b"], ["mm"])]
    last = "mm"
    if bias and out_shape:
        inits.append(numpy_helper.from_array(_f32(*out_shape[-1:]), "c"))
        nodes.append(helper.make_node("Add", [last, "c"], ["biased"]))
        last = "biased"
    if relu:
        nodes.append(helper.make_node("Relu", [last], ["act"]))
        last = "act"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    return _model(nodes, inputs, [_vi("y", out_shape)], inits), feeds


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("const_b", [False, True], ids=["fed", "weight"])
@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=[f"{a}x{b}" for a, b in MATMUL_SHAPES])
def test_matmul(level: str, const_b: bool, sa, sb) -> None:  # type: ignore[no-untyped-def]
    _compare(*_matmul_model(sa, sb, const_b=const_b, bias=False, relu=False), level)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("bias,relu", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("sa,sb", [((3, 0), (0, 4)), ((2, 3, 0), (0, 5)), ((0, 3, 4), (4, 5)), ((3, 4), (4, 0))])
def test_fused_matmul(level: str, bias: bool, relu: bool, sa, sb) -> None:  # type: ignore[no-untyped-def]
    """MatMul + Add + Relu: FusedMatMul at extended/all, separate nodes below."""
    _compare(*_matmul_model(sa, sb, const_b=True, bias=bias, relu=relu), level)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.int64])
def test_matmul_dtypes(level: str, dtype) -> None:  # type: ignore[no-untyped-def]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                   [_vi("a", [2, 3, 0], elem), _vi("b", [0, 4], elem)], [_vi("y", [2, 3, 4], elem)])
    _compare(model, {"a": np.zeros((2, 3, 0), dtype), "b": np.zeros((0, 4), dtype)}, level)


@pytest.mark.parametrize("level", LEVELS)
def test_matmul_dynamic_shapes(level: str) -> None:
    model = _model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                   [_vi("a", ["M", "K"]), _vi("b", ["K", "N"])], [_vi("y", ["M", "N"])])
    for k in (0, 3):
        _compare(model, {"a": _f32(3, k), "b": _f32(k, 4)}, level)


# ------------------------------------------------------------------------------ Gemm
GEMM_SIZES = [(3, 0, 4), (0, 4, 3), (3, 4, 0), (0, 0, 0)]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("relu", [False, True], ids=["plain", "relu"])
@pytest.mark.parametrize("c_shape", [None, "n", "mn", "1"])
@pytest.mark.parametrize("trans", [(0, 0), (1, 1)], ids=["nn", "tt"])
@pytest.mark.parametrize("m,k,n", GEMM_SIZES)
def test_gemm(level: str, relu: bool, c_shape, trans, m: int, k: int, n: int) -> None:  # type: ignore[no-untyped-def]
    ta, tb = trans
    sa, sb = ((k, m) if ta else (m, k)), ((n, k) if tb else (k, n))
    inits = [numpy_helper.from_array(_f32(*sb), "b")]
    names = ["a", "b"]
    if c_shape is not None:
        inits.append(numpy_helper.from_array(_f32(*{"n": (n,), "mn": (m, n), "1": (1,)}[c_shape]), "c"))
        names.append("c")
    nodes = [helper.make_node("Gemm", names, ["g"], transA=ta, transB=tb, alpha=0.5, beta=2.0)]
    last = "g"
    if relu:  # Gemm + Relu: FusedGemm at extended/all
        nodes.append(helper.make_node("Relu", ["g"], ["act"]))
        last = "act"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    model = _model(nodes, [_vi("a", sa)], [_vi("y", [m, n])], inits)
    _compare(model, {"a": _f32(*sa)}, level)


# ------------------------------------------------------------------------------ integer
@pytest.mark.parametrize("level", LEVELS)
def test_matmul_integer_k0(level: str) -> None:
    """onnxruntime 1.32 leaves the output of a K = 0 MatMulInteger uninitialized, so the
    oracle is the definition: a sum over nothing is 0."""
    model = _model([helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
                   [_vi("a", [3, 0], TensorProto.UINT8), _vi("b", [0, 4], TensorProto.UINT8)],
                   [_vi("y", [3, 4], TensorProto.INT32)])
    feeds = {"a": np.zeros((3, 0), np.uint8), "b": np.zeros((0, 4), np.uint8)}
    _compare(model, feeds, level, expected=[np.zeros((3, 4), np.int32)])


@pytest.mark.parametrize("level", LEVELS)
def test_qlinear_matmul_k0(level: str) -> None:
    """As above (onnxruntime's output is uninitialized): the accumulator is 0, so every
    output is the output zero point."""
    scalars = {"as": np.float32(0.1), "az": np.uint8(3), "bs": np.float32(0.2), "bz": np.uint8(1),
               "ys": np.float32(0.3), "yz": np.uint8(7)}
    inits = [numpy_helper.from_array(np.array(v), k) for k, v in scalars.items()]
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    model = _model([node], [_vi("a", [3, 0], TensorProto.UINT8), _vi("b", [0, 4], TensorProto.UINT8)],
                   [_vi("y", [3, 4], TensorProto.UINT8)], inits)
    feeds = {"a": np.zeros((3, 0), np.uint8), "b": np.zeros((0, 4), np.uint8)}
    _compare(model, feeds, level, expected=[np.full((3, 4), 7, np.uint8)])


# ------------------------------------------------------------------------------ Conv (an im2col GEMM)
CONV_SHAPES = [  # (N, C, spatial, M): C = 0 is K = 0 of the GEMM, the output is the bias
    (2, 0, 5, 4),
    (0, 3, 5, 4),
    (2, 3, 5, 0),
]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("relu", [False, True], ids=["plain", "relu"])  # Conv + Relu: FusedConv at extended/all
@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("n,c,hw,m", CONV_SHAPES)
def test_conv(level: str, relu: bool, bias: bool, n: int, c: int, hw: int, m: int) -> None:
    inits = [numpy_helper.from_array(_f32(m, c, 3, 3), "w")]
    names = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(_f32(m), "b"))
        names.append("b")
    nodes = [helper.make_node("Conv", names, ["conv"])]
    last = "conv"
    if relu:
        nodes.append(helper.make_node("Relu", ["conv"], ["act"]))
        last = "act"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    model = _model(nodes, [_vi("x", [n, c, hw, hw])], [_vi("y", [n, m, hw - 2, hw - 2])], inits)
    _compare(model, {"x": _f32(n, c, hw, hw)}, level)


@pytest.mark.parametrize("level", LEVELS)
def test_deform_conv_without_input_channels_is_the_bias(level: str) -> None:
    """onnxruntime refuses C = 0 here ("Input channels C must be positive"); by the
    definition the sum over no channels is 0, so the output is the bias."""
    n, m, hw = 2, 4, 5
    bias = _f32(m)
    inits = [numpy_helper.from_array(_f32(m, 0, 3, 3), "w"), numpy_helper.from_array(bias, "b")]
    node = helper.make_node("DeformConv", ["x", "w", "offset", "b"], ["y"], kernel_shape=[3, 3])
    graph = helper.make_graph([node], "deform", [_vi("x", [n, 0, hw, hw]), _vi("offset", [n, 18, 3, 3])],
                              [_vi("y", [n, m, 3, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    feeds = {"x": _f32(n, 0, hw, hw), "offset": _f32(n, 18, 3, 3)}
    expected = np.broadcast_to(bias.reshape(1, m, 1, 1), (n, m, 3, 3)).astype(np.float32)
    _compare(model, feeds, level, expected=[expected])
