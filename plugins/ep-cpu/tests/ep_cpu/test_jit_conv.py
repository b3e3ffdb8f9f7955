"""The compiled direct convolution (jit/kernels_conv.py) against its oracles: the numpy path
(jit off), the ONNX reference (Conv) and onnxruntime (com.microsoft FusedConv), on a grid of
groups, strides, dilations, pads, batch sizes and activations with a residual.

Tolerance: the direct kernel sums the ``K = C/G * kh * kw`` products of an output in another
order than im2col's GEMM, so the two differ by at most about ``K`` roundings of the largest
partial sum: ``atol = K * eps * max|x| * max|w|`` (plus the bias and residual, of order 1),
relative 1e-5 (float32) / 1e-12 (float64)."""

from __future__ import annotations

import numpy as np
import pytest
from _hostile import In, one_node, run_onnxruntime, run_reference
from _jit_cases import close, run_cpu

pytest.importorskip("numba")

from epoxy_ep_cpu.ops import conv as conv_ops  # noqa: E402
from epoxy_ep_cpu.ops.fused import DOMAIN  # noqa: E402

# the small-layer kernel would take many of these layers: its own tests are test_jit_conv_small.py
pytestmark = pytest.mark.usefixtures("no_small_conv")


def _tol(x: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    k = w[0].size
    eps = float(np.finfo(x.dtype).eps)
    scale = float(np.abs(x).max(initial=1.0) * np.abs(w).max(initial=1.0))
    return (1e-5 if x.dtype == np.float32 else 1e-12), 4 * k * eps * max(scale, 1.0) * 4


def _data(seed: int, x_shape, w_shape, dtype, bias: bool):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype) if bias else None
    return x, w, b


# (x shape, w shape, attributes): every case is one the routing sends to the jit kernel
# (checked below), so the comparisons exercise it
CASES = [
    ((1, 4, 9, 9), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),  # depthwise
    ((2, 6, 11, 10), (6, 1, 3, 3), {"group": 6, "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # depthwise s2, batch 2
    ((1, 5, 12, 12), (5, 1, 7, 7), {"group": 5, "pads": [3, 3, 3, 3]}),  # convnext's 7x7
    ((1, 4, 10, 13), (4, 1, 3, 3), {"group": 4, "pads": [0, 1, 2, 1]}),  # asymmetric pads
    ((1, 4, 10, 10), (4, 1, 3, 3), {"group": 4, "dilations": [2, 1], "pads": [2, 1, 2, 1]}),  # dilated
    ((1, 3, 9, 11), (3, 1, 3, 3), {"group": 3, "strides": [1, 2], "pads": [1, 0, 1, 0]}),  # strided in W only
    ((1, 4, 9, 9), (4, 1, 3, 3), {"group": 4, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 4, 8, 8), (4, 1, 4, 4), {"group": 4, "auto_pad": "SAME_LOWER"}),
    ((1, 4, 8, 8), (4, 1, 3, 3), {"group": 4, "auto_pad": "VALID"}),
    ((1, 1, 7, 7), (1, 1, 3, 3), {"pads": [1, 1, 1, 1]}),  # one channel
    ((1, 8, 8, 8), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # a tiny plain conv (exporter resnet)
    ((2, 6, 6, 6), (4, 3, 3, 3), {"group": 2, "pads": [1, 0, 1, 1]}),  # grouped, batch 2
    ((1, 3, 6, 6), (6, 1, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}),  # depth multiplier 2
    ((1, 8, 6, 6), (8, 8, 1, 1), {}),  # 1x1
    ((1, 3, 16, 16), (8, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # an exporter stem
    ((2, 3, 17, 15), (4, 3, 4, 4), {"strides": [4, 4]}),  # patchify, batch 2, a remainder
    ((1, 4, 9, 11), (6, 2, 3, 2), {"group": 2, "strides": [3, 2], "dilations": [1, 2], "pads": [1, 0, 2, 1]}),
    ((1, 4, 5, 5), (4, 1, 3, 3), {"group": 4, "pads": [3, 3, 3, 3]}),  # pads past the kernel: zero rows
    # stride-1 depthwise (kernels_depthwise): 5-wide rows, the general row loop (2, 4 wide), one
    # kernel row, non-square windows, asymmetric pads, batch 3 over 7 channels
    ((3, 7, 9, 8), (7, 1, 5, 5), {"group": 7, "pads": [2, 1, 2, 3]}),
    ((1, 6, 8, 10), (6, 1, 2, 4), {"group": 6, "pads": [0, 2, 1, 1]}),
    ((2, 5, 6, 12), (5, 1, 1, 7), {"group": 5, "pads": [0, 3, 0, 3]}),
    ((1, 3, 11, 4), (3, 1, 7, 1), {"group": 3, "pads": [3, 0, 3, 0]}),
    ((1, 9, 4, 4), (9, 1, 7, 7), {"group": 9, "pads": [3, 3, 3, 3]}),  # convnext's 7x7 on a 4x4 map
    # stride-2 depthwise (its phase grids): odd and even sizes, both pad parities, 2- to 7-wide
    ((1, 5, 13, 12), (5, 1, 5, 5), {"group": 5, "strides": [2, 2], "pads": [2, 1, 2, 2]}),
    ((2, 3, 9, 10), (3, 1, 7, 7), {"group": 3, "strides": [2, 2], "pads": [3, 3, 3, 3]}),
    ((1, 4, 8, 7), (4, 1, 2, 2), {"group": 4, "strides": [2, 2]}),
    ((1, 3, 7, 6), (3, 1, 3, 3), {"group": 3, "strides": [2, 2], "pads": [0, 1, 1, 0]}),
    ((1, 2, 5, 5), (2, 1, 4, 4), {"group": 2, "strides": [2, 2], "pads": [1, 2, 2, 1]}),
]


def _ids(cases):
    return [f"{c[0]}-{c[1]}-{sorted(c[2].items())}" for c in cases]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES, ids=_ids(CASES))
def test_conv_matches_numpy_path_and_reference(x_shape, w_shape, attrs, dtype):
    x, w, b = _data(sum(x_shape) + len(attrs), x_shape, w_shape, dtype, True)
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], attrs, 22)
    on, off, ref = run_cpu(case, True, runs=3), run_cpu(case, False), run_reference(case)
    rtol, atol = _tol(x, w)
    close(on, off, rtol, atol)
    close(on, ref, max(rtol, 1e-5), atol)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES, ids=_ids(CASES))
def test_every_case_routes_to_the_jit_kernel(x_shape, w_shape, attrs):
    """The comparisons above would pass vacuously if these layers took the numpy path."""
    from epoxy_ep_cpu.ops._conv_util import resolve_pads

    nsp = 2
    strides = tuple(attrs.get("strides", (1, 1)))
    dil = tuple(attrs.get("dilations", (1, 1)))
    out_sp, begin, end, _ = resolve_pads(x_shape[2:], w_shape[2:], strides, dil, attrs.get("pads", (0,) * 2 * nsp),
                                         attrs.get("auto_pad", "NOTSET"))
    assert conv_ops.use_jit(x_shape[1], w_shape[0], attrs.get("group", 1), w_shape[2:], strides, begin, end, out_sp,
                            np.dtype(np.float32))


def test_jit_on_dispatches_to_the_compiled_conv(monkeypatch):
    from epoxy_ep_cpu.jit import kernels_conv

    real, calls = kernels_conv.run_conv2d, []

    def spy(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(kernels_conv, "run_conv2d", spy)
    x, w, b = _data(1, (1, 4, 6, 6), (4, 1, 3, 3), np.float32, True)
    case = one_node("Conv", [x, w, b], {"group": 4, "dilations": [2, 2]}, 22)  # weights fed at run time
    run_cpu(case, False)
    assert calls == []
    run_cpu(case, True)
    assert calls == [1]


@pytest.mark.parametrize("const", [False, True])
def test_stride_one_depthwise_layers_run_the_depthwise_kernel(monkeypatch, const):
    """Stride-1 depthwise layers (weights constant or fed at run time) run
    ``kernels_depthwise``, not the direct kernel."""
    from epoxy_ep_cpu.jit import kernels_conv, kernels_depthwise

    calls = []
    real = kernels_depthwise.DepthwiseCall.__call__
    monkeypatch.setattr(kernels_depthwise.DepthwiseCall, "__call__",
                        lambda self, x, z: calls.append(1) or real(self, x, z))
    monkeypatch.setattr(kernels_conv, "run_conv2d", lambda *a: pytest.fail("the direct kernel ran"))
    x, w, b = _data(1, (1, 4, 6, 6), (4, 1, 3, 3), np.float32, True)
    case = one_node("Conv", [x, In(w, const=const), In(b, const=const)], {"group": 4, "pads": [1, 1, 1, 1]}, 22)
    close(run_cpu(case, True), run_reference(case), *_tol(x, w))
    assert calls == [1]


SMALL_MAPS = [((8, 6, 2, 2), (6, 1, 5, 5), {"group": 6, "pads": [2, 2, 2, 2]}),  # mobilenet_v3's last maps
              ((2, 5, 4, 4), (5, 1, 5, 5), {"group": 5, "pads": [2, 2, 2, 2], "strides": [2, 2]}),
              ((1, 3, 2, 3), (3, 1, 3, 3), {"group": 3, "pads": [0, 1, 1, 0]}),  # asymmetric pads, 2x2 out
              ((1, 4, 1, 1), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]})]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), SMALL_MAPS, ids=_ids(SMALL_MAPS))
def test_depthwise_small_maps_take_the_per_output_kernel(monkeypatch, x_shape, w_shape, attrs, residual, dtype):
    """Depthwise layers with at most ``SMALL_MAP`` outputs a plane run ``depthwise_small`` (only
    the taps that reach the input), with FusedConv's residual and activation, matching the numpy
    path and the reference."""
    from epoxy_ep_cpu.jit import kernels_depthwise

    used = []
    real = kernels_depthwise.depthwise_small
    monkeypatch.setattr(kernels_depthwise, "depthwise_small", lambda *a: used.append(1) or real(*a))
    monkeypatch.setattr(kernels_depthwise.direct, "overload", lambda fn, sample: fn)
    x, w, b = _data(sum(x_shape), x_shape, w_shape, dtype, True)
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], attrs, 22)
    close(run_cpu(case, True, runs=2), run_reference(case), *_tol(x, w))
    assert used
    if residual:
        out = run_reference(case)[0]
        z = np.random.default_rng(3).standard_normal(out.shape).astype(dtype)
        fused = one_node("FusedConv", [x, In(w, const=True), In(b, const=True), z],
                         dict(attrs, activation="HardSwish"), 1, domain=DOMAIN)
        close(run_cpu(fused, True, runs=2), run_cpu(fused, False), *_tol(x, w))


CHANNEL_MAPS = [((8, 48, 3, 3), (48, 1, 3, 3), {"group": 48, "pads": [1, 1, 1, 1]}),
                ((8, 32, 6, 6), (32, 1, 3, 3), {"group": 32, "pads": [1, 1, 1, 1], "strides": [2, 2]}),  # 3x3 out
                ((2, 40, 4, 4), (40, 1, 5, 5), {"group": 40, "pads": [2, 2, 2, 2], "strides": [2, 2]}),
                ((1, 35, 3, 4), (35, 1, 3, 3), {"group": 35, "pads": [0, 1, 2, 0]}),  # asymmetric pads, odd C
                ((3, 96, 3, 3), (96, 1, 5, 5), {"group": 96, "pads": [2, 2, 2, 2]}),
                ((1, 33, 2, 2), (33, 1, 5, 5), {"group": 33, "pads": [2, 2, 2, 2]}),
                # register tiles (session 50): rows past one tile of 8 and a masked channel
                # block (11 columns, 36 channels), convnext's 7x7 on 8x8, 5x5 stride 2
                ((2, 36, 10, 11), (36, 1, 3, 3), {"group": 36, "pads": [1, 1, 1, 1]}),
                ((1, 16, 8, 8), (16, 1, 7, 7), {"group": 16, "pads": [3, 3, 3, 3]}),
                ((1, 24, 9, 9), (24, 1, 5, 5), {"group": 24, "pads": [2, 2, 2, 2], "strides": [2, 2]})]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CHANNEL_MAPS, ids=_ids(CHANNEL_MAPS))
def test_depthwise_small_maps_with_channels_take_the_channels_kernel(monkeypatch, x_shape, w_shape, attrs, dtype):
    """Depthwise layers of 32 channels and more on small maps run ``kernels_depthwise_channels``
    (vectorized across channels), with FusedConv's residual and activation, matching the numpy
    path and the reference; a layer whose maps are too large keeps the plane kernel."""
    from epoxy_ep_cpu.jit import kernels_depthwise, kernels_depthwise_channels

    used = []
    real = kernels_depthwise_channels.depthwise_channels
    monkeypatch.setattr(kernels_depthwise_channels, "depthwise_channels", lambda *a: used.append(1) or real(*a))
    monkeypatch.setattr(kernels_depthwise.direct, "overload", lambda fn, sample: fn)
    monkeypatch.setattr(kernels_depthwise, "grid_planes",
                        lambda *a: pytest.fail("the plane kernel ran a small map"))
    x, w, b = _data(sum(x_shape), x_shape, w_shape, dtype, True)
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], attrs, 22)
    close(run_cpu(case, True, runs=2), run_reference(case), *_tol(x, w))
    assert len(used) == 2
    out = run_reference(case)[0]
    z = np.random.default_rng(3).standard_normal(out.shape).astype(dtype)
    for act, params in (("Relu", ()), ("Clip", (-0.5, 0.7)), ("HardSwish", ())):
        fused = one_node("FusedConv", [x, In(w, const=True), In(b, const=True), z],
                         dict(attrs, activation=act, **({"activation_params": list(params)} if params else {})), 1,
                         domain=DOMAIN)
        used.clear()
        close(run_cpu(fused, True, runs=2), run_cpu(fused, False), *_tol(x, w))
        assert len(used) == 2, act  # the residual and the activation in (or right after) its pass


@pytest.mark.parametrize(("act", "params"), [("HardSwish", ()), ("HardSigmoid", (0.3, 0.4))])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [SMALL_MAPS[0], CHANNEL_MAPS[0]],
                         ids=["per-output", "channels"])
def test_depthwise_small_map_stores_apply_hard_activations_bit_for_bit(monkeypatch, x_shape, w_shape, attrs, act,
                                                                       params):
    """The small-map depthwise kernels apply HardSwish in their store: the same bits as the
    layer without it followed by the standalone op, and no pass after the kernel. HardSigmoid
    runs after them (their fastmath flags would fuse its multiply-add): the same bits too."""
    from epoxy_ep_cpu.jit import kernels_special
    from epoxy_ep_cpu.ops.activation import hard_sigmoid_into, hard_swish_into

    after: list[str] = []
    for loop in ("hard_swish_loop", "hard_sigmoid_loop"):
        real_loop = getattr(kernels_special, loop)
        monkeypatch.setattr(kernels_special, loop, lambda *a, _l=loop, _r=real_loop: after.append(_l) or _r(*a))
    x, w, b = _data(sum(x_shape), x_shape, w_shape, np.float32, True)
    z = np.random.default_rng(5).standard_normal(run_reference(
        one_node("Conv", [x, In(w, const=True), In(b, const=True)], attrs, 22))[0].shape).astype(np.float32)
    inputs = [x, In(w, const=True), In(b, const=True), z]
    with_act = dict(attrs, activation=act, **({"activation_params": list(params)} if params else {}))
    (fused,) = run_cpu(one_node("FusedConv", inputs, with_act, 1, domain=DOMAIN), True, runs=2)
    (plain,) = run_cpu(one_node("FusedConv", inputs, attrs, 1, domain=DOMAIN), True, runs=2)
    assert after == ([] if act == "HardSwish" else ["hard_sigmoid_loop"] * 2)
    want = hard_swish_into(plain) if act == "HardSwish" else hard_sigmoid_into(plain, *params)
    np.testing.assert_array_equal(fused, want)


def test_depthwise_kernel_kinds_follow_the_measured_rule():
    from epoxy_ep_cpu.jit.kernels_depthwise import kernel_kind

    assert kernel_kind(384, 48, 3, 3, 1) == "channels"
    assert kernel_kind(384, 48, 4, 4, 1) == "channels"
    assert kernel_kind(288, 96, 7, 7, 1) == "channels"
    assert kernel_kind(96, 96, 14, 14, 1) == "channels"
    assert kernel_kind(96, 96, 16, 16, 1) == "grid"  # past 14x14 the one-pass grid kernel is as fast
    assert kernel_kind(64, 16, 2, 2, 1) == "small"  # a narrow layer's smallest maps
    assert kernel_kind(64, 16, 7, 7, 1) == "channels"
    assert kernel_kind(64, 16, 8, 8, 1) == "grid"
    assert kernel_kind(16, 16, 8, 8, 1, 49) == "channels"  # convnext's 7x7 layers
    assert kernel_kind(128, 128, 20, 20, 1, 25) == "channels"
    assert kernel_kind(128, 128, 28, 28, 1, 25) == "grid"
    assert kernel_kind(64, 8, 4, 4, 1) == "grid"  # too few channels for a vector
    assert kernel_kind(384, 48, 4, 4, 2) == "grid"  # split over threads
    assert kernel_kind(960, 960, 7, 7, 1, 25) == "channels"


def test_a_depthwise_layer_split_over_the_native_pool_keeps_the_grid_kernel(monkeypatch):
    """A one-thread-grain layer large enough for the native pool's split runs the grid kernel
    on the threads, not the one-thread channels kernel its small maps would take."""
    from epoxy_ep_cpu.jit import kernels_depthwise

    monkeypatch.setattr(kernels_depthwise.threads, "native", lambda: True)
    w = np.ones((672, 1, 5, 5), np.float32)
    b = np.zeros(672, np.float32)
    one = kernels_depthwise.DepthwiseCall((1, 672, 7, 7), np.dtype(np.float32), w, b, (2, 2), (7, 7), 0, 0.0, 0.0, 1)
    two = kernels_depthwise.DepthwiseCall((1, 672, 7, 7), np.dtype(np.float32), w, b, (2, 2), (7, 7), 0, 0.0, 0.0, 2)
    assert (one._kind, one._shares._count) == ("channels", 1)
    assert two._kind == "grid" and two._shares._count == 2


def test_a_batch_on_the_channels_kernel_splits_over_its_images(monkeypatch):
    """A batch the channels kernel takes splits over its images on the threads (each share
    with its own scratch), with the same bits as on one thread, residual included; one image
    too large for one thread keeps the grid kernel's split."""
    from epoxy_ep_cpu.jit import kernels_depthwise

    monkeypatch.setattr(kernels_depthwise.threads, "native", lambda: True)
    rng = np.random.default_rng(11)
    w = rng.standard_normal((16, 1, 7, 7)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    x = rng.standard_normal((8, 16, 8, 8)).astype(np.float32)
    z = rng.standard_normal((8, 16, 8, 8)).astype(np.float32)
    calls = {t: kernels_depthwise.DepthwiseCall(x.shape, np.dtype(np.float32), w, b, (3, 3), (8, 8), 1, 0.0, 0.0, t)
             for t in (1, 2)}
    assert calls[1]._kind == calls[2]._kind == "channels"
    assert (calls[1]._shares._count, calls[2]._shares._count) == (1, 2)
    np.testing.assert_array_equal(calls[2](x, z), calls[1](x, z))
    one = kernels_depthwise.DepthwiseCall((1, 96, 14, 14), np.dtype(np.float32), np.ones((96, 1, 5, 5), np.float32),
                                          np.zeros(96, np.float32), (2, 2), (14, 14), 0, 0.0, 0.0, 2)
    assert one._kind == "grid" and one._shares._count == 2


@pytest.mark.parametrize(("act", "params"), [("Relu", ()), ("LeakyRelu", (0.1,)), ("Clip", (-0.5, 0.7)),
                                             ("HardSwish", ())])
def test_channels_kernel_activations_without_a_residual_are_the_standalone_ops_bits(monkeypatch, act, params):
    """Without a residual the channels kernel applies the activation over each output row
    while it is contiguous, one loop per code (session 49: the per-element branch in the
    transposing store was mispredicted): the same bits as the layer without it followed by
    the activation, NaN and signed zeros included."""
    from epoxy_ep_cpu.jit import kernels_depthwise_channels
    from epoxy_ep_cpu.ops.activation import hard_swish_into

    used = []
    real = kernels_depthwise_channels.depthwise_channels
    monkeypatch.setattr(kernels_depthwise_channels, "depthwise_channels", lambda *a: used.append(1) or real(*a))
    x_shape, w_shape, attrs = CHANNEL_MAPS[0]
    x, w, b = _data(7, x_shape, w_shape, np.float32, True)
    x[0, 0, 0, 0] = np.nan
    x[1, 1] = 0.0
    b[1] = -0.0
    inputs = [x, In(w, const=True), In(b, const=True)]
    with_act = dict(attrs, activation=act, **({"activation_params": list(params)} if params else {}))
    (fused,) = run_cpu(one_node("FusedConv", inputs, with_act, 1, domain=DOMAIN), True, runs=2)
    (plain,) = run_cpu(one_node("FusedConv", inputs, attrs, 1, domain=DOMAIN), True, runs=2)
    assert used, "the channels kernel did not run"
    want = {"Relu": lambda v: np.where(v < 0, np.float32(0), v),
            "LeakyRelu": lambda v: np.where(v >= 0, v, v * np.float32(params[0])),
            "Clip": lambda v: np.where(v > np.float32(params[1]), np.float32(params[1]),
                                       np.where(v < np.float32(params[0]), np.float32(params[0]), v)),
            "HardSwish": hard_swish_into}[act](plain)
    assert np.isnan(fused).any()
    np.testing.assert_array_equal(fused, want)
    np.testing.assert_array_equal(np.signbit(fused), np.signbit(want))


def test_large_plain_conv_keeps_the_numpy_path(monkeypatch):
    from epoxy_ep_cpu.jit import kernels_conv

    monkeypatch.setattr(kernels_conv, "run_conv2d", lambda *a: pytest.fail("routed to jit"))
    x, w, b = _data(2, (1, 16, 20, 20), (32, 16, 3, 3), np.float32, True)
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], {"pads": [1, 1, 1, 1]}, 22)
    close(run_cpu(case, True), run_reference(case), *_tol(x, w))


def test_negative_pads_keep_the_numpy_path():
    x, w, b = _data(3, (1, 3, 8, 8), (3, 1, 3, 3), np.float32, True)
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], {"group": 3, "pads": [-1, 0, 1, 1]}, 22)
    close(run_cpu(case, True), run_cpu(case, False), 0, 0)


def test_non_finite_inputs_follow_the_numpy_path():
    x, w, b = _data(4, (1, 4, 7, 7), (4, 1, 3, 3), np.float32, True)
    x[0, 1, 3, 3] = np.nan
    x[0, 2, 0, 0] = np.inf
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], {"group": 4, "pads": [1, 1, 1, 1]}, 22)
    on, off = run_cpu(case, True), run_cpu(case, False)
    close(on, off, *_tol(np.nan_to_num(x, posinf=0), w))


# -- FusedConv: the epilogue in the kernel's pass -----------------------------------------------
ACTS = [("Relu", ()), ("LeakyRelu", (0.2,)), ("LeakyRelu", (1.5,)), ("Clip", (-0.5, 0.7)), ("Sigmoid", ()),
        ("Tanh", ()), ("HardSigmoid", (0.3, 0.4)), ("", ())]
FUSED_SHAPES = [((2, 4, 7, 7), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
                ((1, 6, 9, 9), (6, 1, 3, 3), {"group": 6, "strides": [2, 2], "pads": [0, 1, 1, 0]}),
                ((1, 8, 6, 6), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]})]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("act", "params"), ACTS, ids=[f"{a or 'none'}{p}" for a, p in ACTS])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), FUSED_SHAPES, ids=_ids(FUSED_SHAPES))
@pytest.mark.parametrize("residual", ["none", "full", "broadcast"])
def test_fused_conv_epilogue(x_shape, w_shape, attrs, act, params, residual, dtype):
    x, w, b = _data(len(act) + sum(x_shape), x_shape, w_shape, dtype, True)
    out_sp = [((x_shape[2 + i] + attrs["pads"][i] + attrs["pads"][i + 2] - w_shape[2 + i])
               // attrs.get("strides", (1, 1))[i] + 1) for i in range(2)]
    rng = np.random.default_rng(7)
    z = {"none": None,
         "full": rng.standard_normal((x_shape[0], w_shape[0], *out_sp)).astype(dtype),
         "broadcast": rng.standard_normal((1, w_shape[0], 1, 1)).astype(dtype)}[residual]
    full = dict(attrs, **({"activation": act} if act else {}),
                **({"activation_params": list(params)} if params else {}))
    case = one_node("FusedConv", [x, In(w, const=True), In(b, const=True), z], full, 1, domain="com.microsoft")
    on, off = run_cpu(case, True, runs=3), run_cpu(case, False)
    rtol, atol = _tol(x, w)
    close(on, off, rtol, atol)
    if dtype == np.float32 and residual != "broadcast":  # onnxruntime's Z is the output's shape
        close(on, run_onnxruntime(case), 1e-4, max(atol, 1e-5))


def test_fused_conv_nan_through_the_activations():
    """NaN stays NaN through the fused Relu / LeakyRelu / Clip, as in the standalone kernels."""
    x, w, b = _data(5, (1, 3, 5, 5), (3, 1, 3, 3), np.float32, True)
    x[0, 0, 2, 2] = np.nan
    for act, params in (("Relu", ()), ("LeakyRelu", (0.1,)), ("Clip", (-1.0, 1.0))):
        full = {"group": 3, "pads": [1, 1, 1, 1], "activation": act, **({"activation_params": list(params)} if params
                                                                         else {})}
        case = one_node("FusedConv", [x, In(w, const=True), In(b, const=True)], full, 1, domain="com.microsoft")
        on, off = run_cpu(case, True, runs=2), run_cpu(case, False)
        assert np.isnan(on[0]).sum() == np.isnan(off[0]).sum() == 9
        close(on, off, 1e-5, 1e-5)


def test_fused_conv_applies_residual_and_activation_in_the_kernel(monkeypatch):
    """With Z of the output's shape and a Relu, the numpy tail never runs under jit."""
    from epoxy_ep_cpu.ops import fused

    x, w, b = _data(6, (1, 4, 6, 6), (4, 1, 3, 3), np.float32, True)
    z = np.random.default_rng(6).standard_normal((1, 4, 6, 6)).astype(np.float32)
    case = one_node("FusedConv", [x, In(w, const=True), In(b, const=True), z],
                    {"group": 4, "pads": [1, 1, 1, 1], "activation": "Relu"}, 1, domain="com.microsoft")
    off = run_cpu(case, False)
    monkeypatch.setattr(fused, "_add_then_activate", lambda *a: pytest.fail("numpy tail ran"))
    close(run_cpu(case, True), off, *_tol(x, w))


@pytest.mark.parametrize("shape", [((1, 4, 9, 9), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),  # depthwise
                                   ((1, 8, 6, 6), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # direct / grid
                                   ((1, 8, 6, 6), (16, 8, 1, 1), {})])  # pointwise
@pytest.mark.parametrize(("act", "params"), [("HardSwish", ()), ("HardSigmoid", ()), ("HardSigmoid", (0.3, 0.4)),
                                             ("SiLU", ())])
def test_hard_activations_in_the_kernel_match_the_standalone_ops(monkeypatch, shape, act, params):
    """epoxy's own FusedConv with MobileNetV3's and EfficientNet's activations: applied right
    after the compiled pass on its fresh output (the general numpy tail never runs), equal to
    the numpy path; NaN and infinities as the standalone ops."""
    from epoxy_ep_cpu.ops import fused

    x_shape, w_shape, attrs = shape
    x, w, b = _data(11, x_shape, w_shape, np.float32, True)
    x *= 4  # past the hard activations' knees at -3 and 3
    tol = _tol(x, w)
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    full = dict(attrs, activation=act, **({"activation_params": list(params)} if params else {}))
    case = one_node("FusedConv", [x, In(w, const=True), In(b, const=True)], full, 1, domain=DOMAIN)
    off = run_cpu(case, False)
    monkeypatch.setattr(fused, "_add_then_activate", lambda *a: pytest.fail("numpy tail ran"))
    on = run_cpu(case, True, runs=2)
    close(on, off, *tol)
    assert np.array_equal(np.isnan(on[0]), np.isnan(off[0]))


def test_activation_codes_agree_with_the_kernel():
    from epoxy_ep_cpu.jit import activations

    codes = {name: code for name, (code, _) in conv_ops.JIT_ACTIVATIONS.items()}
    assert codes == {"": activations.ACT_NONE, "Relu": activations.ACT_RELU, "LeakyRelu": activations.ACT_LEAKY,
                     "Clip": activations.ACT_CLIP}


_PARALLEL_CASES = CASES[:4] + CASES[10:12]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), _PARALLEL_CASES, ids=_ids(_PARALLEL_CASES))
def test_parallel_variant_matches_the_serial_one(monkeypatch, split_recorder, x_shape, w_shape, attrs):
    """Layers big enough for two threads run on two: forced here on small ones (grain 1), they
    must give the serial kernels' values exactly (same order per output): the depthwise
    kernel's planes in two shares for depthwise layers, the direct kernel's ``prange`` variant
    for grouped layers, the grid GEMM's shares for group-1 ones."""
    from epoxy_ep_cpu.jit import kernels_conv, kernels_conv_gemm, kernels_depthwise, threads

    x, w, b = _data(8, x_shape, w_shape, np.float32, True)
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], attrs, 22)
    serial = run_cpu(case, True, jit_threads=1, runs=2)
    monkeypatch.setattr(kernels_conv, "MAC_GRAIN", 1)
    splits = split_recorder(kernels_conv_gemm)
    calls = []
    group = attrs.get("group", 1)
    out_sp = [x_shape[2 + i] + attrs.get("pads", [0] * 4)[i] + attrs.get("pads", [0] * 4)[i + 2] - w_shape[2 + i] + 1
              for i in range(2)]
    direct = group > 1 or (x_shape[0] == 1 and kernels_conv.block_layout(w_shape, (1, 1), (1, 1), out_sp, group)[4])
    # the grid GEMM's im2col and store run as two shares of planes each (threads.Split)
    module, names, per_run = (kernels_conv, ("flat_parallel",), 1) if direct else (None, (), 2)
    if kernels_depthwise.fits(x_shape[1], w_shape[0], group, w_shape[2:], attrs.get("strides", (1, 1)),
                              attrs.get("dilations", (1, 1)), [0, 0], [0, 0]):
        module, names, per_run = None, (), 1  # its planes in two shares (threads.Shares)
        splits = split_recorder(threads)
    for name in names:
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real: calls.append(1) or _real(*a))
    close(run_cpu(case, True, jit_threads=2, runs=2), serial, 0, 0)
    if module is None:  # split in two on both runs: the grid GEMM's two passes, the depthwise planes
        assert [count for _, count in splits] == [2] * 2 * per_run
    else:
        assert len(calls) == 2 * per_run  # each kernel, on both runs


def test_without_numba_conv_and_fused_conv_run_the_numpy_path(monkeypatch):
    import epoxy_ep_cpu.jit as jit_pkg
    from epoxy_ep_cpu.jit import kernels_conv
    from epoxy_ep_cpu.jit.probe import Availability

    monkeypatch.setattr(jit_pkg, "availability", lambda: Availability(False, reason="test"))
    monkeypatch.setattr(kernels_conv, "run_conv2d", lambda *a: pytest.fail("jit ran without numba"))
    x, w, b = _data(9, (1, 4, 6, 6), (4, 1, 3, 3), np.float32, True)
    conv = one_node("Conv", [x, In(w, const=True), In(b, const=True)], {"group": 4, "pads": [1, 1, 1, 1]}, 22)
    close(run_cpu(conv, True), run_cpu(conv, False), 0, 0)
    fused = one_node("FusedConv", [x, In(w, const=True), In(b, const=True)],
                     {"group": 4, "pads": [1, 1, 1, 1], "activation": "Relu"}, 1, domain="com.microsoft")
    close(run_cpu(fused, True), run_cpu(fused, False), 0, 0)


def test_concurrent_runs_of_one_session_agree():
    """The compiled conv is re-entrant: 4 threads running one session give the serial outputs."""
    import warnings
    from concurrent.futures import ThreadPoolExecutor

    import epoxy

    x, w, b = _data(10, (2, 8, 10, 10), (8, 1, 3, 3), np.float32, True)
    case = one_node("Conv", [In(x), In(w, const=True), In(b, const=True)], {"group": 8, "pads": [1, 1, 1, 1]}, 22)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the one-node model's untyped output
        sess = epoxy.InferenceSession(case.model.SerializeToString(), providers=[("cpu", {"jit": True})])
    feeds = [{"x0": np.random.default_rng(i).standard_normal(x.shape).astype(np.float32)} for i in range(16)]
    want = [sess.run(None, f)[0] for f in feeds]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda f: sess.run(None, f)[0], feeds * 4))
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, want[i % 16])


def _count_prepared(monkeypatch, *kinds: str) -> list[tuple[int, ...]]:
    """Input shapes of the prepared conv calls made from now on (of ``kinds``: class names;
    default all four)."""
    from epoxy_ep_cpu.jit import (
        kernels_conv,
        kernels_conv_gemm,
        kernels_conv_implicit,
        kernels_pointwise,
        kernels_winograd,
    )

    seen: list[tuple[int, ...]] = []
    for cls in (kernels_conv.Conv2dCall, kernels_pointwise.PointwiseCall, kernels_conv_gemm.GridConvCall,
                kernels_winograd.WinogradCall, kernels_conv_implicit.ImplicitConvCall):
        if kinds and cls.__name__ not in kinds:
            continue
        real = cls.__call__
        monkeypatch.setattr(cls, "__call__", lambda self, x, z, _real=real: seen.append(x.shape) or _real(self, x, z))
    return seen


def _batch_axis_conv_relu(w: np.ndarray, b: np.ndarray, hw: int, pads: list[int]) -> bytes:
    """Conv (stride 1, same-size output) + Relu on a ``batch`` axis: checked model bytes."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    c, m = w.shape[1], w.shape[0]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=pads), helper.make_node("Relu", ["c"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", m, hw, hw])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    onnx.checker.check_model(model)
    return model


def test_repeated_shapes_take_prepared_calls(monkeypatch):
    """A shape's first run decides (geometry, path, epilogue) and prepares a call that this
    and every later run of the shape go through (counted), each batch size of a dynamic axis
    its own, with the values of the numpy path."""

    import epoxy

    _, w, b = _data(11, (1, 8, 8, 8), (8, 8, 3, 3), np.float32, True)
    model = _batch_axis_conv_relu(w, b, 8, [1, 1, 1, 1])
    seen = _count_prepared(monkeypatch)
    on = epoxy.InferenceSession(model, providers=[("cpu", {"jit": True})])
    off = epoxy.InferenceSession(model, providers=[("cpu", {"jit": False})])
    rng = np.random.default_rng(12)
    for batch in (1, 1, 2, 2, 2, 1):
        x = rng.standard_normal((batch, 8, 8, 8)).astype(np.float32)
        close(on.run(None, {"x": x}), off.run(None, {"x": x}), *_tol(x, w))
    assert seen == [(1, 8, 8, 8)] * 2 + [(2, 8, 8, 8)] * 3 + [(1, 8, 8, 8)]


# -- 1x1 layers the direct kernel leaves to BLAS: prepared GEMM + compiled epilogue ---------------
POINTWISE = [((1, 16, 8, 8), (32, 16, 1, 1)), ((2, 24, 6, 6), (40, 24, 1, 1)), ((1, 64, 5, 6), (12, 64, 1, 1))]


def _count_pointwise(monkeypatch) -> list[tuple[int, ...]]:
    return _count_prepared(monkeypatch, "PointwiseCall")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("act", "params"), ACTS, ids=[f"{a or 'none'}{p}" for a, p in ACTS])
@pytest.mark.parametrize(("x_shape", "w_shape"), POINTWISE, ids=[str(c) for c in POINTWISE])
@pytest.mark.parametrize("residual", ["none", "full", "broadcast"])
def test_pointwise_calls_match_the_numpy_path(monkeypatch, x_shape, w_shape, act, params, residual, dtype):
    """Every run of a 1x1 layer's shape takes the pointwise call (counted; prepared once, or
    made per run for a broadcast residual, which the numpy tail adds), the same values each
    time (``runs=3``), equal to the numpy path's and onnxruntime's."""
    assert not conv_ops.use_jit(x_shape[1], w_shape[0], 1, (1, 1), (1, 1), [0, 0], [0, 0], list(x_shape[2:]),
                                np.dtype(dtype))  # the direct kernel does not take these
    x, w, b = _data(len(act) + sum(x_shape), x_shape, w_shape, dtype, True)
    rng = np.random.default_rng(8)
    z = {"none": None, "full": rng.standard_normal((x_shape[0], w_shape[0], *x_shape[2:])).astype(dtype),
         "broadcast": rng.standard_normal((1, w_shape[0], 1, 1)).astype(dtype)}[residual]
    full = {**({"activation": act} if act else {}), **({"activation_params": list(params)} if params else {})}
    case = one_node("FusedConv", [x, In(w, const=True), In(b, const=True), z], full, 1, domain="com.microsoft")
    seen = _count_pointwise(monkeypatch)
    on, off = run_cpu(case, True, runs=3), run_cpu(case, False)
    assert seen == [x_shape] * 3
    rtol, atol = _tol(x, w)
    close(on, off, rtol, atol)
    if dtype == np.float32 and residual != "broadcast":
        close(on, run_onnxruntime(case), 1e-4, max(atol, 1e-5))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
def test_a_1x1_map_runs_on_packed_weights(monkeypatch, threads, residual, batch):
    """A classifier head written as a 1x1 convolution on 1x1 maps (densenet121's) multiplies
    its rows by packed weights, as Gemm's head does (counted), then adds the bias and residual
    and applies the activation: the numpy path's values within a float32 GEMM's rounding."""
    from epoxy_ep_cpu.jit import kernels_sgemm

    if kernels_sgemm.support() is not None:
        pytest.skip(kernels_sgemm.support())
    products: list[tuple[int, ...]] = []
    real = kernels_sgemm.PackedFloatWeights.matmul_any
    monkeypatch.setattr(kernels_sgemm.PackedFloatWeights, "matmul_any",
                        lambda self, a, out=None: products.append(a.shape) or real(self, a, out))
    x, w, b = _data(31 + batch, (batch, 320, 1, 1), (1000, 320, 1, 1), np.float32, True)
    z = np.random.default_rng(9).standard_normal((batch, 1000, 1, 1)).astype(np.float32) if residual else None
    case = one_node("FusedConv", [x, In(w, const=True), In(b, const=True), z], {"activation": "Relu"}, 1,
                    domain="com.microsoft")
    on, off = run_cpu(case, True, runs=2, jit_threads=threads), run_cpu(case, False)
    assert products == [(batch, 320)] * 2
    close(on, off, *_tol(x, w))


@pytest.mark.parametrize("attrs", [{"strides": [2, 2]}, {"pads": [1, 0, 0, 1]}, {"group": 8}],
                         ids=["strided", "padded", "two-channels-a-group"])
def test_pointwise_calls_only_take_plain_1x1_layers(monkeypatch, attrs):
    seen = _count_pointwise(monkeypatch)
    w_shape = (32, 16 // attrs.get("group", 1), 1, 1)
    x, w, b = _data(13, (1, 16, 9, 9), w_shape, np.float32, True)
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], attrs, 22)
    close(run_cpu(case, True, runs=3), run_reference(case), 1e-5, 1e-4)
    assert seen == []


def test_pointwise_call_per_batch_size_and_parallel_epilogue(monkeypatch):
    """Each batch size of a dynamic axis gets its own call; the epilogue's parallel variant
    (forced by a grain of 1) gives the serial one's values."""

    import epoxy
    from epoxy_ep_cpu.jit import kernels_pointwise

    _, w, b = _data(14, (1, 16, 8, 8), (32, 16, 1, 1), np.float32, True)
    model = _batch_axis_conv_relu(w, b, 8, [0, 0, 0, 0])
    seen = _count_pointwise(monkeypatch)
    off = epoxy.InferenceSession(model, providers=[("cpu", {"jit": False})])
    serial = epoxy.InferenceSession(model, providers=[("cpu", {"jit": True, "jit_threads": 1})])
    monkeypatch.setattr(kernels_pointwise, "GRAIN", 1)
    launches: list[int] = []
    real_parallel = kernels_pointwise.epilogue_parallel
    monkeypatch.setattr(kernels_pointwise, "epilogue_parallel", lambda *a: launches.append(1) or real_parallel(*a))
    parallel = epoxy.InferenceSession(model, providers=[("cpu", {"jit": True, "jit_threads": 2})])
    rng = np.random.default_rng(15)
    for batch in (1, 1, 3, 3, 1):
        x = rng.standard_normal((batch, 16, 8, 8)).astype(np.float32)
        want = off.run(None, {"x": x})
        close(serial.run(None, {"x": x}), want, *_tol(x, w))
        close(parallel.run(None, {"x": x}), want, *_tol(x, w))
    # two sessions (serial, parallel), each run through its shape's call
    assert seen == [(1, 16, 8, 8)] * 4 + [(3, 16, 8, 8)] * 4 + [(1, 16, 8, 8)] * 2
    assert launches == [1] * 5


# -- group-1 layers as grid im2col + BLAS GEMM (kernels_conv_gemm) -------------------------------
GRID = [
    ((1, 8, 8, 8), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # a tiny resnet layer (the direct kernel's class)
    ((1, 8, 8, 8), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # a small one (row-shift's class)
    ((2, 3, 17, 15), (8, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # a stem, batch 2, odd sizes
    ((1, 16, 20, 20), (32, 16, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # strided: numpy's im2col class
    ((1, 12, 14, 13), (40, 12, 5, 5), {"pads": [2, 2, 2, 2]}),  # 5x5 stride 1 (row-shift: 40 outputs)
    ((1, 6, 12, 12), (24, 6, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),  # dilated
    ((1, 16, 9, 9), (32, 16, 2, 2), {"strides": [2, 2]}),  # convnext's downsample, a remainder row
    ((3, 4, 9, 11), (6, 4, 3, 2), {"pads": [0, 1, 2, 0], "strides": [1, 2]}),  # asymmetric everything
    ((1, 4, 48, 48), (8, 4, 3, 3), {"pads": [1, 1, 1, 1]}),  # a large map: grid columns (the others: compact)
]


def test_compact_columns_on_small_maps_only():
    """im2col rows keep only the output positions where the grid's extra columns exceed 5 %:
    every GRID case but the 48x48 map (4 %), and resnet50's 7x7 and 14x14 layers."""
    from epoxy_ep_cpu.jit.kernels_conv_gemm import compact_columns

    assert compact_columns(7, 7, 9) and compact_columns(14, 14, 16) and compact_columns(10, 10, 11)
    assert not compact_columns(48, 48, 50) and not compact_columns(56, 56, 58)
    assert not compact_columns(5, 5, 5)  # no extra columns (a 1-wide kernel)


@pytest.fixture
def no_implicit(monkeypatch):
    """The grid GEMM's tests: the float32 layers the implicit GEMM would take
    (``kernels_conv_implicit``, tested in test_jit_conv_implicit.py) stay on it."""
    from epoxy_ep_cpu.jit import kernels_conv_implicit

    monkeypatch.setattr(kernels_conv_implicit, "gains", lambda *args: False)


def _no_whole_vectors(monkeypatch) -> None:
    """The tiny one-image layers the direct kernel keeps when its loops run on whole vectors
    (``kernels_conv.block_layout``) go to the grid GEMM, as batches do: the grid tests then
    cover the small classes too."""
    from epoxy_ep_cpu.jit import kernels_conv

    real = kernels_conv.block_layout
    monkeypatch.setattr(kernels_conv, "block_layout", lambda *a: real(*a)[:4] + (False,))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), GRID, ids=_ids(GRID))
def test_grid_gemm_matches_numpy_path_and_reference(monkeypatch, no_implicit, x_shape, w_shape, attrs, dtype):
    _no_whole_vectors(monkeypatch)
    seen = _count_prepared(monkeypatch, "GridConvCall")
    x, w, b = _data(sum(x_shape) + 3, x_shape, w_shape, dtype, True)
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], attrs, 22)
    on, off, ref = run_cpu(case, True, runs=3), run_cpu(case, False), run_reference(case)
    assert seen == [x_shape] * 3
    rtol, atol = _tol(x, w)
    close(on, off, rtol, atol)
    close(on, ref, max(rtol, 1e-5), atol)


@pytest.mark.parametrize(("act", "params"), ACTS, ids=[f"{a or 'none'}{p}" for a, p in ACTS])
@pytest.mark.parametrize("residual", ["none", "full", "broadcast"])
def test_grid_gemm_fused_conv_epilogue(monkeypatch, no_implicit, act, params, residual):
    seen = _count_prepared(monkeypatch, "GridConvCall")
    x_shape, w_shape, attrs = GRID[3]
    x, w, b = _data(len(act) + 17, x_shape, w_shape, np.float32, True)
    rng = np.random.default_rng(17)
    z = {"none": None, "full": rng.standard_normal((1, 32, 10, 10)).astype(np.float32),
         "broadcast": rng.standard_normal((1, 32, 1, 1)).astype(np.float32)}[residual]
    full = dict(attrs, **({"activation": act} if act else {}),
                **({"activation_params": list(params)} if params else {}))
    case = one_node("FusedConv", [x, In(w, const=True), In(b, const=True), z], full, 1, domain="com.microsoft")
    on, off = run_cpu(case, True, runs=2), run_cpu(case, False)
    assert seen == [x_shape] * 2
    rtol, atol = _tol(x, w)
    close(on, off, rtol, atol)
    if residual != "broadcast":
        close(on, run_onnxruntime(case), 1e-4, max(atol, 1e-5))


@pytest.mark.parametrize("avx512", [True, False], ids=["avx512-rule", "avx2-rule"])
@pytest.mark.parametrize(("threads", "size", "channels", "route", "route_avx2"),
                         [(1, 28, 64, "WinogradCall", "WinogradCall"), (2, 28, 64, "GridConvCall", "WinogradCall"),
                          (1, 14, 128, "WinogradCall", "WinogradCall"), (2, 14, 128, "GridConvCall", "WinogradCall"),
                          (1, 7, 128, "WinogradCall", "WinogradCall"), (2, 7, 128, "GridConvCall", "GridConvCall"),
                          (2, 56, 64, "WinogradCall", "WinogradCall")])
def test_winograd_layers_split_between_the_grid_gemm_and_compiled_f43(monkeypatch, no_implicit, threads, size, channels,
                                                                     route, route_avx2, avx512):
    """A 3x3 stride-1 layer where pick_path takes Winograd runs on the compiled F(4,3) from 16
    tiles and enough channel pairs x positions (more on two threads with the AVX-512 rule,
    where the grid GEMM's BLAS call uses both threads and the transforms one; on AVX2 two
    threads decide as one), on the compiled F(2,3) (the same call class) on one thread's
    smaller maps; else on the grid GEMM."""
    if not avx512 and conv_ops._two_thread_rule():
        pytest.skip("the AVX2 rule's routes are checked on an AVX2 CPU (other routing constants differ here)")
    monkeypatch.setattr(conv_ops, "_two_thread_rule", lambda: avx512)
    seen = _count_prepared(monkeypatch, route if avx512 else route_avx2)
    x, w, b = _data(18, (1, channels, size, size), (channels, channels, 3, 3), np.float32, True)
    assert conv_ops.pick_path(channels, channels, (3, 3), [size, size], True, np.dtype(np.float32)).startswith("F(")
    wino = one_node("Conv", [x, In(w, const=True), In(b, const=True)], {"pads": [1, 1, 1, 1]}, 22)
    close(run_cpu(wino, True, runs=2, jit_threads=threads), run_reference(wino), 1e-4, 1e-3)
    assert seen == [x.shape] * 2


def test_grid_gemm_leaves_huge_buffers_alone(monkeypatch, no_implicit):
    """A layer whose grid im2col matrix exceeds MAX_COLS keeps the numpy path (here forced by
    a tiny bound)."""
    from epoxy_ep_cpu.jit import kernels_conv_gemm

    seen = _count_prepared(monkeypatch, "GridConvCall")
    monkeypatch.setattr(kernels_conv_gemm, "MAX_COLS", 100)
    x, w, b = _data(19, *GRID[3][:2], np.float32, True)
    big = one_node("Conv", [x, In(w, const=True), In(b, const=True)], GRID[3][2], 22)
    close(run_cpu(big, True, runs=2), run_cpu(big, False), *_tol(x, w))
    assert seen == []


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("x_shape", "w_shape", "group"), [((1, 24, 7, 7), (36, 8, 1, 1), 3),
                                                          ((2, 16, 5, 6), (8, 4, 1, 1), 4)])
def test_grouped_pointwise_layers_run_as_batched_gemms(monkeypatch, x_shape, w_shape, group, dtype):
    """shufflenet's grouped 1x1 layers: one GEMM per group, with the fused residual and Relu."""
    seen = _count_pointwise(monkeypatch)
    x, w, b = _data(group + 20, x_shape, w_shape, dtype, True)
    z = np.random.default_rng(21).standard_normal((x_shape[0], w_shape[0], *x_shape[2:])).astype(dtype)
    case = one_node("FusedConv", [x, In(w, const=True), In(b, const=True), z],
                    {"group": group, "activation": "Relu"}, 1, domain="com.microsoft")
    on, off = run_cpu(case, True, runs=3), run_cpu(case, False)
    assert seen == [x_shape] * 3
    close(on, off, *_tol(x, w))
    plain = one_node("Conv", [x, In(w, const=True), In(b, const=True)], {"group": group}, 22)
    close(run_cpu(plain, True), run_reference(plain), *_tol(x, w))


# -- the direct kernel's whole-vector loops, and the tiny one-image layers it keeps ------------
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [
    ((1, 8, 8, 8), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # span 78 -> 80
    ((1, 3, 32, 32), (8, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # the exporter stems
    ((1, 3, 16, 16), (32, 3, 4, 4), {"strides": [4, 4]}),  # vit's patchify: span 16, whole already
    ((1, 8, 9, 9), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),  # depthwise: blocks of 1, never whole
], ids=["8x8", "stem", "patchify", "depthwise"])
def test_whole_vector_loops_give_the_same_bits(monkeypatch, x_shape, w_shape, attrs):
    """Rounding the update loops up to whole vectors reads a few positions past each plane's
    span (the next positions, or the zeroed tail) into lanes that are never stored: each output
    sums the same products in the same order, so the values equal the exact-span loops' bits."""
    from epoxy_ep_cpu.jit import kernels_conv

    x, w, b = _data(31, x_shape, w_shape, np.float32, True)
    strides = tuple(attrs.get("strides", (1, 1)))
    pads = attrs.get("pads", [0, 0, 0, 0])
    out_sp = [(x_shape[2 + i] + pads[i] + pads[i + 2] - w_shape[2 + i]) // strides[i] + 1 for i in range(2)]
    group = attrs.get("group", 1)
    f32 = np.dtype(np.float32)

    def conv() -> np.ndarray:
        call = kernels_conv.Conv2dCall(x_shape, f32, w, b, strides, (1, 1), pads[:2], out_sp, group, 0, 0.0, 0.0, 1)
        return call(x, None)

    whole = conv()
    real = kernels_conv.block_layout
    monkeypatch.setattr(kernels_conv, "block_layout", lambda *a: real(*a)[:4] + (False,))
    np.testing.assert_array_equal(whole, conv())
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], attrs, 22)
    close([whole], run_cpu(case, False), *_tol(x, w))


@pytest.mark.parametrize(("x_shape", "w_shape", "route"), [
    ((1, 8, 8, 8), (8, 8, 3, 3), "Conv2dCall"),  # one image, whole vectors
    ((2, 8, 8, 8), (8, 8, 3, 3), "GridConvCall"),  # a batch: one GEMM over both
    ((1, 16, 4, 4), (16, 16, 3, 3), "GridConvCall"),  # 4x4 maps: span 22, not whole
    ((1, 8, 8, 8), (6, 8, 3, 3), "GridConvCall"),  # 6 outputs: no 4-channel blocks
])
def test_tiny_group1_layers_route_by_vector_fit(monkeypatch, no_implicit, x_shape, w_shape, route):
    """The direct kernel keeps a tiny group-1 layer of one image whose loops run on whole
    vectors (0.77-0.86x the grid GEMM's time on the exporter CNNs); the rest go to the GEMM."""
    seen = _count_prepared(monkeypatch, route)
    x, w, b = _data(32, x_shape, w_shape, np.float32, True)
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], {"pads": [1, 1, 1, 1]}, 22)
    close(run_cpu(case, True, runs=2), run_reference(case), *_tol(x, w))
    assert seen == [x_shape] * 2


_ONE_WINDOW = r"""
import numpy as np
from onnx import TensorProto, helper, numpy_helper
import epoxy
from epoxy_ep_cpu.jit import kernels_depthwise as kd

kd.kernel_kind = lambda *a, **k: "grid"
rng = np.random.default_rng(0)
w = numpy_helper.from_array(rng.standard_normal((16, 1, 3, 3)).astype(np.float32), "w")
nodes = [helper.make_node("Conv", ["x", "w"], ["h"], group=16, pads=[1, 1, 1, 1]),
         helper.make_node("Conv", ["h", "w"], ["y"], group=16, pads=[1, 1, 1, 1], strides=[2, 2])]
graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])], [w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
session = epoxy.InferenceSession(model, providers=[("cpu", {"jit": True, "jit_threads": 1})])
session.run(None, {"x": rng.standard_normal((1, 16, 12, 12)).astype(np.float32)})
print(sorted(name for name in ("planes_3x3", "planes_5x5", "planes_7x7", "planes_rows")
             if getattr(kd, name).signatures))
"""


def test_a_model_compiles_only_its_windows_plane_loop():
    """Two 3x3 depthwise layers (stride 1 and 2) on the grid kernel load or compile the 3x3
    plane loop and no other window's: one loop behind one entry compiled all of them, ~30 s
    of a cold first run (bench/README.md, session 51). A fresh process: this one's other
    tests run the other windows."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _ONE_WINDOW], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "['planes_3x3']"
