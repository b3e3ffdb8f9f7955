"""The implicit GEMM for float32 group-1 convolutions (jit/kernels_conv_implicit.py: the few-rows
kernel reading the padded phase grid through a row-offset table, AVX-512) against a float64
convolution, the numpy path (jit off), the ONNX reference and onnxruntime (FusedConv), with
proof that it ran.

Sums run in another order than OpenBLAS's, so values are compared within a float32 bound that
grows with ``K = C * kh * kw``: ``K`` ulps of the sum of the products' magnitudes. On a CPU
without AVX-512 the layers keep the grid GEMM, which the routing test checks instead."""

from __future__ import annotations

import numpy as np
import pytest
from _hostile import In, one_node, run_onnxruntime, run_reference
from _jit_cases import case_ids, close, conv_data, conv_float64, run_cpu

pytest.importorskip("numba")

from epoxy_ep_cpu.jit import blas_spin, kernels_conv_gemm, kernels_conv_implicit, kernels_sgemm  # noqa: E402
from epoxy_ep_cpu.jit import threads as jit_threads  # noqa: E402

# the small-layer kernel would take many of these layers: its own tests are test_jit_conv_small.py
pytestmark = pytest.mark.usefixtures("no_small_conv")

needs_avx512 = pytest.mark.skipif(kernels_conv_implicit.support() is not None,
                                  reason=f"implicit GEMM: {kernels_conv_implicit.support()}")
# the pointwise GEMM (pgemm) runs wherever the float32 GEMM does (AVX2 and FMA)
needs_float_gemm = pytest.mark.skipif(kernels_sgemm.support() is not None,
                                      reason=f"float32 GEMM: {kernels_sgemm.support()}")

# (x shape, w shape, attributes): strides, 5x5 and dilated kernels, asymmetric pads, K across
# the kernel's 256-row blocks (64 * 9 = 576), output channels not a multiple of the 6-row tile,
# one image (its column tiles split over threads) and batches, grid rows past 64 columns
CASES = [
    ((16, 16, 32, 32), (32, 16, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # the bench CNN at batch 16
    ((1, 16, 20, 20), (32, 16, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((3, 12, 14, 13), (40, 12, 5, 5), {"pads": [2, 2, 2, 2]}),
    ((2, 16, 12, 12), (24, 16, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((4, 32, 9, 9), (32, 32, 2, 2), {"strides": [2, 2]}),  # convnext's downsample, a remainder row
    ((3, 24, 9, 11), (13, 24, 3, 2), {"pads": [0, 1, 2, 0], "strides": [1, 2]}),  # asymmetric everything
    ((2, 64, 8, 8), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}),  # K = 576: three K blocks
    ((2, 64, 7, 7), (7, 64, 3, 3), {"pads": [1, 1, 1, 1]}),  # 7 outputs: a 1-row tile
    ((1, 8, 48, 48), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # K = 72, a large map
    ((2, 8, 35, 35), (16, 8, 5, 5), {"strides": [2, 2], "pads": [2, 2, 2, 2]}),  # pad 2: both phases start at 1
    # short spans at a batch: the interleaved layout (image-minor columns)
    ((8, 32, 8, 8), (64, 32, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((5, 16, 4, 4), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((3, 3, 7, 9), (8, 3, 3, 3), {"strides": [2, 2], "pads": [0, 1, 1, 0]}),  # an odd-width stride-2 stem
]


def _count(monkeypatch, cls) -> list[tuple[int, ...]]:
    seen: list[tuple[int, ...]] = []
    real = cls.__call__
    monkeypatch.setattr(cls, "__call__", lambda self, x, z: seen.append(x.shape) or real(self, x, z))
    return seen


@needs_avx512
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES, ids=case_ids(CASES))
def test_implicit_gemm_matches_float64_and_the_numpy_path(monkeypatch, x_shape, w_shape, attrs, threads):
    """Every case runs on the implicit GEMM (and nothing on the grid GEMM), within the float32
    bound of a float64 convolution, and close to the numpy path and the ONNX reference; on two
    threads an image-major batch splits its images and an interleaved one its output channels,
    as does one image where OpenBLAS's idle workers can be put to sleep (``blas_spin``; without
    that it stays off the implicit GEMM on two threads: ``gains``)."""
    monkeypatch.setattr(kernels_conv_implicit, "MIN_MACS", 0)
    monkeypatch.setattr(kernels_conv_implicit, "MACS_PER_THREAD", 1)
    seen = _count(monkeypatch, kernels_conv_implicit.ImplicitConvCall)
    grid = _count(monkeypatch, kernels_conv_gemm.GridConvCall)
    x, w, b = conv_data(sum(x_shape) + threads, x_shape, w_shape)
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], attrs, 22)
    (on,) = run_cpu(case, True, runs=3, jit_threads=threads)
    if threads > 1 and x_shape[0] == 1 and not blas_spin.available():
        assert seen == []
    else:
        assert seen == [x_shape] * 3 and grid == []
    want, bound = conv_float64(x, w, b, attrs)
    excess = np.abs(on - want) - bound
    assert (excess <= 0).all(), f"off by more than the bound at {np.unravel_index(np.argmax(excess), excess.shape)}"
    close([on], run_cpu(case, False), 1e-5, 1e-4)
    close([on], run_reference(case), 1e-5, 1e-4)


@needs_avx512
def test_cases_cover_both_layouts():
    """The cases above run the image-major and the interleaved layouts, stride-2 grids of both
    column-pad parities (the vector split of ``_pad_plane_pairs``) and odd widths."""
    layouts = []
    for x_shape, w_shape, attrs in CASES:
        strides = tuple(attrs.get("strides", (1, 1)))
        dilations = tuple(attrs.get("dilations", (1, 1)))
        pads = attrs.get("pads", [0, 0, 0, 0])
        out_sp = [(x_shape[2 + i] + pads[i] + pads[i + 2] - (w_shape[2 + i] - 1) * dilations[i] - 1) // strides[i] + 1
                  for i in range(2)]
        call = kernels_conv_implicit.ImplicitConvCall(x_shape, np.dtype(np.float32), np.ones(w_shape, np.float32),
                                                      np.zeros(w_shape[0], np.float32), strides, dilations, pads[:2],
                                                      out_sp, 0, 0.0, 0.0, 1)
        layouts.append((call._interleaved, strides[1], pads[1] % 2))
    assert {interleaved for interleaved, _, _ in layouts} == {False, True}
    assert {(interleaved, parity) for interleaved, sw, parity in layouts if sw == 2} >= {(False, 0), (False, 1)}


ACTS = [("Relu", ()), ("LeakyRelu", (0.2,)), ("Clip", (-0.5, 0.7)), ("HardSigmoid", (0.3, 0.4)), ("", ())]


@needs_avx512
@pytest.mark.parametrize(("act", "params"), ACTS, ids=[f"{a or 'none'}{p}" for a, p in ACTS])
@pytest.mark.parametrize("residual", ["none", "full", "broadcast"])
@pytest.mark.parametrize("case", [0, -3], ids=["image-major", "interleaved"])
def test_implicit_gemm_fused_conv_epilogue(monkeypatch, act, params, residual, case):
    """FusedConv's residual and activation in the store pass (or after it, for the activations
    the pass lacks), in both layouts, against the numpy path and onnxruntime."""
    seen = _count(monkeypatch, kernels_conv_implicit.ImplicitConvCall)
    x_shape, w_shape, attrs = CASES[case]
    x, w, b = conv_data(len(act) + 41, x_shape, w_shape)
    rng = np.random.default_rng(41)
    out_shape = (x_shape[0], w_shape[0], (x_shape[2] - 1) // attrs["strides"][0] + 1,
                 (x_shape[3] - 1) // attrs["strides"][1] + 1)
    z = {"none": None, "full": rng.standard_normal(out_shape).astype(np.float32),
         "broadcast": rng.standard_normal((1, w_shape[0], 1, 1)).astype(np.float32)}[residual]
    full = dict(attrs, **({"activation": act} if act else {}),
                **({"activation_params": list(params)} if params else {}))
    case = one_node("FusedConv", [x, In(w, const=True), In(b, const=True), z], full, 1, domain="com.microsoft")
    on, off = run_cpu(case, True, runs=2), run_cpu(case, False)
    assert seen == [x_shape] * 2
    close(on, off, 1e-5, 1e-4)
    if residual != "broadcast":  # onnxruntime's Z is the output's shape
        close(on, run_onnxruntime(case), 1e-4, 1e-4)


@needs_avx512
def test_implicit_gemm_keeps_nan_and_inf():
    """A NaN or an infinity in the input reaches the outputs whose windows hold it, as in the
    numpy path (the grid's padding and rounded-up columns never mix into kept outputs)."""
    x, w, b = conv_data(43, *CASES[0][:2])
    x[3, 2, 5, 6] = np.nan
    x[9, 0, 0, 0] = np.inf
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], CASES[0][2], 22)
    (on,), (off,) = run_cpu(case, True), run_cpu(case, False)
    np.testing.assert_array_equal(np.isnan(on), np.isnan(off))
    assert np.isnan(on).any() and np.isinf(on).any()
    finite = np.isfinite(off)
    close([on[finite]], [off[finite]], 1e-5, 1e-4)


@pytest.mark.parametrize(("n", "ck", "m", "positions", "takes"), [
    (16, 144, 32, 271, True),  # the bench CNN's stride-2 layer at batch 16
    (1, 576, 64, 838, True),  # one image, on one thread (two: below)
    (16, 27, 16, 1086, True),  # an RGB 3x3 stem at batch 16
    (64, 9, 16, 1086, False),  # one input channel: K below MIN_DEPTH
    (8, 576, 128, 80, False),  # more output channels than MAX_ROWS
    (1, 72, 8, 80, False),  # below MIN_MACS
])
def test_routing_rule(n, ck, m, positions, takes):
    """What the implicit GEMM takes (``gains``), on a CPU that can run it; none elsewhere. On two
    threads a batch still does, one image only where OpenBLAS's idle workers can be parked."""
    able = kernels_conv_implicit.support() is None
    assert kernels_conv_implicit.gains(n, ck, m, positions) == (takes and able)
    parks = blas_spin.available()
    assert kernels_conv_implicit.gains(n, ck, m, positions, 2) == (takes and able and (n > 1 or parks))


def test_float64_layers_keep_the_grid_gemm(monkeypatch):
    """The kernel is float32: a float64 layer of the same shape runs on the grid GEMM."""
    seen = _count(monkeypatch, kernels_conv_implicit.ImplicitConvCall)
    grid = _count(monkeypatch, kernels_conv_gemm.GridConvCall)
    x, w, b = (a.astype(np.float64) for a in conv_data(44, *CASES[0][:2]))
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], CASES[0][2], 22)
    close(run_cpu(case, True), run_reference(case), 1e-12, 1e-10)
    assert seen == [] and grid == [x.shape]


POINTWISE = [((1, 300, 24, 24), 7), ((1, 32, 23, 23), 40), ((1, 64, 32, 17), 96)]


@needs_float_gemm
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize(("x_shape", "m"), POINTWISE, ids=[f"{s}-{m}" for s, m in POINTWISE])
def test_pointwise_layers_of_one_image_run_on_the_kernel(monkeypatch, x_shape, m, residual, threads):
    """A float32 1x1 layer of one image on a large map: the product on the few-rows kernel with
    the bias, the residual and the Relu in its store (``pgemm``: K across its 64-row blocks,
    output channels not a multiple of 6, a map whose positions are not a multiple of 16: the
    tail through a padded strip); within the float32 bound of a float64 product, close
    to the numpy path and onnxruntime."""
    from epoxy_ep_cpu.jit import kernels_pointwise

    if threads > 1 and not jit_threads.native():
        pytest.skip("on several threads the kernel splits over the native pool only")
    products = []
    real = kernels_pointwise.PointwiseCall.__call__
    monkeypatch.setattr(kernels_pointwise.PointwiseCall, "__call__", lambda self, x, z, out=None: products.append(
        (x.shape, self._implicit is not None and self._implicit[4])) or real(self, x, z, out))
    x, w, b = conv_data(sum(x_shape) + m, x_shape, (m, x_shape[1], 1, 1))
    out_shape = (1, m, *x_shape[2:])
    z = np.random.default_rng(m).standard_normal(out_shape).astype(np.float32) if residual else None
    case = one_node("FusedConv", [x, In(w, const=True), In(b, const=True), z], {"activation": "Relu"}, 1,
                    domain="com.microsoft")
    (on,) = run_cpu(case, True, runs=2, jit_threads=threads)
    macs = m * x_shape[1] * x_shape[2] * x_shape[3]
    shares = max(1, min(threads, macs // jit_threads.MIN_SPLIT_MACS))  # a small layer stays whole
    fused = threads == 1 or x_shape[1] <= kernels_pointwise.SPLIT_MAX_DEPTH  # deeper: OpenBLAS's shares
    assert products == [(x_shape, shares if fused else False)] * 2
    flat = np.einsum("mc,cp->mp", w[:, :, 0, 0].astype(np.float64), x[0].reshape(x_shape[1], -1).astype(np.float64))
    mag = np.abs(w[:, :, 0, 0]).astype(np.float64) @ np.abs(x[0].reshape(x_shape[1], -1)).astype(np.float64)
    want = flat.reshape(out_shape) + b[None, :, None, None] + (0 if z is None else z)
    bound = (mag.reshape(out_shape) + np.abs(b)[None, :, None, None] + (0 if z is None else np.abs(z))) \
        * x_shape[1] * 2.0 ** -23 + 1e-30
    excess = np.abs(on - np.maximum(want, 0)) - bound
    assert (excess <= 0).all()
    close([on], run_cpu(case, False), 1e-5, 1e-4)
    close([on], run_onnxruntime(case), 1e-4, 1e-4)
    if threads > 1 and fused:  # the shares sum as one thread does
        np.testing.assert_array_equal(on, run_cpu(case, True, jit_threads=1)[0])


def test_pointwise_batches_and_small_maps_keep_blas():
    """The fused product is for one float32 image on a map of 512 positions and more, on one
    thread or (where the native pool runs) several."""
    from epoxy_ep_cpu.jit.kernels_pointwise import takes_implicit

    able = kernels_sgemm.support() is None
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    assert takes_implicit(1, 64, 64, 3136, f32, 1) == able
    assert not takes_implicit(2, 64, 64, 3136, f32, 1)
    assert not takes_implicit(1, 64, 64, 256, f32, 1)
    assert not takes_implicit(1, 64, 64, 3136, f64, 1)
    assert takes_implicit(1, 64, 64, 3136, f32, 4) == able  # one pgemm a group
    assert takes_implicit(1, 64, 64, 3136, f32, 1, nthreads=2) == (able and jit_threads.native())
    assert not takes_implicit(1, 256, 64, 3136, f32, 1, nthreads=2)  # deep: OpenBLAS shares
    assert takes_implicit(1, 256, 64, 3136, f32, 4, nthreads=2) == (able and jit_threads.native())  # 64 a group


# shufflenet's first grouped layer; planes with a tail past whole vectors (45x45: two shares at 2
# threads, each finishing a group's plane); a small layer that stays one share
GROUPED = [((1, 24, 56, 56), 112, 4), ((1, 48, 45, 45), 96, 3), ((1, 36, 29, 29), 60, 3), ((1, 16, 23, 23), 32, 2)]


@needs_float_gemm
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("x_shape", "m", "group"), GROUPED, ids=[f"{s}-{m}-g{g}" for s, m, g in GROUPED])
def test_grouped_pointwise_layers_run_one_pgemm_a_group(monkeypatch, x_shape, m, group, threads):
    """A grouped 1x1 layer of one image (shufflenet's 24 -> 112 in 4 groups; planes with and
    without a tail past whole vectors) runs one ``pgemm`` a group: each group's output holds the
    bits of that group alone as a group-1 layer (bias, residual and Relu in the store, split
    over threads or not; a plane's tail through the group's own part of the padded strip), and
    the layer is close to the numpy path and onnxruntime."""
    from epoxy_ep_cpu.jit.kernels_pointwise import PointwiseCall

    if threads > 1 and not jit_threads.native():
        pytest.skip("on several threads the kernel splits over the native pool only")
    grouped = []
    real = PointwiseCall.__call__
    monkeypatch.setattr(PointwiseCall, "__call__", lambda self, x, z, out=None: grouped.append(
        self._implicit is not None and self._implicit[4:]) or real(self, x, z, out))
    c = x_shape[1]
    x, w, b = conv_data(c + m + group, x_shape, (m, c // group, 1, 1))
    out_shape = (1, m, *x_shape[2:])
    z = np.random.default_rng(m + group).standard_normal(out_shape).astype(np.float32)
    case = one_node("FusedConv", [x, In(w, const=True), In(b, const=True), z], {"activation": "Relu", "group": group},
                    1, domain="com.microsoft")
    (on,) = run_cpu(case, True, runs=2, jit_threads=threads)
    plane = x_shape[2] * x_shape[3]
    shares = max(1, min(threads, (m // group) * c * plane // jit_threads.MIN_SPLIT_MACS))
    assert grouped == [(shares, group)] * 2
    if x_shape[2] == 45:
        assert shares == threads  # at 2 threads, two shares that each finish a group's plane tail
    for _ in range(5):  # shares that finish two groups' planes at once: the same bits every run
        np.testing.assert_array_equal(run_cpu(case, True, runs=3, jit_threads=threads)[0], on)
    f32 = np.dtype(np.float32)
    cg, mg = c // group, m // group
    monkeypatch.setattr(PointwiseCall, "__call__", real)
    layer = PointwiseCall(x.shape, f32, w, b, 1, 0.0, 0.0, threads, group)
    if plane % 16:  # a strip part a group: shares finishing two groups' planes at once never share one
        assert layer._strip[0] == group * (cg + 2 * mg) * 16
    for g in range(group):
        alone = PointwiseCall((1, cg, *x_shape[2:]), f32, w[g * mg:(g + 1) * mg], b[g * mg:(g + 1) * mg], 1, 0.0, 0.0,
                              threads)
        assert alone._implicit is not None
        want = alone(np.ascontiguousarray(x[:, g * cg:(g + 1) * cg]), np.ascontiguousarray(z[:, g * mg:(g + 1) * mg]))
        np.testing.assert_array_equal(on[:, g * mg:(g + 1) * mg], want)
    close([on], run_cpu(case, False), 1e-5, 1e-4)
    close([on], run_onnxruntime(case), 1e-4, 1e-4)


def _numpy_activation(v: np.ndarray, act: int, alpha: float, beta: float) -> np.ndarray:
    """``activations.activate`` in numpy (float32), NaN kept."""
    a, b = np.float32(alpha), np.float32(beta)
    if act == 1:
        return np.where(v < 0, np.float32(0), v)
    if act == 2:
        return np.where(v >= 0, v, v * a)
    if act == 3:
        return np.where(v > b, b, np.where(v < a, a, v))
    return v


@needs_float_gemm
@pytest.mark.parametrize("driver", ["pgemm", "pgemm_rows"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("act", "alpha", "beta"), [(0, 0.0, 0.0), (1, 0.0, 0.0), (2, 0.1, 0.0), (3, -0.5, 0.75)])
def test_the_fused_store_is_the_epilogue_pass_bit_for_bit(monkeypatch, act, alpha, beta, threads, driver):
    """``pgemm``'s store (and the tail's pass) gives ``act((sum + bias) + z)`` exactly as the
    numpy-side pass computes it from the same sums, NaN and infinities included, every
    activation code, on one thread and split, with either driver (column tiles or row tiles
    outermost: the same bits)."""
    from epoxy_ep_cpu.jit import kernels_pointwise
    from epoxy_ep_cpu.jit.kernels_pointwise import PointwiseCall

    monkeypatch.setattr(kernels_pointwise, "ROWS_OUTER_MAX_INPUT", 0 if driver == "pgemm" else 1 << 30)

    if threads > 1 and not jit_threads.native():
        pytest.skip("on several threads the kernel splits over the native pool only")
    rng = np.random.default_rng(act + 10 * threads)
    c, m, side = 48, 70, 29  # rows not a multiple of 6, 841 positions: a tail of 9
    assert kernels_pointwise.driver(c, m, side * side) == driver
    x = rng.standard_normal((1, c, side, side)).astype(np.float32)
    x[0, 3, 2, 5] = np.nan
    x[0, 7, 20, 28] = np.inf  # the tail's last column
    w = (rng.standard_normal((m, c, 1, 1)) * 0.3).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    z = rng.standard_normal((1, m, side, side)).astype(np.float32)
    z[0, 1, 0, 0] = -np.inf
    f32 = np.dtype(np.float32)
    sums = PointwiseCall(x.shape, f32, w, np.zeros(m, np.float32), 0, 0.0, 0.0, threads)(x, None)
    call = PointwiseCall(x.shape, f32, w, bias, act, alpha, beta, threads)
    assert call._implicit is not None
    for residual in (None, z):
        got = call(x, residual)
        v = sums + bias[None, :, None, None]
        if residual is not None:
            v = v + residual
        np.testing.assert_array_equal(got, _numpy_activation(v, act, alpha, beta))
    assert np.isnan(got).any()


@needs_float_gemm
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("c", "m", "positions"), [(48, 70, 729), (120, 7, 521), (16, 64, 3025)])
def test_the_planes_last_positions_sum_as_the_body_does(c, m, positions, threads):
    """A map whose positions are not whole 16-float vectors: its last positions go through the
    same ``pgemm`` on a padded strip, so they hold the bits the same columns get inside a plane
    of whole vectors (the residual, the bias and the Relu included; NaN and Inf in the tail)."""
    from epoxy_ep_cpu.jit.kernels_pointwise import LANES, PointwiseCall

    if threads > 1 and not jit_threads.native():
        pytest.skip("on several threads the kernel splits over the native pool only")
    whole = -(-positions // LANES) * LANES
    assert whole > positions
    rng = np.random.default_rng(positions + m)
    wide = rng.standard_normal((1, c, 1, whole)).astype(np.float32)
    wide[0, 1, 0, positions - 1] = np.inf
    wide[0, 2, 0, positions - 2] = np.nan
    z_wide = rng.standard_normal((1, m, 1, whole)).astype(np.float32)
    w = (rng.standard_normal((m, c, 1, 1)) * 0.2).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    f32 = np.dtype(np.float32)
    x = np.ascontiguousarray(wide[..., :positions])
    z = np.ascontiguousarray(z_wide[..., :positions])
    tail_call = PointwiseCall(x.shape, f32, w, bias, 1, 0.0, 0.0, threads)
    whole_call = PointwiseCall(wide.shape, f32, w, bias, 1, 0.0, 0.0, threads)
    assert tail_call._implicit is not None and whole_call._implicit is not None
    for residual, residual_wide in ((None, None), (z, z_wide)):
        got = tail_call(x, residual)
        want = whole_call(wide, residual_wide)[..., :positions]
        np.testing.assert_array_equal(got, want)
    assert np.isnan(got[0, :, 0, positions - 2]).any()


# (x shape, w shape, strides, pads): grids of rows a vector wide or more (fgemm's), one K block
# (an RGB stem) and several (K = 144), stride 2 with both column parities, output rows of a
# width that is and is not a multiple of 16, a batch (image-major)
FGEMM_CASES = [
    ((1, 3, 64, 64), (64, 3, 3, 3), (2, 2), (0, 0, 0, 0)),  # squeezenet's stem, smaller: wq 32, ow 31
    ((1, 3, 45, 47), (20, 3, 7, 7), (2, 2), (3, 3, 3, 3)),  # a 7x7 stem, 20 rows: a 2-row tile
    ((2, 16, 20, 32), (32, 16, 3, 3), (1, 1), (1, 1, 1, 1)),  # K = 144: three blocks, ow 32
    ((1, 8, 33, 35), (13, 8, 3, 3), (2, 2), (1, 1, 1, 1)),  # wq 18: vectors across two rows
]


@needs_avx512
@pytest.mark.parametrize("driver", ["fgemm", "fgemm_rows"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", FGEMM_CASES, ids=[str(c[0]) for c in FGEMM_CASES])
def test_fgemm_stores_the_two_pass_bits_and_nothing_else(monkeypatch, case, threads, driver):
    """Both drivers of ``implicit_fused_ir`` (the product stored onto the output planes with the
    epilogue; column or row tiles outermost) give the two-pass path's bits (``igemm`` then
    ``store_planes``) for every activation code, with and without a residual holding NaN and
    infinities, on one thread and split, and write nothing outside the output they are given."""
    monkeypatch.setattr(kernels_conv_implicit, "MACS_PER_THREAD", 1)
    monkeypatch.setattr(kernels_conv_implicit, "FUSED_MAX_DEPTH", 1 << 30)  # both kernels take any K
    monkeypatch.setattr(kernels_conv_implicit, "ROWS_OUTER_MIN_ROWS", 0 if driver == "fgemm_rows" else 1 << 30)
    monkeypatch.setattr(kernels_conv_implicit, "ROWS_OUTER_MAX_GRID", 1 << 30)
    if threads > 1 and case[0][0] == 1 and not blas_spin.available():
        pytest.skip("one image splits on the implicit GEMM only with blas_spin")
    x_shape, w_shape, strides, pads = case
    rng = np.random.default_rng(sum(x_shape) + threads)
    x = rng.standard_normal(x_shape).astype(np.float32)
    x[0, 0, 5, 7] = np.nan
    x[-1, -1, -1, -1] = np.inf
    w = (rng.standard_normal(w_shape) * 0.3).astype(np.float32)
    bias = rng.standard_normal(w_shape[0]).astype(np.float32)
    out_sp = tuple((x_shape[2 + i] + pads[i] + pads[i + 2] - w_shape[2 + i]) // strides[i] + 1 for i in range(2))
    out_shape = (x_shape[0], w_shape[0], *out_sp)
    z = rng.standard_normal(out_shape).astype(np.float32)
    z[0, 1, 0, 0], z[-1, -1, -1, 3] = -np.inf, np.nan
    f32 = np.dtype(np.float32)
    for act, alpha, beta in [(0, 0.0, 0.0), (1, 0.0, 0.0), (2, 0.1, 0.0), (3, -0.5, 0.75)]:
        fused, two_pass = (kernels_conv_implicit.ImplicitConvCall(x_shape, f32, w, bias, strides, (1, 1), pads[:2],
                                                                  out_sp, act, alpha, beta, threads) for _ in range(2))
        two_pass._fused = None
        assert fused.fused_driver == driver
        assert fused._fused is not None and not fused._interleaved
        for residual in (None, z):
            band = np.full(int(np.prod(out_shape)) + 64, np.nan, np.float32)
            band[:32] = band[-32:] = 7.0  # guards either side of the output
            out = band[32:-32].reshape(out_shape)
            got = fused(x, residual, out)
            assert got is out
            np.testing.assert_array_equal(got, two_pass(x, residual))
            assert (band[:32] == 7.0).all() and (band[-32:] == 7.0).all()
            if act == 0 and residual is not None:  # no activation: the NaN and infinities reach it
                assert np.isnan(got).any() and np.isinf(got).any()


@needs_avx512
def test_fgemm_is_not_taken_on_narrow_grids_or_the_interleaved_layout():
    """Grid rows narrower than a vector (a vector would span three output rows), the
    interleaved layout and layers of more than one K block keep the two-pass path."""
    f32 = np.dtype(np.float32)
    deep = kernels_conv_implicit.ImplicitConvCall((1, 160, 40, 40), f32, np.ones((32, 160, 3, 3), np.float32),
                                                  np.zeros(32, np.float32), (1, 1), (1, 1), (1, 1), (40, 40), 0,
                                                  0.0, 0.0, 1)
    assert deep._fused is None  # K = 144, 32 channels, but a 2.6 MB grid
    stem = kernels_conv_implicit.ImplicitConvCall((1, 3, 64, 64), f32, np.ones((24, 3, 3, 3), np.float32),
                                                  np.zeros(24, np.float32), (2, 2), (1, 1), (0, 0), (31, 31), 0,
                                                  0.0, 0.0, 1)
    assert stem.fused_driver == "fgemm"  # K = 27, 24 channels
    wide = kernels_conv_implicit.ImplicitConvCall((1, 16, 40, 40), f32, np.ones((64, 16, 3, 3), np.float32),
                                                  np.zeros(64, np.float32), (1, 1), (1, 1), (1, 1), (40, 40), 0,
                                                  0.0, 0.0, 1)
    assert wide.fused_driver == "fgemm_rows"  # 64 channels, a 108 KB grid
    narrow = kernels_conv_implicit.ImplicitConvCall((1, 16, 12, 12), f32, np.ones((8, 16, 3, 3), np.float32),
                                                    np.zeros(8, np.float32), (1, 1), (1, 1), (1, 1), (12, 12), 0,
                                                    0.0, 0.0, 1)
    assert narrow._fused is None
    interleaved = kernels_conv_implicit.ImplicitConvCall((8, 32, 8, 8), f32, np.ones((64, 32, 3, 3), np.float32),
                                                         np.zeros(64, np.float32), (2, 2), (1, 1), (1, 1), (4, 4), 0,
                                                         0.0, 0.0, 1)
    assert interleaved._interleaved and interleaved._fused is None


@pytest.mark.parametrize(("c", "m", "plane", "driver"), [
    (64, 256, 56 * 56, "pgemm_rows"),  # resnet50's expanding layer: 800 KB of input
    (16, 64, 55 * 55, "pgemm_rows"),
    (256, 64, 56 * 56, "pgemm"),  # reduces the channels: the input is re-read a row tile
    (96, 128, 56 * 56, "pgemm"),  # expands, but 1.2 MB of input
])
def test_pointwise_driver_rule(c, m, plane, driver):
    """Row tiles outermost for expanding layers whose input fits ``ROWS_OUTER_MAX_INPUT``."""
    from epoxy_ep_cpu.jit.kernels_pointwise import driver as choose

    assert choose(c, m, plane) == driver


@needs_avx512
def test_an_rgb_7x7_stem_runs_fgemm_rows_before_the_rows_route(monkeypatch):
    """A 7x7 stride-2 RGB stem (resnet50's, smaller) takes the implicit GEMM on ``fgemm_rows``
    rather than the rows route (``ops/conv.STEM_MAX_CHANNELS``), close to the numpy path."""
    from epoxy_ep_cpu.jit import kernels_conv_rows

    seen = _count(monkeypatch, kernels_conv_implicit.ImplicitConvCall)
    rows = _count(monkeypatch, kernels_conv_rows.RowsConvCall)
    drivers: list[str | None] = []
    real_init = kernels_conv_implicit.ImplicitConvCall.__init__

    def spy_init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        drivers.append(self.fused_driver)

    monkeypatch.setattr(kernels_conv_implicit.ImplicitConvCall, "__init__", spy_init)
    x, w, b = conv_data(7, (1, 3, 64, 64), (64, 3, 7, 7))
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], {"strides": [2, 2], "pads": [3, 3, 3, 3]}, 22)
    (on,) = run_cpu(case, True, runs=2)
    assert seen == [(1, 3, 64, 64)] * 2 and rows == [] and drivers == ["fgemm_rows"]
    close([on], run_cpu(case, False), 1e-5, 1e-4)


def test_implicit_over_winograd_takes_few_output_channels_of_shallow_layers():
    """The implicit GEMM runs 3x3 stride-1 layers of few output channels when their input is
    shallow too (the exporter CNNs' 8 -> 16 and 16 -> 32 layers); densenet121's 128 -> 32
    layers on 56x56 and 28x28 stay on Winograd (measured faster there); small maps of up to
    64 output channels take the implicit GEMM whatever their depth."""
    from epoxy_ep_cpu.ops.conv import implicit_over_winograd

    assert implicit_over_winograd(8, 16, (32, 32)) and implicit_over_winograd(64, 32, (56, 56))
    assert not implicit_over_winograd(128, 32, (56, 56)) and not implicit_over_winograd(128, 32, (28, 28))
    assert implicit_over_winograd(128, 64, (14, 14)) and implicit_over_winograd(512, 32, (8, 8))
    assert not implicit_over_winograd(64, 96, (28, 28))
