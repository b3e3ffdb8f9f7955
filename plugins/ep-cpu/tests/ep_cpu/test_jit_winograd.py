"""The jit tier's F(4x4, 3x3) and F(2x2, 3x3) convolutions with compiled transforms
(jit/kernels_winograd.py, jit/kernels_winograd_f23.py)
against its oracles: the numpy path (jit off, itself F(4,3) on these layers or another path),
the ONNX reference and onnxruntime (FusedConv), on odd map sizes, asymmetric pads, batches,
the fused epilogue (bias, residual, activation) and the parallel variants.

Tolerance: F(4,3) rounds differently from a direct sum (its transforms scale values by up to
~100 before the GEMM): about 1e-5 of the output's largest magnitude in float32 on random data,
the numpy F(4,3) path's class (ops/_winograd_f43.py), so ``atol = 1e-4 * max|want|``."""

from __future__ import annotations

import numpy as np
import pytest
from _hostile import In, one_node, run_onnxruntime, run_reference
from _jit_cases import close, run_cpu

pytest.importorskip("numba")

from epoxy_ep_cpu.ops import conv as conv_ops  # noqa: E402

# the small-layer kernel would take many of these layers: its own tests are test_jit_conv_small.py
pytestmark = pytest.mark.usefixtures("no_small_conv")


def _calls(monkeypatch, tile: int = 4) -> list[tuple[int, ...]]:
    """Input shapes of the WinogradCall calls from now on; every layer below is routed there
    (the size thresholds lowered to nothing), on F(4x4, 3x3) or with ``tile`` 2 F(2x2, 3x3)."""
    from epoxy_ep_cpu.jit import kernels_winograd

    monkeypatch.setattr(conv_ops, "_WINOGRAD_JIT_MIN_C", 0)  # the cases' few channels keep the tests fast
    monkeypatch.setattr(conv_ops, "implicit_over_winograd", lambda *a: False)  # the implicit GEMM's small layers
    if tile == 4:
        monkeypatch.setattr(conv_ops, "_F43_JIT_MIN_PAIR_POSITIONS", {1: 0, 2: 0})
        monkeypatch.setattr(conv_ops, "_F43_JIT_MIN_TILES_THREADS", 0)
        monkeypatch.setattr(conv_ops, "_F43_JIT_NARROW_TILES_THREADS", 0)
    else:
        monkeypatch.setattr(conv_ops, "use_f43_jit", lambda *a: False)
        monkeypatch.setattr(conv_ops, "_F43_JIT_MIN_TILES", 1 << 30)  # every map "too small" for F(4,3)
        monkeypatch.setattr(conv_ops, "_F23_JIT_MIN_PAIR_POSITIONS", {1: 0, 2: 0})
        monkeypatch.setattr(conv_ops, "_F23_JIT_MIN_POSITIONS_THREADS", 0)
    seen: list[tuple[int, ...]] = []
    real = kernels_winograd.WinogradCall.__call__

    def spy(self, x, z):  # type: ignore[no-untyped-def]
        assert self._elements == (tile + 2) ** 2  # the variant asked for
        seen.append(x.shape)
        return real(self, x, z)

    monkeypatch.setattr(kernels_winograd.WinogradCall, "__call__", spy)
    return seen


def _data(seed: int, x_shape, w_shape):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32),
            rng.standard_normal(w_shape[0]).astype(np.float32))


def _atol(want: list[np.ndarray]) -> float:
    return 1e-4 * max(1.0, float(np.nanmax(np.abs(want[0]))))


# (x shape, M, pads): 16+ tiles each, above the direct kernel's 2^16 multiply-adds; sizes that
# are not multiples of 4 leave partial tiles
CASES = [
    ((1, 16, 16, 16), 16, [1, 1, 1, 1]),
    ((1, 8, 13, 13), 12, [1, 1, 1, 1]),  # inception_v1's 13x13: a 1-row/column last tile
    ((2, 5, 15, 17), 7, [1, 1, 1, 1]),  # batch 2 folded into the GEMM's tiles, odd channels
    ((1, 6, 18, 14), 9, [0, 1, 2, 0]),  # asymmetric pads: the output is 18 x 12
    ((1, 8, 16, 16), 16, [0, 0, 0, 0]),  # valid: 14 x 14
    ((3, 8, 9, 9), 8, [2, 2, 2, 2]),  # pads past the kernel's reach, batch 3 (27 tiles)
    # wide maps: the output transform takes bands of tile rows (winograd_rows.BAND_TILES), here
    # several a plane with a partial last one (F(4,3): 17 tiles a row, 15-row bands; F(2,3): 34, 7)
    ((2, 2, 70, 66), 3, [1, 1, 1, 1]),
    # small maps: the output transform takes several whole planes a chunk, in the products'
    # order (channel-major, image-minor), with a partial last chunk (F(4,3): 4 tiles a plane,
    # 64 planes a chunk, 164 planes; F(2,3): 16 tiles, 16 planes a chunk)
    ((4, 8, 7, 7), 41, [1, 1, 1, 1]),
]


@pytest.mark.parametrize("tile", [4, 2], ids=["F43", "F23"])
@pytest.mark.parametrize(("x_shape", "m", "pads"), CASES, ids=[f"{c[0]}x{c[1]}p{c[2]}" for c in CASES])
def test_compiled_f43_matches_numpy_path_and_reference(monkeypatch, x_shape, m, pads, tile):
    seen = _calls(monkeypatch, tile)
    x, w, b = _data(sum(x_shape) + m, x_shape, (m, x_shape[1], 3, 3))
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], {"pads": pads}, 22)
    on, off, ref = run_cpu(case, True, runs=3), run_cpu(case, False), run_reference(case)
    assert seen == [x_shape] * 3
    close(on, ref, 1e-4, _atol(ref))
    close(on, off, 1e-4, _atol(ref))


ACTS = [("Relu", ()), ("LeakyRelu", (0.2,)), ("Clip", (-0.5, 0.7)), ("Sigmoid", ()), ("", ())]


@pytest.mark.parametrize("tile", [4, 2], ids=["F43", "F23"])
@pytest.mark.parametrize(("act", "params"), ACTS, ids=[f"{a or 'none'}{p}" for a, p in ACTS])
@pytest.mark.parametrize("residual", ["none", "full", "broadcast"])
def test_compiled_f43_fused_conv_epilogue(monkeypatch, act, params, residual, tile):
    """FusedConv's residual and activation in the output transform's store (Sigmoid runs after
    it, in numpy); a broadcast residual is added by the numpy tail after the compiled conv."""
    seen = _calls(monkeypatch, tile)
    x, w, b = _data(len(act) + 31, (2, 8, 14, 14), (16, 8, 3, 3))
    rng = np.random.default_rng(31)
    z = {"none": None, "full": rng.standard_normal((2, 16, 14, 14)).astype(np.float32),
         "broadcast": rng.standard_normal((1, 16, 1, 1)).astype(np.float32)}[residual]
    full = {"pads": [1, 1, 1, 1], **({"activation": act} if act else {}),
            **({"activation_params": list(params)} if params else {})}
    case = one_node("FusedConv", [x, In(w, const=True), In(b, const=True), z], full, 1, domain="com.microsoft")
    on, off = run_cpu(case, True, runs=2), run_cpu(case, False)
    assert seen == [x.shape] * 2
    close(on, off, 1e-4, _atol(off))
    if residual != "broadcast":  # onnxruntime's Z is the output's shape
        close(on, run_onnxruntime(case), 1e-4, _atol(off))


@pytest.mark.parametrize("x_shape,w_shape", [((2, 6, 17, 13), (10, 6, 3, 3)), ((2, 19, 17, 13), (37, 19, 3, 3))],
                         ids=["even", "odd-planes"])
@pytest.mark.parametrize("tile", [4, 2], ids=["F43", "F23"])
def test_transforms_split_over_two_threads_match_one_thread(monkeypatch, split_recorder, tile, x_shape, w_shape):
    """Forced onto two threads (grain 1), the transforms run as two shares of planes (the
    caller and a helper: the native pool's, or the executor's) and give the one-thread values
    exactly: each plane is transformed by one thread, in the same order; so does the product
    between them, split over the stack of 16 or 36 products on the native pool."""
    from epoxy_ep_cpu.jit import kernels_winograd

    _calls(monkeypatch, tile)
    x, w, b = _data(41, x_shape, w_shape)
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], {"pads": [1, 0, 1, 2]}, 22)
    serial = run_cpu(case, True, jit_threads=1, runs=2)
    shares = split_recorder(kernels_winograd)
    close(run_cpu(case, True, jit_threads=2, runs=2), serial, 0, 0)
    planes_in, planes_out = x_shape[0] * x_shape[1], x_shape[0] * w_shape[0]
    assert shares == [(planes_in, 2), (planes_out, 2)] * 2  # both transforms, on both runs


def test_run_shares_covers_the_range_once_in_order_and_reports_errors():
    from epoxy_ep_cpu.jit import threads

    seen: list[tuple[int, int]] = []
    lock = __import__("threading").Lock()

    def record(tag, first, last):
        with lock:
            seen.append((first, last))

    for total, count in ((10, 3), (5, 8), (1, 2), (7, 1)):
        seen.clear()
        threads.run_shares(record, ("t",), total, count)
        spans = sorted(seen)
        assert spans[0][0] == 0 and spans[-1][1] == total
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # contiguous, no overlap
        assert len(spans) == min(count, total)

    def failing(first, last):
        if first > 0:
            raise ValueError("helper share failed")

    with pytest.raises(ValueError, match="helper share failed"):
        threads.run_shares(failing, (), 4, 2)


def test_non_finite_inputs_spread_as_in_the_numpy_f43():
    """A NaN or an infinity in a tile reaches every output of the tiles that read it (the
    transforms mix the tile), as on the numpy F(4,3) path; the other outputs stay finite."""
    x, w, b = _data(43, (1, 32, 28, 28), (32, 32, 3, 3))
    x[0, 3, 10, 10] = np.nan
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], {"pads": [1, 1, 1, 1]}, 22)
    on = run_cpu(case, True)[0]
    nan_planes = np.isnan(on[0]).any(axis=0)
    assert nan_planes[9:12, 9:12].all()  # every output whose window holds the NaN
    assert nan_planes.sum() <= 8 * 8  # at most the 2x2 tiles around it
    assert np.isfinite(on[0][:, :8, :]).all()


@pytest.mark.parametrize(("dtype", "attrs", "w_shape"), [
    (np.float64, {"pads": [1, 1, 1, 1]}, (8, 8, 3, 3)),
    (np.float32, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, (8, 8, 3, 3)),
    (np.float32, {"pads": [1, 1, 1, 1], "dilations": [2, 2]}, (8, 8, 3, 3)),
    (np.float32, {"pads": [1, 1, 1, 1], "group": 2}, (8, 4, 3, 3)),  # alexnet's grouped 3x3 layers
    (np.float32, {"pads": [-1, 1, 1, 1]}, (8, 8, 3, 3)),
], ids=["float64", "strided", "dilated", "grouped", "negative-pad"])
def test_layers_f43_cannot_run_never_take_it(monkeypatch, dtype, attrs, w_shape):
    """Not on float64 (the numpy paths keep their exact sums), strided, dilated, grouped or
    negatively padded layers, whatever the size thresholds say."""
    seen = _calls(monkeypatch)
    x, w, b = _data(44, (1, 8, 16, 16), w_shape)
    case = one_node("Conv", [x.astype(dtype), In(w.astype(dtype), const=True), In(b.astype(dtype), const=True)],
                    attrs, 22)
    want = run_cpu(case, False)  # onnx.reference refuses negative pads
    close(run_cpu(case, True, runs=2), want, 1e-4, _atol(want))
    assert seen == []


def test_alexnet_grouped_layer_runs_on_its_own_path(monkeypatch):
    """A 3x3 group-2 layer of alexnet's size (192 -> 384 channels on 13x13, 2 groups: the
    bench failure that found the missing group check) never reaches the F(4,3) call."""
    seen = _calls(monkeypatch)
    x, w, b = _data(45, (1, 384, 13, 13), (256, 192, 3, 3))
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], {"pads": [1, 1, 1, 1], "group": 2}, 22)
    close(run_cpu(case, True), run_cpu(case, False), 1e-4, _atol(run_cpu(case, False)))
    assert seen == []


def test_use_f23_jit_thresholds():
    """One thread: the maps F(4,3) has too few tiles for (7x7, 12x12), from 2^17 channel pairs
    x positions, but not many channels on 16 tiles; two threads: from 10x10 maps and 4 M; with
    conv_winograd=f23 any map."""
    use = conv_ops.use_f23_jit
    assert use(1, 224, 224, [7, 7], 1) and use(1, 128, 32, [7, 7], 1) and not use(1, 16, 16, [7, 7], 1)
    assert not use(1, 512, 512, [7, 7], 1) and use(1, 512, 512, [12, 12], 1)  # 16 tiles: narrow GEMMs
    assert not use(1, 256, 256, [14, 14], 1)  # 16 tiles: F(4,3)'s
    assert use(1, 256, 256, [14, 14], 1, f43_allowed=False)
    assert not use(1, 512, 512, [7, 7], 2) and use(1, 512, 512, [12, 12], 2) and not use(1, 64, 64, [12, 12], 2)


def test_use_f43_jit_thresholds(monkeypatch):
    """The routing's numbers (ops/conv.py), as measured on AVX-512: 16 tiles at least; channel
    pairs x positions from ~0.8 M on one thread and ~10 M on two; on two threads 25 tiles an
    image at least, and under 100 tiles 32 M pairs x positions."""
    monkeypatch.setattr(conv_ops, "_two_thread_rule", lambda: True)
    use = conv_ops.use_f43_jit
    assert not use(1, 512, 512, [7, 7], 1) and not use(1, 512, 512, [12, 12], 2)  # 4 and 9 tiles
    assert use(1, 128, 32, [56, 56], 1) and use(1, 128, 32, [56, 56], 2)
    assert use(1, 32, 32, [28, 28], 1) and not use(1, 32, 32, [14, 14], 1)
    assert use(1, 128, 128, [14, 14], 1) and not use(1, 128, 128, [14, 14], 2)
    # two threads: 14x14 maps (16 tiles) never, whatever the channels or the batch
    assert use(1, 512, 512, [14, 14], 1) and not use(1, 512, 512, [14, 14], 2)
    assert use(4, 256, 256, [14, 14], 1) and not use(4, 256, 256, [14, 14], 2)
    # 28x28 (49 tiles): wide layers keep F(4,3), 12.8 M pairs x positions do not
    assert use(1, 256, 256, [28, 28], 2) and use(1, 512, 512, [28, 28], 2)
    assert use(1, 128, 128, [28, 28], 1) and not use(1, 128, 128, [28, 28], 2)
    assert use(1, 64, 64, [56, 56], 2)  # 196 tiles


def test_use_f43_jit_keeps_the_one_thread_rule_on_two_threads_without_avx512(monkeypatch):
    """On an AVX2 CPU (``_two_thread_rule`` False) two threads decide as one does: the grid
    GEMM's two-thread OpenBLAS product gains less there (16 -> 64 on 55x55, 2 threads: F(4,3)
    661-773 us, the grid GEMM 1369-1401)."""
    monkeypatch.setattr(conv_ops, "_two_thread_rule", lambda: False)
    use = conv_ops.use_f43_jit
    for layer in ((1, 16, 64, [55, 55]), (1, 128, 128, [14, 14]), (4, 256, 256, [14, 14]), (1, 128, 128, [28, 28]),
                  (1, 512, 512, [12, 12]), (1, 32, 32, [14, 14])):
        assert use(*layer, 2) == use(*layer, 1)
    assert use(1, 16, 64, [55, 55], 2) and not use(1, 512, 512, [12, 12], 2)


def test_rgb_stems_never_take_the_compiled_winograd_whatever_the_batch():
    """The channel pairs x positions count grows with the batch, but 3 input channels make
    the transforms the cost: a batch of 16 RGB images on 32x32 stays on the grid GEMM."""
    for use in (conv_ops.use_f43_jit, conv_ops.use_f23_jit):
        for threads in (1, 2):
            assert not use(16, 3, 16, [32, 32], threads) and not use(64, 3, 64, [224, 224], threads)
    assert conv_ops.use_f43_jit(16, 8, 16, [32, 32], 1)  # from 8 channels the count decides again


@pytest.mark.parametrize("tile", [4, 2], ids=["F43", "F23"])
def test_per_plane_transforms_compile_only_inside_their_share_kernels(monkeypatch, tile):
    """The per-plane transforms are inlined at numba IR level (``inline="always"``) into the
    share kernels that loop over planes: compiled on their own as well (LLVM optimized each
    twice), each cost ~1 s more of a cold first run (resnet50 13.9 -> 9.1 s, bench/README
    session 31)."""
    from epoxy_ep_cpu.jit import kernels_winograd, kernels_winograd_f23

    module = kernels_winograd if tile == 4 else kernels_winograd_f23
    seen = _calls(monkeypatch, tile)
    x, w, b = _data(5, (1, 8, 16, 16), (16, 8, 3, 3))
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], {"pads": [1, 1, 1, 1]}, 22)
    close(run_cpu(case, True), run_reference(case), 1e-4, 1e-3)
    assert seen == [x.shape]
    for helper in (module._input_plane, module._output_stages):
        # declared so, and never compiled alone (a cached share kernel compiles nothing at all)
        assert helper.targetoptions.get("inline") == "always", helper.__name__
        assert not helper.overloads, helper.__name__
