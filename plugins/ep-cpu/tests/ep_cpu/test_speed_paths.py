"""Correctness of the cpu kernels' fast paths (no timing here): the float32 erf, Winograd
convolutions, weights prepacked from ``NodeSpec.constants``, the Relu/LRN/LayerNorm rewrites.

Each fast path is compared with a plain float64 computation or onnx.reference, and the
prepacked kernels with the same kernel given its weights at run time only.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _calls import counting  # noqa: E402
from _jit_cases import small_layers_sum_as_blas
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import epoxy
from epoxy.contract import NodeSpec, ValueType
from epoxy_ep_cpu.ops import _winograd_f43 as f43_ops
from epoxy_ep_cpu.ops import conv as conv_ops
from epoxy_ep_cpu.ops._elementwise_util import erf, erf_f32
from epoxy_ep_cpu.registry import load_kernels

RNG = np.random.default_rng(7)
_ERF = np.frompyfunc(math.erf, 1, 1)


def exact_erf(x: np.ndarray) -> np.ndarray:
    return _ERF(x.astype(np.float64)).astype(np.float64)


def kernel(op, inputs, attrs=None, opset=17, constants=None, input_types=None, n_out=1):
    """The registered kernel for a node whose inputs are named x0, x1, ...; ``constants``
    maps input indices to the values the factory may prepack."""
    names = tuple(f"x{i}" for i in range(inputs))
    spec = NodeSpec(
        index=0, name="n", op_type=op, domain="", opset=opset, inputs=names,
        outputs=tuple(f"y{i}" for i in range(n_out)), attributes=attrs or {},
        input_types=tuple(input_types or ()), output_types=(),
        constants={f"x{i}": v for i, v in (constants or {}).items()},
    )
    factory, reason = load_kernels().lookup(spec)
    assert factory is not None, reason
    return factory(spec)


# --------------------------------------------------------------------------- erf / Gelu


def test_erf_f32_dense_grid_within_one_ulp():
    # every 512th float32 bit pattern in [0, 4.5], both signs: ~2 million values
    bits = np.arange(0, np.float32(4.5).view(np.uint32), 512, dtype=np.uint32)
    x = np.concatenate([bits.view(np.float32), -bits.view(np.float32)])
    x = x[np.abs(x) > 1e-30]  # math.erf of float32 denormals is not what we test
    got = erf_f32(x)
    assert got.dtype == np.float32
    want = exact_erf(x)
    assert np.max(np.abs(got.astype(np.float64) - want)) < 1e-7
    # at most one float32 ulp from the correctly rounded value
    ulps = np.abs(got.view(np.int32).astype(np.int64) - want.astype(np.float32).view(np.int32).astype(np.int64))
    assert ulps.max() <= 1


def test_erf_f32_small_values_keep_relative_accuracy():
    x = (RNG.standard_normal(20000) * 10.0 ** RNG.integers(-30, -1, 20000)).astype(np.float32)
    got = erf_f32(x).astype(np.float64)
    want = exact_erf(x)
    assert np.max(np.abs(got - want) / np.abs(want)) < 2.5e-7


def test_erf_f32_special_values_and_shapes():
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 5.0, -7.0, 3.99, 1e30], np.float32)
    got = erf_f32(x)
    np.testing.assert_array_equal(got[[0, 1, 3, 4, 5, 6, 8]], [1, -1, 0, 0, 1, -1, 1])
    assert np.isnan(got[2]) and np.signbit(got[4])
    assert erf_f32(np.zeros((0, 3), np.float32)).shape == (0, 3)
    assert erf_f32(np.float32(0.5) * np.ones((), np.float32)).shape == ()
    big = RNG.standard_normal((3, 70001)).astype(np.float32)  # spans several blocks
    np.testing.assert_allclose(erf_f32(big), exact_erf(big), rtol=0, atol=1e-7)
    strided = big[:, ::3]
    np.testing.assert_array_equal(erf_f32(strided), erf_f32(np.ascontiguousarray(strided)))


def test_erf_dtypes():
    assert erf(np.array([0.5], np.float16)).dtype == np.float32  # float_unary casts back
    x64 = np.linspace(-6, 6, 1001)
    np.testing.assert_allclose(erf(x64), exact_erf(x64), rtol=1e-14, atol=1e-16)
    assert erf(x64).dtype == np.float64


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_erf_and_gelu_kernels(dtype):
    x = (RNG.standard_normal((4, 257)) * 3).astype(dtype)
    y = kernel("Erf", 1, opset=13)(x)
    assert y.dtype == dtype
    tol = {np.float32: 1e-7, np.float64: 1e-14, np.float16: 1e-3}[dtype]
    np.testing.assert_allclose(y.astype(np.float64), exact_erf(x), rtol=0, atol=tol)
    g = kernel("Gelu", 1, opset=20)(x)
    assert g.dtype == dtype
    x64 = x.astype(np.float64)
    want = 0.5 * x64 * (1 + exact_erf(x64 / math.sqrt(2)))
    np.testing.assert_allclose(g.astype(np.float64), want, rtol={np.float16: 2e-3}.get(dtype, 1e-6), atol=tol * 4)
    np.testing.assert_array_equal(x, x.copy())  # input untouched


# --------------------------------------------------------------------------- Conv


def conv_reference(x, w, b=None, **attrs):
    """Conv through onnx.reference in float64 (the oracle)."""
    feeds = {"x": x.astype(np.float64), "w": w.astype(np.float64)}
    ins = ["x", "w"]
    if b is not None:
        feeds["b"] = b.astype(np.float64)
        ins.append("b")
    node = helper.make_node("Conv", ins, ["y"], **attrs)
    vis = [helper.make_tensor_value_info(k, 11, v.shape) for k, v in feeds.items()]
    graph = helper.make_graph([node], "g", vis, [helper.make_tensor_value_info("y", 11, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ReferenceEvaluator(model).run(None, feeds)[0]


WINOGRAD_CASES = [
    # (x shape, M, pads) - each one takes the Winograd path
    ((1, 64, 20, 20), 128, (1, 1, 1, 1)),
    ((1, 96, 9, 9), 96, (1, 1, 1, 1)),  # odd output: padded tiles, cropped
    ((2, 96, 15, 12), 88, (0, 0, 0, 0)),  # batch 2, no padding
    ((1, 128, 10, 11), 65, (2, 1, 0, 2)),  # asymmetric pads
    ((1, 100, 30, 30), 96, (1, 1, 1, 1)),  # several bands
]


def _winograd_case(xs, m, pads):  # type: ignore[no-untyped-def]
    """Random float32 input, weights and bias for a 3x3 layer, its attributes, the float64
    oracle's output and the output size."""
    x = RNG.standard_normal(xs).astype(np.float32)
    w = (RNG.standard_normal((m, xs[1], 3, 3)) * 0.1).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    attrs = {"kernel_shape": [3, 3], "pads": list(pads)}
    out = [xs[2] + pads[0] + pads[2] - 2, xs[3] + pads[1] + pads[3] - 2]
    return x, w, b, attrs, conv_reference(x, w, b, **attrs), out


@pytest.mark.parametrize("xs,m,pads", WINOGRAD_CASES)
def test_conv_winograd_matches_reference(xs, m, pads, monkeypatch):
    monkeypatch.setattr(conv_ops, "_WINO_BAND", 1 << 14)  # force several bands
    x, w, b, attrs, want, (hh, ww) = _winograd_case(xs, m, pads)
    assert conv_ops.use_winograd(xs[1], m, [hh, ww])
    for constants in ({}, {1: w, 2: b}):  # weights at run time only / prepacked
        got = kernel("Conv", 3, attrs, constants=constants)(x, w, b)
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-4)
    # the F(2x2, 3x3) path itself (float32 layers like these mostly take F(4x4, 3x3))
    direct = conv_ops.conv_winograd(x, conv_ops.winograd_weights(w), [pads[0], pads[1]], [hh, ww], b)
    np.testing.assert_allclose(direct, want, rtol=1e-4, atol=2e-4)


@pytest.mark.parametrize(
    "xs,m,pads", WINOGRAD_CASES + [((1, 32, 6, 7), 32, (1, 1, 1, 1)), ((1, 40, 3, 3), 8, (2, 2, 2, 2))]
)
def test_conv_f43_matches_reference(xs, m, pads, monkeypatch):
    monkeypatch.setattr(f43_ops, "_BAND_ELEMENTS", 1 << 12)  # force several bands ...
    monkeypatch.setattr(f43_ops, "_MIN_BAND_TILES", 4)
    x, w, b, _, want, (hh, ww) = _winograd_case(xs, m, pads)
    got = f43_ops.conv_f43(x, f43_ops.f43_weights(w), [pads[0], pads[1]], [hh, ww], b)
    assert got.dtype == np.float32 and got.shape == want.shape and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-4)
    nobias = f43_ops.conv_f43(x, f43_ops.f43_weights(w), [pads[0], pads[1]], [hh, ww])
    np.testing.assert_allclose(nobias, want - b.reshape(1, m, 1, 1), rtol=1e-4, atol=2e-4)


def test_conv_kernel_takes_f43_for_float32_and_f22_for_float64(monkeypatch):
    calls = _counting(monkeypatch, "conv_f43")
    x = RNG.standard_normal((1, 64, 24, 24))
    w = RNG.standard_normal((96, 64, 3, 3)) * 0.1
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    want = conv_reference(x, w, **attrs)
    got32 = kernel("Conv", 2, attrs, constants={1: w.astype(np.float32)})(x.astype(np.float32), w.astype(np.float32))
    np.testing.assert_allclose(got32, want, rtol=1e-4, atol=2e-4)
    assert len(calls) == 1
    f22 = _counting(monkeypatch, "conv_winograd")
    got64 = kernel("Conv", 2, attrs, constants={1: w})(x, w)
    np.testing.assert_allclose(got64, want, rtol=1e-10, atol=1e-10)  # F(2x2, 3x3) is exact enough for float64
    assert len(calls) == 1 and len(f22) == 1


def test_f43_weights_transform():
    w = RNG.standard_normal((5, 7, 3, 3)).astype(np.float32)
    g = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])
    want = np.einsum("ai,mcij,bj->abmc", g, w.astype(np.float64), g).reshape(36, 5, 7)
    np.testing.assert_allclose(f43_ops.f43_weights(w), want, rtol=1e-6, atol=1e-6)


def test_pick_path_table():
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    assert conv_ops.pick_path(256, 256, (3, 3), [56, 56], True, f32) == "F(4,3)"
    assert conv_ops.pick_path(256, 256, (3, 3), [56, 56], True, f64) == "F(2,3)"
    assert conv_ops.pick_path(512, 512, (3, 3), [7, 7], True, f32) == "F(2,3)"  # 4 tiles: GEMMs too narrow
    assert conv_ops.pick_path(128, 32, (3, 3), [56, 56], True, f32) == "F(4,3)"  # DenseNet growth, large image
    assert conv_ops.pick_path(128, 32, (3, 3), [14, 14], True, f32) == "row-shift"
    assert conv_ops.pick_path(16, 64, (3, 3), [55, 55], True, f32) == "im2col"  # few input channels
    assert conv_ops.pick_path(3, 64, (3, 3), [224, 224], True, f32) == "im2col"
    assert conv_ops.pick_path(128, 32, (5, 5), [28, 28], True, f32) == "row-shift"
    assert conv_ops.pick_path(128, 64, (1, 1), [28, 28], True, f32) == "im2col"
    assert conv_ops.pick_path(128, 128, (3, 3), [12, 12], False, f32) == "im2col"  # per-call weights, small image


def test_conv_winograd_float64_and_float16():
    x = RNG.standard_normal((1, 128, 12, 12))
    w = RNG.standard_normal((64, 128, 3, 3)) * 0.1
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    assert conv_ops.use_winograd(128, 64, [12, 12])
    want = conv_reference(x, w, **attrs)
    got = kernel("Conv", 2, attrs, constants={1: w})(x, w)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    x16, w16 = x.astype(np.float16), w.astype(np.float16)
    got16 = kernel("Conv", 2, attrs, constants={1: w16})(x16, w16)
    assert got16.dtype == np.float16
    np.testing.assert_allclose(got16.astype(np.float64), conv_reference(x16, w16, **attrs), rtol=2e-2, atol=5e-2)


def test_winograd_weights_transform():
    w = RNG.standard_normal((5, 7, 3, 3)).astype(np.float32)
    g = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
    want = np.einsum("ai,mcij,bj->abmc", g, w.astype(np.float64), g).reshape(16, 5, 7)
    np.testing.assert_allclose(conv_ops.winograd_weights(w), want, rtol=1e-6, atol=1e-6)


def test_use_winograd_thresholds():
    assert not conv_ops.use_winograd(16, 64, [55, 55])  # few input channels
    assert not conv_ops.use_winograd(64, 256, [13, 13])  # 64 channels on a small image
    assert conv_ops.use_winograd(256, 384, [13, 13])
    assert conv_ops.use_winograd(128, 64, [56, 56])
    assert conv_ops.use_winograd(64, 64, [56, 56])  # 1.25x on one BLAS thread
    assert not conv_ops.use_winograd(64, 48, [56, 56])  # too little GEMM per pixel
    assert not conv_ops.use_winograd(128, 64, [12, 12], prepacked=False)  # weights transformed per call
    assert conv_ops.use_winograd(128, 64, [28, 28], prepacked=False)


def _transform_homes(transform: str) -> list:
    """Where ``transform`` is looked up: the numpy module, and the jit tier's compiled
    transforms (float32 weights, when numba is here: the provider then calls those)."""
    homes = [conv_ops]
    try:
        from epoxy_ep_cpu.jit import kernels_winograd_weights
    except ImportError:
        return homes
    return homes + ([kernels_winograd_weights] if hasattr(kernels_winograd_weights, transform) else [])


@pytest.mark.parametrize("dtype,transform", [(np.float64, "winograd_weights"), (np.float32, "f43_weights")])
def test_conv_prepacks_winograd_at_session_creation(dtype, transform):
    # a 40x40 map: the jit tier's GEMM takes small maps from Winograd (and then builds no layout)
    x_type = ValueType(kind="tensor", elem_type=1, dtype=np.dtype(dtype), shape=(1, 128, 40, 40))
    w = (RNG.standard_normal((64, 128, 3, 3)) * 0.1).astype(dtype)
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    calls = []
    homes = _transform_homes(transform)
    reals = [getattr(home, transform) for home in homes]

    def counted(real):
        def counting(v):
            calls.append(v.shape)
            return real(v)
        return counting

    for home, real in zip(homes, reals):
        setattr(home, transform, counted(real))
    try:
        fn = kernel("Conv", 2, attrs, constants={1: w}, input_types=[x_type, None])
        assert calls == [(64, 128, 3, 3)]  # in the factory
        x = RNG.standard_normal((1, 128, 40, 40)).astype(dtype)
        got = fn(x, w)
        fn(x, w)
        assert len(calls) == 1  # never again
    finally:
        for home, real in zip(homes, reals):
            setattr(home, transform, real)
    np.testing.assert_allclose(got, conv_reference(x, w, **attrs), rtol=1e-4, atol=2e-4)


@pytest.mark.parametrize(
    "xs,ws,attrs",
    [
        ((1, 8, 9, 9), (6, 8, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
        ((2, 6, 7, 7), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),  # depthwise
        ((1, 6, 7, 7), (12, 2, 3, 3), {"group": 3}),
        ((1, 5, 6, 6), (4, 5, 1, 1), {}),
        ((1, 4, 11), (3, 4, 3), {"dilations": [2]}),
    ],
)
def test_conv_constant_weights_same_as_runtime(monkeypatch, xs, ws, attrs):
    small_layers_sum_as_blas(monkeypatch)
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal(ws).astype(np.float32)
    b = RNG.standard_normal(ws[0]).astype(np.float32)
    attrs = {"kernel_shape": list(ws[2:]), **attrs}
    runtime = kernel("Conv", 3, attrs)(x, w, b)
    packed = kernel("Conv", 3, attrs, constants={1: w, 2: b})(x, w, b)
    np.testing.assert_array_equal(runtime, packed)
    np.testing.assert_allclose(packed, conv_reference(x, w, b, **attrs), rtol=1e-5, atol=1e-5)
    # a constant weight but a bias given at run time: no prepacking, still right
    half = kernel("Conv", 3, attrs, constants={1: w})(x, w, b)
    np.testing.assert_array_equal(half, runtime)


@pytest.mark.parametrize(
    "xs,attrs",
    [
        ((1, 256, 7, 7), {"pads": [1, 1, 1, 1]}),
        ((2, 260, 9, 8), {"pads": [1, 0, 2, 1], "strides": [2, 1]}),
        ((1, 300, 10, 10), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
        ((1, 256, 5, 6), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ],
)
def test_conv_depthwise_channels_last(xs, attrs):
    c = xs[1]
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal((c, 1, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32)
    attrs = {"kernel_shape": [3, 3], "group": c, **attrs}
    assert c >= conv_ops._DEPTHWISE_CL_MIN_C
    want = conv_reference(x, w, b, **attrs)
    for constants in ({}, {1: w, 2: b}):
        got = kernel("Conv", 3, attrs, constants=constants)(x, w, b)
        assert got.shape == want.shape and got.flags.c_contiguous
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    got = kernel("Conv", 2, attrs)(x, w)  # no bias
    np.testing.assert_allclose(got, conv_reference(x, w, **attrs), rtol=1e-5, atol=1e-5)


def test_conv_session_with_initializer_weights():
    """End to end: initializers (IR >= 4) reach the factory as constants."""
    x = RNG.standard_normal((1, 128, 14, 14)).astype(np.float32)
    w = (RNG.standard_normal((64, 128, 3, 3)) * 0.1).astype(np.float32)
    b = RNG.standard_normal(64).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", 1, x.shape)], [helper.make_tensor_value_info("y", 1, x.shape)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    got = epoxy.InferenceSession(model, providers=["cpu"]).run(None, {"x": x})[0]
    want = conv_reference(x, w, b, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-4)


# --------------------------------------------------------------------------- MatMul / BatchNorm


@pytest.mark.parametrize("a_shape", [(2, 3, 5, 8), (7, 8), (8,), (3, 8)])
def test_matmul_constant_weight(a_shape):
    a = RNG.standard_normal(a_shape).astype(np.float32)
    b = RNG.standard_normal((8, 6)).astype(np.float32)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    for constants in ({}, {1: b}):
        fn = kernel("MatMul", 2, opset=13, constants=constants)
        got = fn(a, b)
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        if a.ndim > 1:  # a non-contiguous left operand
            at = np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2)
            np.testing.assert_allclose(fn(at, b), want, rtol=1e-5, atol=1e-5)


def test_matmul_constant_weight_float16_and_int():
    a = RNG.standard_normal((2, 4, 5)).astype(np.float16)
    b = RNG.standard_normal((5, 3)).astype(np.float16)
    got = kernel("MatMul", 2, opset=13, constants={1: b})(a, b)
    assert got.dtype == np.float16
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-2, atol=1e-2)
    ai = RNG.integers(-5, 5, (2, 3, 4)).astype(np.int32)
    bi = RNG.integers(-5, 5, (4, 2)).astype(np.int32)
    np.testing.assert_array_equal(kernel("MatMul", 2, opset=13, constants={1: bi})(ai, bi), ai @ bi)


def test_batchnorm_constant_params():
    x = RNG.standard_normal((2, 5, 4, 3)).astype(np.float32)
    scale, bias = RNG.standard_normal(5).astype(np.float32), RNG.standard_normal(5).astype(np.float32)
    mean, var = RNG.standard_normal(5).astype(np.float32), RNG.random(5).astype(np.float32) + 0.1
    args = (x, scale, bias, mean, var)
    runtime = kernel("BatchNormalization", 5, {"epsilon": 1e-3}, opset=15)(*args)
    packed = kernel("BatchNormalization", 5, {"epsilon": 1e-3}, opset=15, constants=dict(enumerate(args[1:], 1)))(*args)
    np.testing.assert_array_equal(runtime, packed)
    x64 = x.astype(np.float64)
    sh = (1, 5, 1, 1)
    want = (x64 - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + 1e-3) * scale.reshape(sh) + bias.reshape(sh)
    np.testing.assert_allclose(packed, want, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- Relu / LRN / LayerNorm


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_clip_path(dtype):
    x = np.array([np.nan, -np.inf, np.inf, -1.5, 0.0, 2.5, -0.0], dtype)
    y = kernel("Relu", 1, opset=14)(x)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y[1:], [0, np.inf, 0, 0, 2.5, 0])
    assert np.isnan(y[0])
    x = RNG.standard_normal((3, 4, 5)).astype(dtype)[:, ::2]
    np.testing.assert_array_equal(kernel("Relu", 1, opset=14)(x), np.maximum(x, 0))
    assert kernel("Relu", 1, opset=14)(np.asarray(dtype(-3))).shape == ()


@pytest.mark.parametrize("size,xs", [(5, (2, 7, 4, 3)), (3, (1, 2, 5)), (4, (1, 6, 2, 2)), (9, (1, 3, 2, 2))])
def test_lrn_against_float64_formula(size, xs):
    x = RNG.standard_normal(xs).astype(np.float32)
    attrs = {"size": size, "alpha": 0.02, "beta": 0.75, "bias": 2.0}
    x64 = x.astype(np.float64)
    c = xs[1]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    ss = np.stack([np.sum(x64[:, max(0, i - before) : min(c, i + after + 1)] ** 2, axis=1) for i in range(c)], axis=1)
    want = x64 / (2.0 + 0.02 / size * ss) ** 0.75
    np.testing.assert_allclose(kernel("LRN", 1, attrs, opset=13)(x), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "xs,axis,scale_shape",
    [((2, 5, 16), -1, (16,)), ((3, 4, 6), 1, (4, 6)), ((2, 3, 8), -1, (1, 8)), ((4, 8), 0, (4, 8))],
)
def test_layer_norm_in_place_path(xs, axis, scale_shape):
    x = RNG.standard_normal(xs).astype(np.float32)
    scale = RNG.standard_normal(scale_shape).astype(np.float32)
    bias = RNG.standard_normal(scale_shape).astype(np.float32)
    xc = x.copy()
    y = kernel("LayerNormalization", 3, {"axis": axis, "epsilon": 1e-5})(x, scale, bias)
    np.testing.assert_array_equal(x, xc)
    ax = axis % x.ndim
    axes = tuple(range(ax, x.ndim))
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=axes, keepdims=True)
    want = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(axis=axes, keepdims=True) + 1e-5) * scale + bias
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    # a non-contiguous input takes the plain path
    xt = np.asfortranarray(x)
    np.testing.assert_allclose(kernel("LayerNormalization", 3, {"axis": axis})(xt, scale, bias),
                               kernel("LayerNormalization", 3, {"axis": axis})(x, scale, bias), rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- row-shift Conv, flat depthwise


def _counting(monkeypatch, name):
    """Calls of the numpy conv path ``name``, with the jit tier off (it takes small and
    depthwise layers, see ``conv.use_jit``)."""
    monkeypatch.setattr(conv_ops.jit, "kernels", lambda name: None)
    return counting(monkeypatch, conv_ops, name)


@pytest.mark.parametrize(
    "xs,ws,attrs",
    [
        ((1, 128, 9, 7), (32, 128, 3, 3), {"pads": [1, 1, 1, 1]}),  # DenseNet growth layer
        ((2, 5, 8, 6), (7, 5, 3, 2), {"pads": [0, 1, 2, 0]}),  # batch 2, asymmetric pads
        ((1, 4, 5, 9), (3, 4, 1, 3), {}),  # one kernel row, no padding
        ((1, 6, 11, 10), (48, 6, 5, 5), {"auto_pad": "SAME_UPPER"}),
        ((1, 3, 4, 4), (2, 3, 4, 4), {}),  # kernel as large as the image
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_row_shift_matches_reference(xs, ws, attrs, dtype, monkeypatch):
    calls = _counting(monkeypatch, "conv_row_shift")
    x = RNG.standard_normal(xs).astype(dtype)
    w = RNG.standard_normal(ws).astype(dtype)
    b = RNG.standard_normal(ws[0]).astype(dtype)
    attrs = {"kernel_shape": list(ws[2:]), **attrs}
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for constants in ({}, {1: w, 2: b}):
        got = kernel("Conv", 3, attrs, constants=constants)(x, w, b)
        want = conv_reference(x, w, b, **attrs)
        assert got.dtype == dtype and got.shape == want.shape and got.flags.c_contiguous
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    got = kernel("Conv", 2, attrs)(x, w)
    np.testing.assert_allclose(got, conv_reference(x, w, **attrs), rtol=tol, atol=tol)
    assert len(calls) == 3


def test_conv_row_shift_not_for_many_channels_or_strides(monkeypatch):
    calls = _counting(monkeypatch, "conv_row_shift")
    x = RNG.standard_normal((1, 8, 9, 9)).astype(np.float32)
    for ws, attrs in [((64, 8, 3, 3), {}), ((16, 8, 3, 3), {"strides": [2, 2]}), ((16, 8, 3, 3), {"dilations": [2, 2]}),
                      ((16, 8, 1, 1), {})]:
        w = RNG.standard_normal(ws).astype(np.float32)
        attrs = {"kernel_shape": list(ws[2:]), **attrs}
        got = kernel("Conv", 2, attrs)(x, w)
        np.testing.assert_allclose(got, conv_reference(x, w, **attrs), rtol=1e-4, atol=1e-4)
    assert calls == []


@pytest.mark.parametrize(
    "xs,k,attrs",
    [
        ((1, 136, 10, 9), (3, 3), {"pads": [1, 1, 1, 1]}),  # ShuffleNet-style
        ((2, 6, 7, 8), (3, 3), {"pads": [0, 1, 2, 0]}),
        ((1, 300, 12, 12), (3, 3), {"pads": [1, 1, 1, 1]}),  # many channels, large image: not channels-last
        ((1, 5, 6, 7), (5, 3), {"auto_pad": "SAME_LOWER"}),
        ((1, 4, 6, 6), (1, 1), {}),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_depthwise_flat(xs, k, attrs, dtype, monkeypatch):
    calls = _counting(monkeypatch, "conv_depthwise_flat")
    c = xs[1]
    x = RNG.standard_normal(xs).astype(dtype)
    w = RNG.standard_normal((c, 1) + k).astype(dtype)
    b = RNG.standard_normal(c).astype(dtype)
    attrs = {"kernel_shape": list(k), "group": c, **attrs}
    tol = 1e-5 if dtype == np.float32 else 1e-10
    want = conv_reference(x, w, b, **attrs)
    for constants in ({}, {1: w, 2: b}):
        got = kernel("Conv", 3, attrs, constants=constants)(x, w, b)
        assert got.dtype == dtype and got.shape == want.shape and got.flags.c_contiguous
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(kernel("Conv", 2, attrs)(x, w), conv_reference(x, w, **attrs), rtol=tol, atol=tol)
    assert len(calls) == 3


def test_conv_depthwise_small_image_stays_channels_last(monkeypatch):
    flat = _counting(monkeypatch, "conv_depthwise_flat")
    cl = _counting(monkeypatch, "conv_depthwise_cl")
    x = RNG.standard_normal((1, 544, 7, 7)).astype(np.float32)
    w = RNG.standard_normal((544, 1, 3, 3)).astype(np.float32)
    attrs = {"kernel_shape": [3, 3], "group": 544, "pads": [1, 1, 1, 1]}
    got = kernel("Conv", 2, attrs, constants={1: w})(x, w)
    np.testing.assert_allclose(got, conv_reference(x, w, **attrs), rtol=1e-5, atol=1e-5)
    assert flat == [] and len(cl) == 1


# --------------------------------------------------------------------------- pooling, BatchNorm out=


def pool_reference(op, x, **attrs):
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", 1 if x.dtype == np.float32 else 11, x.shape)],
        [helper.make_tensor_value_info("y", 1 if x.dtype == np.float32 else 11, [])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize(
    "xs,attrs",
    [
        ((1, 9, 14, 14), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # Inception's stride-1 pools
        ((2, 3, 7, 5), {"kernel_shape": [3, 2], "pads": [0, 1, 1, 0]}),
        ((1, 4, 6, 7), {"kernel_shape": [1, 3]}),
        ((1, 2, 5, 5), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
        ((1, 3, 9, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),  # strided: separable
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pool_flat_grid(op, xs, attrs, dtype):
    if op == "MaxPool" and "count_include_pad" in attrs:
        return
    from epoxy_ep_cpu.ops import pool as pool_ops

    x = RNG.standard_normal(xs).astype(dtype)
    fn = kernel(op, 1, attrs, opset=19 if op == "AveragePool" else 12)
    got = fn(x)
    want = pool_reference(op, x, **attrs)
    assert got.dtype == dtype and got.shape == want.shape and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    if op == "AveragePool" and attrs.get("strides", [1, 1]) == [1, 1]:
        # same additions in the same order as the generic separable path
        a = pool_ops._PoolAttrs(_spec(op, attrs))
        out_sp, begin, end, extra = a.geometry(x)
        xp = pool_ops.pad_spatial(x, begin, [e + ex for e, ex in zip(end, extra)], 0)
        np.testing.assert_array_equal(pool_ops._separable_flat(xp, a, out_sp, np.add, 0),
                                      pool_ops._separable(xp, a, out_sp, np.add, dtype))


def _spec(op, attrs):
    return NodeSpec(index=0, name="n", op_type=op, domain="", opset=19, inputs=("x",), outputs=("y",),
                    attributes=attrs, input_types=(), output_types=())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batchnorm_out_buffer(dtype):
    x = RNG.standard_normal((2, 5, 4, 3)).astype(dtype)
    params = [RNG.standard_normal(5).astype(dtype) for _ in range(3)] + [RNG.random(5).astype(dtype) + 0.5]
    fn = kernel("BatchNormalization", 5, {"epsilon": 1e-3}, opset=15, constants=dict(enumerate(params, 1)))
    assert getattr(fn, "supports_out", False)
    want = fn(x, *params)
    out = np.full_like(x, np.nan)
    got = fn(x, *params, out=out)
    assert got is out
    np.testing.assert_array_equal(got, want)
    s, b, m, v = (p.astype(np.float64).reshape(1, -1, 1, 1) for p in params)
    np.testing.assert_allclose(want, (x - m) / np.sqrt(v + 1e-3) * s + b, rtol=1e-5, atol=1e-5)
    # an out buffer that does not fit: allocates as usual
    got = fn(x, *params, out=np.empty((2, 5, 4, 3), dtype=np.float16))
    np.testing.assert_array_equal(got, want)
