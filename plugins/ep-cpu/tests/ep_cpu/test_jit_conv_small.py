"""The small-layer kernel for float32 group-1 convolutions (jit/kernels_conv_small.py: pad,
the position-tiled product of jit/position_gemm_ir.py transposed in registers, store, in one
compiled call) against a float64 convolution, the numpy path (jit off), the ONNX reference
and onnxruntime (FusedConv), with proof that it ran.

Values are compared within the float32 bound of a sum in any order (``conv_float64``). The
module is built for the CPU (AVX-512 or AVX2 tiles, ``position_gemm_ir.shapes``); on a CPU
without AVX2 and FMA the layers keep the other paths, which the routing test checks instead."""

from __future__ import annotations

import numpy as np
import pytest
from _hostile import In, one_node, run_onnxruntime, run_reference
from _jit_cases import case_ids, close, conv_data, conv_float64, conv_out_shape, run_cpu, spy_calls

from epoxy.kit import is_aligned

pytest.importorskip("numba")

from epoxy_ep_cpu.jit import kernels_conv_implicit, kernels_conv_small, position_gemm_ir, sgemm_ir  # noqa: E402

needs_kernel = pytest.mark.skipif(kernels_conv_small.support() is not None,
                                  reason=f"small-layer kernel: {kernels_conv_small.support()}")

# (x shape, w shape, attributes): both register widths (<= 8 output channels: 8 lanes), both
# tile sizes (a 4x4 map's 22 grid positions: tiles of 8), several channel blocks (40, 64
# outputs), strides, dilations, 5x5 kernels, asymmetric pads, 1x1 layers reading the input as
# their grid (64 positions) or through a copy (49: the last tile would read past the input),
# batches, the exporter CNNs' layers
CASES = [
    ((1, 8, 8, 8), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # exporter resnet, 8 lanes, tiles of 16
    ((1, 8, 8, 8), (16, 8, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((3, 16, 4, 4), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}),  # 22 positions: tiles of 8
    ((1, 3, 32, 32), (8, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # an RGB stem, K = 27
    ((2, 48, 8, 8), (40, 48, 3, 3), {"pads": [1, 1, 1, 1]}),  # three channel blocks, 8 channels unused
    ((1, 64, 4, 4), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}),  # four blocks, K = 576
    ((2, 12, 11, 9), (24, 12, 5, 5), {"pads": [2, 1, 2, 0]}),  # asymmetric pads, non-square map
    ((1, 16, 12, 12), (16, 16, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((2, 24, 9, 11), (13, 24, 3, 2), {"pads": [0, 1, 2, 0], "strides": [1, 2]}),
    ((4, 32, 8, 8), (32, 32, 2, 2), {"strides": [2, 2]}),  # convnext's downsample, no padding
    ((2, 32, 8, 8), (48, 32, 1, 1), {}),  # 1x1: the input is its own grid (64 positions)
    ((1, 40, 7, 7), (24, 40, 1, 1), {}),  # 1x1 on 49 positions: a padded copy
    ((8, 16, 8, 8), (64, 16, 1, 1), {"strides": [2, 2]}),  # strided 1x1 at a batch
]


def _aligned_rows(call) -> None:
    """The packed weights' rows start on cache lines (the kernel loads them whole)."""
    assert is_aligned(call._floats[kernels_conv_small._weights_at.py_func(call.out_shape[1]):])


def _count(monkeypatch) -> list[tuple[int, ...]]:
    return spy_calls(monkeypatch, kernels_conv_small.SmallConvCall, _aligned_rows)


@needs_kernel
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES, ids=case_ids(CASES))
def test_small_kernel_matches_float64_and_the_numpy_path(monkeypatch, x_shape, w_shape, attrs, threads):
    """Every case runs on the kernel (each of three runs), within the float32 bound of a
    float64 convolution, and close to the numpy path and the ONNX reference; on two threads a
    batch splits its images."""
    monkeypatch.setattr(kernels_conv_small, "MACS_PER_THREAD", 1)
    monkeypatch.setattr(kernels_conv_small, "MAX_MACS_ONE_IMAGE", 1 << 40)
    seen = _count(monkeypatch)
    x, w, b = conv_data(sum(x_shape) + threads, x_shape, w_shape)
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], attrs, 22)
    (on,) = run_cpu(case, True, runs=3, jit_threads=threads)
    assert seen == [x_shape] * 3
    want, bound = conv_float64(x, w, b, attrs)
    excess = np.abs(on - want) - bound
    assert (excess <= 0).all(), f"off by more than the bound at {np.unravel_index(np.argmax(excess), excess.shape)}"
    close([on], run_cpu(case, False), 1e-5, 1e-4)
    close([on], run_reference(case), 1e-5, 1e-4)


@pytest.mark.parametrize("avx512", [True, False], ids=["avx512", "avx2"])
def test_cases_cover_both_widths_tiles_and_grids(avx512):
    """The cases above run every register width and tile size of both CPU kinds' modules
    (``position_gemm_ir.shapes``: 8- and 16-lane registers and tiles of 8 and 16 positions on
    AVX-512; 8 lanes and tiles of 4 and 8 on AVX2), one and several channel blocks, and 1x1
    layers on their own input and on a copy."""
    tiles, widths = position_gemm_ir.shapes(avx512)
    seen = set()
    for x_shape, w_shape, attrs in CASES:
        n, m, oh, ow = conv_out_shape(x_shape, w_shape, attrs)
        sw, dw = attrs.get("strides", (1, 1))[1], attrs.get("dilations", (1, 1))[1]
        wq = ow + (w_shape[3] - 1) * dw // sw
        positions = (oh - 1) * wq + ow
        lanes = position_gemm_ir.lanes_for(m, widths)
        tile = position_gemm_ir.tile_for(positions, tiles)
        seen |= {("lanes", lanes), ("tile", tile), ("blocks", -(-m // lanes) > 1)}
        if w_shape[2:] == (1, 1) and not attrs:
            seen.add(("own grid", positions % tile == 0))
    assert seen >= ({("lanes", w) for w in widths} | {("tile", t) for t in tiles}
                    | {("blocks", True), ("blocks", False), ("own grid", True), ("own grid", False)})


def test_tile_sizes_round_positions_up_the_least():
    wide, narrow = position_gemm_ir.shapes(True), position_gemm_ir.shapes(False)
    assert position_gemm_ir.tile_for(22, wide[0]) == 8  # 24, not 32
    assert position_gemm_ir.tile_for(64, wide[0]) == 16 and position_gemm_ir.tile_for(78, wide[0]) == 16  # 80: 16
    assert position_gemm_ir.tile_for(3, wide[0]) == 8
    assert position_gemm_ir.lanes_for(8, wide[1]) == 8 and position_gemm_ir.lanes_for(9, wide[1]) == 16
    # AVX2: 8-lane registers only (a layer of 40 outputs: 5 blocks), tiles of 4 or 8
    assert position_gemm_ir.tile_for(22, narrow[0]) == 8 and position_gemm_ir.tile_for(19, narrow[0]) == 4
    assert position_gemm_ir.lanes_for(40, narrow[1]) == 8
    assert (position_gemm_ir.TILE_SIZES, position_gemm_ir.LANE_WIDTHS) == (wide if sgemm_ir.WIDE_TILE else narrow)


ACTS = [("Relu", ()), ("LeakyRelu", (0.2,)), ("Clip", (-0.5, 0.7)), ("HardSigmoid", (0.3, 0.4)), ("", ())]


@needs_kernel
@pytest.mark.parametrize(("act", "params"), ACTS, ids=[f"{a or 'none'}{p}" for a, p in ACTS])
@pytest.mark.parametrize("residual", ["none", "full", "broadcast"])
@pytest.mark.parametrize("case", [0, 2, 4], ids=["8-lanes", "tiles-of-8", "blocks"])
def test_small_kernel_fused_conv_epilogue(monkeypatch, act, params, residual, case):
    """FusedConv's residual and activation in the store pass (or after it, for the activations
    the pass lacks), against the numpy path and onnxruntime."""
    seen = _count(monkeypatch)
    x_shape, w_shape, attrs = CASES[case]
    x, w, b = conv_data(len(act) + 47, x_shape, w_shape)
    rng = np.random.default_rng(47)
    out_shape = conv_out_shape(x_shape, w_shape, attrs)
    z = {"none": None, "full": rng.standard_normal(out_shape).astype(np.float32),
         "broadcast": rng.standard_normal((1, w_shape[0], 1, 1)).astype(np.float32)}[residual]
    full = dict(attrs, **({"activation": act} if act else {}),
                **({"activation_params": list(params)} if params else {}))
    case = one_node("FusedConv", [x, In(w, const=True), In(b, const=True), z], full, 1, domain="com.microsoft")
    on, off = run_cpu(case, True, runs=2), run_cpu(case, False)
    assert seen == ([x_shape] * 2 if residual != "broadcast" else [])  # a broadcast residual: the general path
    close(on, off, 1e-5, 1e-4)
    if residual != "broadcast":  # onnxruntime's Z is the output's shape
        close(on, run_onnxruntime(case), 1e-4, 1e-4)


@needs_kernel
@pytest.mark.parametrize("case", [0, 2, 10], ids=["padded", "tiles-of-8", "own-grid"])
def test_small_kernel_keeps_nan_and_inf(case):
    """A NaN or an infinity in the input reaches the outputs whose windows hold it, as in the
    numpy path (the grid's padding and the tiles' extra positions never mix into kept ones)."""
    x_shape, w_shape, attrs = CASES[case]
    x, w, b = conv_data(53, x_shape, w_shape)
    x[0, 1, 2, 3] = np.nan
    x[-1, 0, 0, 0] = np.inf
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], attrs, 22)
    (on,), (off,) = run_cpu(case, True), run_cpu(case, False)
    np.testing.assert_array_equal(np.isnan(on), np.isnan(off))
    assert np.isnan(on).any() and np.isinf(on).any()
    finite = np.isfinite(off)
    close([on[finite]], [off[finite]], 1e-5, 1e-4)


@pytest.mark.parametrize(("n", "ck", "m", "positions", "threads", "takes"), [
    (1, 72, 8, 78, 1, True),  # the exporter resnet's 8 -> 8 layer on 8x8
    (8, 144, 16, 22, 1, True),  # 16 -> 16 on 4x4 at batch 8
    (1, 576, 64, 222, 1, True),  # 64 -> 64 on 14x14
    (1, 576, 64, 222, 2, True),  # ... one image of 8 M multiply-adds on two threads: still one thread here
    (1, 576, 64, 810, 2, False),  # ... 64 -> 64 on 28x28, 30 M: the other paths split it
    (1, 72, 8, 78, 2, True),  # ... a small one stays here
    (8, 576, 64, 222, 2, True),  # a batch splits its images
    (1, 576, 96, 222, 1, False),  # more output channels than MAX_CHANNELS
    # K below MIN_DEPTH on 2048 positions in all (a 1x1 expansion of 8 channels): BLAS's on AVX-512 only
    (8, 8, 48, 256, 1, not sgemm_ir.WIDE_TILE),
    (1, 8, 32, 64, 1, True),  # ... on one image of 8x8
    (16, 27, 16, 1086, 1, True),  # an RGB 3x3 stem on 32x32 at batch 16
    (1, 27, 16, 2398, 1, False),  # ... on 48x48: more positions than MAX_POSITIONS
])
def test_routing_rule(n, ck, m, positions, threads, takes):
    """What the kernel takes (``gains``), on a CPU that can run it; none elsewhere."""
    able = kernels_conv_small.support() is None
    assert kernels_conv_small.gains(n, ck, m, positions, threads) == (takes and able)


def test_pointwise_layers_stop_at_smaller_maps():
    """A 1x1 layer's maps stop at ``MAX_POINTWISE_POSITIONS`` (BLAS writes its planes directly),
    a 3x3 layer's at ``MAX_POSITIONS``."""
    able = kernels_conv_small.support() is None
    assert kernels_conv_small.gains(1, 32, 16, 729, taps=1) == able  # 27x27
    assert not kernels_conv_small.gains(4, 32, 16, 784, taps=1)  # 28x28
    assert kernels_conv_small.gains(4, 288, 16, 784, taps=9) == able
    # one image on two threads: a 1x1 layer of 1.5 M multiply-adds goes to BLAS (it writes the
    # planes on both threads), a 3x3 one of the same size stays on this path's one thread
    assert not kernels_conv_small.gains(1, 48, 32, 1000, 2, taps=1)
    assert kernels_conv_small.gains(1, 48, 32, 1000, 2, taps=9) == able


def test_layers_with_many_im2col_values_an_image_go_to_the_implicit_gemm():
    """Past ``MAX_IMAGE_VALUES`` im2col values an image (rows x grid positions) a layer leaves
    this path, whatever its channels: 64 -> 64 stride 2 on 56x56 (576 x 812) and 128 -> 32 on
    28x28 (1152 x 840) ran faster on the implicit GEMM; 32 -> 32 on 32x32 (288 x 1088) stays."""
    able = kernels_conv_small.support() is None
    assert not kernels_conv_small.gains(1, 576, 64, 812, taps=9)
    assert not kernels_conv_small.gains(1, 1152, 32, 840, taps=9)
    assert kernels_conv_small.gains(1, 288, 32, 1088, taps=9) == able
    assert kernels_conv_small.gains(1, 576, 64, 224, taps=9) == able


def test_deep_pointwise_layers_go_to_blas():
    """A 1x1 layer of more than ``MAX_POINTWISE_DEPTH`` input channels is BLAS's, a spatial
    layer of as many im2col rows stays here."""
    able = kernels_conv_small.support() is None
    depth = kernels_conv_small.MAX_POINTWISE_DEPTH
    assert kernels_conv_small.gains(1, depth, 48, 169, taps=1) == able
    assert not kernels_conv_small.gains(1, depth + 1, 48, 169, taps=1)
    assert not kernels_conv_small.gains(1, 384, 48, 169, taps=1)  # squeezenet's squeeze layers
    assert kernels_conv_small.gains(1, 576, 48, 169, taps=9) == able


def test_float64_and_runtime_weights_keep_the_other_paths(monkeypatch):
    """The kernel is float32 and packs constant weights once: a float64 layer, or one whose
    weights are fed at run time, runs elsewhere."""
    seen = _count(monkeypatch)
    x_shape, w_shape, attrs = CASES[0]
    x, w, b = conv_data(59, x_shape, w_shape)
    case = one_node("Conv", [x.astype(np.float64), In(w.astype(np.float64), const=True),
                             In(b.astype(np.float64), const=True)], attrs, 22)
    close(run_cpu(case, True), run_reference(case), 1e-12, 1e-10)
    fed = one_node("Conv", [x, In(w, const=False), In(b, const=True)], attrs, 22)
    close(run_cpu(fed, True, runs=2), run_reference(fed), 1e-5, 1e-4)
    assert seen == []


@needs_kernel
@pytest.mark.parametrize(("act", "params"), [("HardSwish", ()), ("HardSigmoid", (0.3, 0.4)), ("HardSigmoid", ())])
@pytest.mark.parametrize("residual", [False, True])
def test_hard_activations_in_the_store_give_the_standalone_bits(monkeypatch, act, params, residual):
    """HardSigmoid and HardSwish applied in the kernel's store (epoxy's FusedConv, as the cpu
    fusions write MobileNetV3's layers) equal the same layer without them followed by the
    standalone op, bit for bit; and no pass runs after the kernel."""
    from epoxy_ep_cpu.jit import kernels_special
    from epoxy_ep_cpu.ops import activation
    from epoxy_ep_cpu.ops.fused import DOMAIN

    seen = _count(monkeypatch)
    after: list[str] = []
    for loop in ("hard_swish_loop", "hard_sigmoid_loop"):
        real_loop = getattr(kernels_special, loop)
        monkeypatch.setattr(kernels_special, loop, lambda *a, _l=loop, _r=real_loop: after.append(_l) or _r(*a))
    x_shape, w_shape, attrs = CASES[2]
    x, w, b = conv_data(61, x_shape, w_shape)
    z = np.random.default_rng(61).standard_normal(conv_out_shape(x_shape, w_shape, attrs)).astype(np.float32)
    inputs = [x, In(w, const=True), In(b, const=True)] + ([z] if residual else [])
    with_act = dict(attrs, activation=act, **({"activation_params": list(params)} if params else {}))
    real = activation.hard_swish_into, activation.hard_sigmoid_into
    (fused,) = run_cpu(one_node("FusedConv", inputs, with_act, 1, domain=DOMAIN), True, runs=2)
    (plain,) = run_cpu(one_node("FusedConv", inputs, attrs, 1, domain=DOMAIN), True, runs=2)
    assert seen == [x_shape] * 4 and after == []
    alpha, beta = (params or (0.2, 0.5))
    want = real[0](plain) if act == "HardSwish" else real[1](plain, alpha, beta)
    np.testing.assert_array_equal(fused, want)


@pytest.mark.skipif(kernels_conv_small.support() is not None, reason="no small-layer kernel here")
def test_layers_the_compiled_f43_runs_stay_on_it(monkeypatch):
    """On one thread, a layer both this path and the compiled F(4x4, 3x3) could run is F(4,3)'s
    (2.25x fewer multiply-adds: 64 -> 64 on 28x28 585 against 331 us, session 35); one F(4,3)
    leaves to the implicit GEMM (32 output channels) stays here, and where there is no implicit
    GEMM (AVX2) F(4,3) keeps it too."""
    from epoxy_ep_cpu.jit import kernels_winograd

    small = _count(monkeypatch)
    wino: list[tuple[int, ...]] = []
    real = kernels_winograd.WinogradCall.__call__
    monkeypatch.setattr(kernels_winograd.WinogradCall, "__call__",
                        lambda self, x, z: wino.append(x.shape) or real(self, x, z))
    implicit = kernels_conv_implicit.support() is None
    for x_shape, m, want in (((1, 64, 28, 28), 64, "winograd"),
                             ((1, 32, 28, 28), 32, "small" if implicit else "winograd")):
        small.clear()
        wino.clear()
        x, w, b = conv_data(3, x_shape, (m, x_shape[1], 3, 3))
        case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], {"pads": [1, 1, 1, 1]}, 22)
        got = run_cpu(case, True, jit_threads=1)
        close(got, run_reference(case), 1e-4, 1e-3 * max(1.0, float(np.abs(x).max())))
        assert (wino, small) == (([x_shape], []) if want == "winograd" else ([], [x_shape]))
