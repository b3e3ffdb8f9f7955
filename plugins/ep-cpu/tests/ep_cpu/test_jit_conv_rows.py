"""Group-1 float32 convolutions with output positions as the GEMM's rows (jit/kernels_conv_rows.py:
the phase grid, ``sgemm_ir``'s ``cgemm`` reading the grid through a position table and the
row offsets, the transposing store) against a float64 convolution, the numpy path (jit off),
the ONNX reference and onnxruntime (FusedConv), with proof that it ran; the kernel's edge
tiles and K blocks checked on their own.

Values are compared within the float32 bound of a sum in any order (``conv_float64``). On a
CPU without AVX-512 the layers keep the other paths, which the routing test checks instead."""

from __future__ import annotations

import numpy as np
import pytest
from _hostile import In, one_node, run_onnxruntime, run_reference
from _jit_cases import case_ids, close, conv_data, conv_float64, conv_out_shape, run_cpu, spy_calls

pytest.importorskip("numba")

from epoxy_ep_cpu.jit import kernels_conv_rows, kernels_sgemm  # noqa: E402

needs_float_gemm = pytest.mark.skipif(kernels_sgemm.support() is not None,
                                  reason=f"row-gathered conv kernel: {kernels_sgemm.support()}")


@pytest.fixture(autouse=True)
def stems_and_strided_1x1_on_this_route(monkeypatch):
    """RGB stems take the implicit GEMM's ``fgemm_rows`` first (``ops/conv.STEM_MAX_CHANNELS``)
    and strided 1x1 layers their stride-1 twin (``SUBSAMPLE_STRIDED_1X1``); here they stay on
    this route, which still runs them where those do not."""
    from epoxy_ep_cpu.ops import conv

    monkeypatch.setattr(conv, "STEM_MAX_CHANNELS", 0)
    monkeypatch.setattr(conv, "SUBSAMPLE_STRIDED_1X1", False)

# (x shape, w shape, attributes): small maps of 3x3 layers (what F(4,3) ran), strides 2 and 3,
# a 7x7 RGB stem, 5x5 and non-square kernels, dilation, asymmetric pads, strided 1x1 layers,
# output channels that fill 1-4 vectors of a column tile and several tiles (40, 72, 200),
# batches whose positions run across images in one row tile (3 x 7x7)
CASES = [
    ((1, 64, 14, 14), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((3, 32, 7, 7), (72, 32, 3, 3), {"pads": [1, 1, 1, 1]}),  # 49 positions an image: tiles across images
    ((1, 48, 15, 15), (40, 48, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 3, 40, 40), (64, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),  # stem, K = 147 (two K blocks)
    ((2, 16, 12, 11), (48, 16, 5, 5), {"pads": [2, 1, 2, 0]}),
    ((1, 32, 16, 16), (32, 32, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((2, 24, 13, 11), (200, 24, 3, 2), {"pads": [0, 1, 2, 0], "strides": [1, 3]}),
    ((2, 256, 8, 8), (96, 256, 1, 1), {"strides": [2, 2]}),  # strided 1x1
    ((1, 128, 7, 7), (512, 128, 3, 3), {"pads": [1, 1, 1, 1]}),  # more channels than positions
    ((3, 96, 7, 7), (160, 96, 1, 1), {}),  # 1x1 stride 1: the input is read as its own grid
]


def _count(monkeypatch) -> list[tuple[int, ...]]:
    """Every layer of the cases on this route (small-map 3x3 ones too, as on AVX-512, where
    the AVX2 rule leaves them to Winograd), its calls counted."""
    monkeypatch.setattr(kernels_conv_rows, "MIN_MACS", 0)
    monkeypatch.setattr(kernels_conv_rows, "MAX_WINOGRAD_POSITIONS", 14 * 14)
    return spy_calls(monkeypatch, kernels_conv_rows.RowsConvCall)


@needs_float_gemm
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES, ids=case_ids(CASES))
def test_rows_kernel_matches_float64_and_the_numpy_path(monkeypatch, x_shape, w_shape, attrs, threads):
    """Every case runs on the kernel (each of three runs), within the float32 bound of a
    float64 convolution, close to the numpy path and the ONNX reference; on two threads the
    layer splits its positions or (more channels than positions) its output channels, with the
    one-thread bits."""
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
    if threads == 2:
        np.testing.assert_array_equal(on, run_cpu(case, True, jit_threads=1)[0])


ACTS = [("Relu", ()), ("LeakyRelu", (0.2,)), ("Clip", (-0.5, 0.7)), ("HardSigmoid", (0.3, 0.4)), ("", ())]


@needs_float_gemm
@pytest.mark.parametrize(("act", "params"), ACTS, ids=[f"{a or 'none'}{p}" for a, p in ACTS])
@pytest.mark.parametrize("residual", ["none", "full"])
@pytest.mark.parametrize("case", [1, 3, 8], ids=["batch", "stem", "columns"])
def test_rows_kernel_fused_conv_epilogue(monkeypatch, act, params, residual, case):
    """FusedConv's residual and activation in the store pass (or after it, for HardSigmoid),
    against the numpy path and onnxruntime."""
    seen = _count(monkeypatch)
    x_shape, w_shape, attrs = CASES[case]
    x, w, b = conv_data(len(act) + 31, x_shape, w_shape)
    rng = np.random.default_rng(31)
    z = rng.standard_normal(conv_out_shape(x_shape, w_shape, attrs)).astype(np.float32) if residual == "full" else None
    full = dict(attrs, **({"activation": act} if act else {}),
                **({"activation_params": list(params)} if params else {}))
    case = one_node("FusedConv", [x, In(w, const=True), In(b, const=True), z], full, 1, domain="com.microsoft")
    on = run_cpu(case, True, runs=2, jit_threads=2)
    assert seen == [x_shape] * 2
    close(on, run_cpu(case, False), 1e-5, 1e-4)
    close(on, run_onnxruntime(case), 1e-4, 1e-4)


@needs_float_gemm
def test_rows_kernel_keeps_nan_and_inf(monkeypatch):
    """A NaN or an infinity in the input reaches the outputs whose windows hold it, as in the
    numpy path (the grid's padding never mixes into kept outputs)."""
    _count(monkeypatch)
    x_shape, w_shape, attrs = CASES[2]
    x, w, b = conv_data(53, x_shape, w_shape)
    x[0, 1, 2, 3] = np.nan
    x[-1, 0, 0, 0] = np.inf
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], attrs, 22)
    (on,), (off,) = run_cpu(case, True), run_cpu(case, False)
    np.testing.assert_array_equal(np.isnan(on), np.isnan(off))
    assert np.isnan(on).any()
    finite = np.isfinite(off)
    close([on[finite]], [off[finite]], 1e-5, 1e-4)


CHUNKED = [CASES[0], CASES[1], CASES[7], CASES[8]]  # one image, three images, strided 1x1, channel split


@needs_float_gemm
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CHUNKED, ids=case_ids(CHUNKED))
def test_position_chunks_give_the_same_bits(monkeypatch, x_shape, w_shape, attrs, threads):
    """A layer's positions in chunks of one row tile, of a few tiles with a partial last one, or
    in one chunk (the heavy-weights budget) give the same bits: chunks split the positions,
    never a sum."""
    monkeypatch.setattr(kernels_conv_rows, "MIN_MACS", 0)
    monkeypatch.setattr(kernels_conv_rows, "MAX_WINOGRAD_POSITIONS", 14 * 14)  # as _count
    chunks: list[int] = []
    spy_calls(monkeypatch, kernels_conv_rows.RowsConvCall, lambda call: chunks.append(call._chunk))
    x, w, b = conv_data(71 + threads, x_shape, w_shape)
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], attrs, 22)
    outputs = []
    for budget, heavy in [(1, 1 << 40), (4 * 64 * 13, 1 << 40), (1, 0)]:
        monkeypatch.setattr(kernels_conv_rows, "CHUNK_BYTES", budget)
        monkeypatch.setattr(kernels_conv_rows, "HEAVY_WEIGHT_BYTES", heavy)
        outputs.append(run_cpu(case, True, jit_threads=threads)[0])
    for other in outputs[1:]:
        np.testing.assert_array_equal(outputs[0], other)
    positions = conv_out_shape(x_shape, w_shape, attrs)[2] * conv_out_shape(x_shape, w_shape, attrs)[3]
    tile = kernels_conv_rows.TILE_ROWS
    assert chunks[0] == tile and chunks[-1] == -(-positions // tile) * tile  # one tile; all in one chunk


@needs_float_gemm
@pytest.mark.parametrize(("depth", "m", "positions", "chunk"), [
    (512, 2048, 49, 54),  # resnet50's 512 -> 2048 on 7x7: 4 MB of weights, one chunk
    (256, 1024, 196, 198),  # 256 -> 1024 on 14x14: 1 MB, one chunk (four at 256 KB)
    (64, 64, 3136, 1020),  # 16 KB of weights: 256 KB chunks
])
def test_heavy_weights_take_larger_chunks(depth, m, positions, chunk):
    """Layers whose packed weights reach HEAVY_WEIGHT_BYTES take HEAVY_CHUNK_BYTES chunks (their
    weights are streamed from L3 once a chunk), the rest CHUNK_BYTES."""
    side = int(positions ** 0.5)
    w = np.zeros((m, depth, 1, 1), np.float32)
    call = kernels_conv_rows.RowsConvCall((1, depth, side, side), np.dtype(np.float32), w, np.zeros(m, np.float32),
                                          (1, 1), (1, 1), (0, 0), (side, side), 0, 0.0, 0.0, 1)
    assert call._chunk == chunk


@needs_float_gemm
@pytest.mark.parametrize("positions", [1, 5, 6, 7, 13])
@pytest.mark.parametrize("m", [16, 48, 64, 80, 200])
@pytest.mark.parametrize("depth", [1, 127, 128, 129, 300])
def test_cgemm_takes_every_edge_tile_and_k_block(positions, m, depth):
    """Row tiles of 1-6 positions, column tiles of 16-64 channels, K below, at and across the
    128-row blocks, read from arbitrary grid offsets: ``out[p, :m] = sum_k X[gpos[p] +
    rowoff[k]] * B[k]``, within the float32 bound."""
    rng = np.random.default_rng(positions * 1000 + m + depth)
    grid = rng.standard_normal(5000).astype(np.float32)
    gpos = rng.integers(0, 1000, positions).astype(np.int64)
    rowoff = rng.integers(0, 3999, depth).astype(np.int64)
    b = rng.standard_normal((depth, m)).astype(np.float32)
    packed = kernels_sgemm.PackedFloatWeights(b, 1)
    ldo = packed._n_pad
    out = np.full((positions, ldo), np.nan, np.float32)  # every kept element is written
    kernels_sgemm._MODULE.function("cgemm")(grid.ctypes.data, gpos.ctypes.data, rowoff.ctypes.data,
                                            packed._packed_at, out.ctypes.data, ldo, positions, depth, ldo,
                                            kernels_conv_rows.KC, 0, ldo)
    a = grid[gpos[:, None] + rowoff[None, :]].astype(np.float64)
    want = a @ b.astype(np.float64)
    bound = 2 * depth * np.finfo(np.float32).eps * (np.abs(a) @ np.abs(b.astype(np.float64)))
    assert (np.abs(out[:, :m] - want) <= bound + 1e-30).all()


@pytest.mark.parametrize(("n", "ck", "m", "positions", "takes"), [
    (1, 2304, 256, 196, True),  # resnet50's 256 -> 256 on 14x14
    (1, 147, 64, 12544, True),  # its 7x7 RGB stem
    (1, 2304, 16, 196, False),  # fewer output channels than MIN_CHANNELS: the small kernel's
    (1, 27, 64, 12544, False),  # K below MIN_DEPTH (a 3x3 RGB stem)
    (1, 576, 32, 49, False),  # fewer multiply-adds than MIN_MACS
])
def test_routing_rule(n, ck, m, positions, takes):
    """What the kernel takes (``gains``), on a CPU that can run it; none elsewhere."""
    able = kernels_sgemm.support() is None
    assert kernels_conv_rows.gains(n, ck, m, positions) == (takes and able)


@needs_float_gemm
def test_routes_around_the_pointwise_and_big_map_winograd_layers():
    """1x1 stride-1 layers of maps past POINTWISE_MAX_POSITIONS keep the pointwise path, 3x3
    stride-1 layers of maps past MAX_WINOGRAD_POSITIONS keep F(4x4, 3x3) (with
    conv_winograd=off they come here), and small-map 3x3 layers and strided ones come here; on
    AVX2 (the narrow tile) every 3x3 stride-1 layer Winograd can take keeps it on one thread."""
    wide = kernels_conv_rows.WIDE_TILE
    seen: list[tuple[int, ...]] = []
    real = kernels_conv_rows.RowsConvCall.__init__

    def noted(self, shape, *args, **kwargs):
        seen.append(shape)
        real(self, shape, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernels_conv_rows.RowsConvCall, "__init__", noted)
        for x_shape, w_shape, attrs, options, here in [
            ((1, 64, 28, 28), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}, {"jit_threads": 1}, False),  # F(4,3)
            ((1, 64, 28, 28), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}, {"conv_winograd": "off"}, True),
            ((1, 128, 14, 14), (128, 128, 3, 3), {"pads": [1, 1, 1, 1]}, {}, wide),
            ((1, 256, 28, 28), (128, 256, 1, 1), {}, {}, False),  # pointwise on 784 positions
            ((1, 256, 14, 14), (128, 256, 1, 1), {}, {}, True),  # ... on 196: here, the input as its grid
            ((1, 64, 28, 28), (128, 64, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, {}, True),
            # on two threads shallow layers come here up to 28x28 maps (their Winograd splits worse)
            ((1, 64, 28, 28), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}, {"jit_threads": 2}, True),
            ((1, 128, 28, 28), (64, 128, 3, 3), {"pads": [1, 1, 1, 1]}, {"jit_threads": 2}, False),
        ]:
            seen.clear()
            x, w, b = conv_data(7, x_shape, w_shape)
            run_cpu(one_node("Conv", [x, In(w, const=True), In(b, const=True)], attrs, 22), True, **options)
            assert bool(seen) == here, (x_shape, w_shape, options)


# -- one packed copy a layer: the original weight goes once the static shape's call packed it ---


def test_packed_columns_unpack_to_the_weight_exactly():
    """``PackedFloatWeights.unpacked`` gives B back bit for bit, for widths that fill several
    column tiles and a padded last one (what a let-go layer rebuilds its weight from)."""
    rng = np.random.default_rng(7)
    for k, n in ((9, 5), (147, 64), (256, 200), (32, 1000)):
        b = rng.standard_normal((k, n)).astype(np.float32)
        np.testing.assert_array_equal(kernels_sgemm.PackedFloatWeights(b, 1).unpacked(), b)


def _released_session(x_shape, w_shape, attrs, monkeypatch):
    import epoxy

    monkeypatch.setattr(kernels_conv_rows, "MIN_MACS", 0)
    monkeypatch.setattr(kernels_conv_rows, "MAX_WINOGRAD_POSITIONS", 14 * 14)
    x, w, b = conv_data(sum(x_shape), x_shape, w_shape)
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], attrs, 22)
    session = epoxy.InferenceSession(case.model.SerializeToString(), providers=[("cpu", {"jit": True})])
    return session, case, x, w, b


@needs_float_gemm
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [
    ((1, 64, 14, 14), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((3, 96, 7, 7), (160, 96, 1, 1), {}),
    ((2, 256, 8, 8), (96, 256, 1, 1), {"strides": [2, 2]}),  # strided 1x1 (its twin, when subsampled)
])
def test_a_static_layer_on_this_route_keeps_one_copy_of_its_weight(monkeypatch, x_shape, w_shape, attrs):
    """The session drops its reference to W (the kernel says it never reads it:
    ``released_inputs``), the layer drops its own once its call packed W, and every run gives
    the float64 convolution's values within the float32 bound, the same bits each time."""
    import gc

    from epoxy_ep_cpu.ops import conv

    session, case, x, w, b = _released_session(x_shape, w_shape, attrs, monkeypatch)
    assert any("held only by the kernels" in note for note in session._report.notes), session._report.notes
    weights = [o for o in gc.get_objects() if type(o) is conv._ConvWeights and o.w_shape == w_shape]
    assert len(weights) == 1 and weights[0].let_go_when_packed
    first = session.run(None, case.feeds)[0]
    assert weights[0]._w is None and weights[0]._gemm_columns is not None  # only the packed copy is left
    want, bound = conv_float64(x, w, b, attrs)
    assert (np.abs(first - want) <= bound).all()
    np.testing.assert_array_equal(session.run(None, case.feeds)[0], first)
    np.testing.assert_array_equal(weights[0].w, w)  # rebuilt from the packed copy, should another path need it


@needs_float_gemm
def test_a_layer_packs_its_weight_once_for_every_input_shape(monkeypatch):
    """A dynamic batch: each new shape prepares its own call, all on the one packed copy
    (each call packed its own before: a second copy of the weight per shape)."""
    import epoxy

    monkeypatch.setattr(kernels_conv_rows, "MIN_MACS", 0)
    packed = []
    real = kernels_conv_rows.pack_weights
    monkeypatch.setattr(kernels_conv_rows, "pack_weights", lambda w: packed.append(w.shape) or real(w))
    x, w, b = conv_data(11, (2, 96, 7, 7), (160, 96, 1, 1))
    case = one_node("Conv", [In(x, shape=["N", 96, 7, 7]), In(w, const=True), In(b, const=True)], {}, 22)
    session = epoxy.InferenceSession(case.model.SerializeToString(), providers=[("cpu", {"jit": True})])
    calls = spy_calls(monkeypatch, kernels_conv_rows.RowsConvCall)
    for n in (1, 2, 3):
        got = session.run(None, {"x0": x[:1].repeat(n, axis=0)})[0]
        want, bound = conv_float64(x[:1].repeat(n, axis=0), w, b, {})
        assert (np.abs(got - want) <= bound).all()
    assert [shape[0] for shape in calls] == [1, 2, 3]
    assert packed == [(160, 96, 1, 1)]
