"""Calibration statistics (epoxy.quantization): histograms, the four methods, scale/zero point,
the feed sources and collect() on the mini cpu provider. onnxruntime as an oracle lives in
tests/integration/test_quantization_calibration.py."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from epoxy.quantization import (
    METHODS,
    CalibrationDataError,
    Histogram,
    activation_tensors,
    collect,
    dequantize,
    entropy,
    folder_feeds,
    iter_feeds,
    minmax,
    mse,
    percentile,
    qrange,
    quant_params,
    quantize,
)


def heavy_tailed(n: int = 200_000, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_t(3, size=n).astype(np.float32)


def hist_of(x: np.ndarray, bins: int = 2048, batches: int = 1) -> Histogram:
    h = Histogram(bins)
    for part in np.array_split(x, batches):
        h.update(part)
    return h


def raw_error(x: np.ndarray, t: float, **scheme) -> float:
    """Mean quantize-dequantize error on the raw data for the window [-t, t] cut to the data,
    quantized to the scheme's integer range (as weights are under reduce_range)."""
    lo, hi = max(-t, min(float(x.min()), 0.0)), min(t, max(float(x.max()), 0.0))
    p = quant_params((lo, hi), **scheme)
    clip = qrange(scheme["dtype"], symmetric=scheme["symmetric"], reduce_range=scheme.get("reduce_range", False))
    return float(np.mean((x - dequantize(quantize(x, p, clip=clip), p)) ** 2))


def brute_force_mse(x: np.ndarray, h: Histogram, **scheme) -> float:
    """The candidate threshold (a bin edge of |x|) of least error on the raw data."""
    candidates = np.arange(1, len(h.folded()) + 1) * h.width
    return float(candidates[int(np.argmin([raw_error(x, t, **scheme) for t in candidates]))])


# -- histogram ------------------------------------------------------------------------------
def test_min_max_are_the_true_extremes_across_growing_batches():
    rng = np.random.default_rng(1)
    batches = [rng.normal(0, s, 5000).astype(np.float32) for s in (0.1, 1.0, 30.0, 0.5, 200.0)]
    h = Histogram()
    for b in batches:
        h.update(b)
    every = np.concatenate(batches)
    assert minmax(h) == (float(every.min()), float(every.max()))
    assert h.total == every.size and h.lo <= every.min() and every.max() <= h.hi
    assert h.counts.shape == (2048,)  # bounded: the range grew, the bin count did not


def test_merged_histogram_is_the_histogram_of_all_data_on_its_edges():
    rng = np.random.default_rng(2)
    batches = [rng.normal(m, s, 20_000) for m, s in ((0, 0.01), (3, 1), (-40, 5), (100, 20))]
    h = Histogram(512)
    for b in batches:
        h.update(b)
    every = np.concatenate(batches)
    direct, _ = np.histogram(every, bins=h.edges())
    # merging is exact: only values a rounding away from an edge may sit in the neighbour bin
    assert np.abs(direct - h.counts).sum() <= 4
    once = hist_of(every, 512)
    for q in (0.01, 0.3, 0.5, 0.9, 0.999):  # same distribution as one pass over all data, within a bin
        merged_q = percentile(h, q * 100, symmetric=False).hi
        once_q = percentile(once, q * 100, symmetric=False).hi
        assert abs(merged_q - once_q) <= h.width + once.width


def test_one_sided_tensor_spends_every_bin_on_its_side_and_zero_is_an_edge():
    rng = np.random.default_rng(3)
    h = Histogram(256)
    for s in (1.0, 5.0, 50.0):
        h.update(np.maximum(rng.normal(0, s, 1000), 0))
    assert h.lo == 0.0 and h.neg == 0
    signed = Histogram(256)
    signed.update(np.array([-3.0, 1.0]))
    signed.update(np.array([-7.5, 11.0]))
    assert 0.0 in signed.edges()
    assert signed.folded().sum() == signed.total


def test_zeros_nonfinite_and_bad_bins():
    h = Histogram(16)
    h.update(np.zeros(10, np.float32))
    assert h.total == 10 and h.width == 0.0 and minmax(h) == (0.0, 0.0)
    assert all(METHODS[m](h) == (0.0, 0.0) for m in METHODS)
    assert quant_params(minmax(h)) == (np.float32(1.0), np.int8(0))
    h.update(np.array([np.nan, np.inf, 2.0, -np.inf]))
    assert h.nonfinite == 3 and h.total == 11 and h.max == 2.0 and h.zeros == 10
    assert h.counts[h.neg] == 10  # the zeros that waited for a range land in the [0, w) bin
    with pytest.raises(ValueError, match="even"):
        Histogram(7)


# -- methods --------------------------------------------------------------------------------
def test_the_four_methods_differ_on_heavy_tails():
    x = heavy_tailed()
    h = hist_of(x, batches=7)
    his = {m: METHODS[m](h).hi for m in METHODS}
    ordered = sorted(his.values())
    assert all(b - a > 2 * h.width for a, b in zip(ordered, ordered[1:])), his
    assert his["minmax"] > his["percentile"] > his["mse"] > his["entropy"]  # as docs/QUANTIZATION.md says
    assert his["minmax"] == float(x.max())
    assert his["entropy"] < 0.5 * float(np.abs(x).max())


def test_the_methods_agree_on_a_uniform_sample():
    x = np.random.default_rng(4).uniform(-1, 1, 400_000)
    h = hist_of(x)
    top = float(np.abs(x).max())
    for method in ("minmax", "percentile", "entropy"):
        assert abs(METHODS[method](h).hi - top) <= h.width, method
    # mse trades a sliver of clipping for finer steps: for uniform(-1, 1) the expected error is
    # t * (t/127)^2/12 (rounding, the fraction t of values kept) + (1-t)^3/3 (clipping), least near 0.996
    t = np.linspace(0.9, 1.0, 100_001)
    analytic = t[np.argmin(t**3 / (12 * 127**2) + (1 - t) ** 3 / 3)]
    assert 0.99 < analytic < 1 - h.width
    assert abs(mse(h).hi - analytic) <= 2 * h.width


@pytest.mark.parametrize("p", [99.0, 99.9, 99.999])
def test_percentile_is_within_a_bin_of_numpy(p):
    x = heavy_tailed(seed=5)
    h = hist_of(x, batches=3)
    assert abs(percentile(h, p).hi - np.percentile(np.abs(x), p)) <= h.width
    two_sided = percentile(h, p, symmetric=False)
    assert abs(two_sided.lo - np.percentile(x, 100 - p)) <= h.width
    assert abs(two_sided.hi - np.percentile(x, p)) <= h.width
    with pytest.raises(ValueError, match="percentile"):
        percentile(h, 0)


def test_entropy_clips_heavy_tails_and_keeps_short_ones():
    x = heavy_tailed(seed=6)
    h = hist_of(x)
    assert entropy(h).hi < float(np.abs(x).max()) / 2
    short = hist_of(np.random.default_rng(6).uniform(-1, 1, 10_000), bins=128)  # 64 bins: below 128 levels
    assert entropy(short).hi == pytest.approx(np.abs(short.edges()).max(), abs=short.width)


@pytest.mark.parametrize(("data", "scheme", "bins_off"), [
    ("laplace", {"dtype": "int8", "symmetric": True}, 1),
    ("laplace", {"dtype": "int8", "symmetric": True, "reduce_range": True}, 1),
    # 255 levels put the optimum among the last dozen values of the tail, where a histogram cannot
    # say where a lone value sits inside its bin: a few bins off, at a fraction of a percent of error
    ("relu", {"dtype": "uint8", "symmetric": False}, 3),
    ("relu", {"dtype": "uint8", "symmetric": False, "reduce_range": True}, 1),
])
def test_mse_is_within_a_bin_of_a_brute_force_search(data, scheme, bins_off):
    x = np.random.default_rng(7).laplace(0, 1, 200_000)
    x = (x if data == "laplace" else np.maximum(x, 0)).astype(np.float32)
    h = hist_of(x, bins=512, batches=4)
    found = mse(h, **scheme)
    t, best = max(-found.lo, found.hi), brute_force_mse(x, h, **scheme)
    assert abs(t - best) <= bins_off * h.width
    assert raw_error(x, t, **scheme) <= 1.005 * raw_error(x, best, **scheme)
    assert t < 0.95 * float(np.abs(x).max())


# -- scale and zero point -------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("reduce_range", [False, True])
@pytest.mark.parametrize("rng", [(-1.0, 1.0), (0.0, 6.0), (-0.3, 7.1), (-5.0, -0.5), (2.0, 3.0), 4.5])
def test_quant_params_make_zero_exact_and_cover_the_range(dtype, symmetric, reduce_range, rng):
    scale, zp = p = quant_params(rng, dtype=dtype, symmetric=symmetric, reduce_range=reduce_range)
    qmin, qmax = qrange(dtype, symmetric=symmetric, reduce_range=reduce_range)
    assert scale.dtype == np.float32 and zp.dtype == np.dtype(dtype) and qmin <= int(zp) <= qmax
    assert quantize(np.float32(0.0), p) == zp
    assert dequantize(quantize(np.zeros(3, np.float32), p), p).tolist() == [0.0] * 3
    lo, hi = rng if isinstance(rng, tuple) else (-rng, rng)
    ends = np.array([min(lo, 0.0), max(hi, 0.0)], np.float32)
    assert np.all(np.abs(dequantize(quantize(ends, p), p) - ends) <= scale / 2 + 1e-6)
    if symmetric:
        assert int(zp) == {"int8": 0, "uint8": 64 if reduce_range else 128}[dtype]


def test_qranges_round_half_to_even_and_saturation():
    assert qrange("int8") == (-128, 127) and qrange("int8", symmetric=True) == (-127, 127)
    assert qrange("uint8") == (0, 255) and qrange("int8", reduce_range=True) == (-64, 64)
    assert qrange("uint8", reduce_range=True) == (0, 127)
    scale, zp = quant_params((-1.0, 3.0), dtype="uint8")  # zero point 255/4 = 63.75 rounds to 64
    assert scale == np.float32(4 / 255) and zp == np.uint8(64)
    assert quant_params((-1.0, 1.0), dtype="int8").zero_point == 0  # -0.5 rounds half to even: 0
    p = quant_params(1.27, symmetric=True)  # scale 0.01
    assert quantize(np.array([0.005, 0.015, -0.005, 99.0, -99.0], np.float32), p).tolist() == [0, 2, 0, 127, -128]
    with pytest.raises(ValueError, match="dtype"):
        quant_params(1.0, dtype="int4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lo <= hi"):
        quant_params((2.0, 1.0))


# -- feeds ----------------------------------------------------------------------------------
class Reader:
    def __init__(self, feeds):
        self._it = iter(feeds)

    def get_next(self):
        return next(self._it, None)


def test_feeds_from_reader_iterable_and_one_dict():
    feeds = [{"x": np.full(2, i, np.float32)} for i in range(3)]
    assert [f["x"][0] for f in iter_feeds(Reader(feeds))] == [0, 1, 2]
    assert [f["x"][0] for f in iter_feeds(iter(feeds))] == [0, 1, 2]
    assert len(list(iter_feeds({"x": [1.0, 2.0]}))) == 1
    with pytest.raises(CalibrationDataError, match="batch 1: a feed must be a dict"):
        list(iter_feeds([feeds[0], [1, 2]]))
    with pytest.raises(CalibrationDataError, match="batch 0: input 'x' is not an array"):
        list(iter_feeds([{"x": [[1], [1, 2]]}]))
    with pytest.raises(CalibrationDataError, match="batch 0: input 'x' is not a numeric array") as info:
        list(iter_feeds([{"x": np.array([1, None])}]))
    assert (info.value.source, info.value.input) == ("batch 0", "x")
    with pytest.raises(CalibrationDataError, match="got int"):
        iter_feeds(3)


def test_npz_folder(tmp_path):
    for k in range(3):
        np.savez(tmp_path / f"batch_{k:02d}.npz", x=np.full(2, k, np.float32), m=np.ones(2))
    feeds = list(folder_feeds(tmp_path))
    assert [f["x"][0] for f in feeds] == [0, 1, 2] and set(feeds[0]) == {"x", "m"}
    (tmp_path / "batch_03.npz").write_bytes(b"not a zip")
    with pytest.raises(CalibrationDataError, match="batch_03.npz: cannot read it as .npz") as info:
        list(iter_feeds(str(tmp_path)))
    assert info.value.source.endswith("batch_03.npz")


def test_npy_folder_indexed_single_and_repeated(tmp_path):
    for k in (2, 0, 10):
        np.save(tmp_path / f"x_{k}.npy", np.full(2, k, np.float32))
    np.save(tmp_path / "mask.npy", np.ones(2, np.int64))
    feeds = list(folder_feeds(tmp_path))
    assert [f["x"][0] for f in feeds] == [0, 2, 10]  # batch order is numeric, not by name
    assert all(f["mask"].tolist() == [1, 1] for f in feeds)
    one = tmp_path / "one"
    one.mkdir()
    np.save(one / "input_1.npy", np.zeros(3))  # the model's input is called input_1: one batch, not batch 1
    assert list(list(folder_feeds(one, ["input_1"]))[0]) == ["input_1"]
    assert list(list(folder_feeds(one))[0]) == ["input"]  # without the model's names: an index


@pytest.mark.parametrize(("files", "names", "message"), [
    ({"x_0.npy", "x_1.npy", "y_0.npy"}, None, "input 'y' has no file for batch 1"),
    ({"x.npy", "x_0.npy"}, None, "input 'x' has both x.npy and indexed files"),
    ({"x_0.npy", "z.npy"}, ["x"], "z.npy: names no model input"),
    ({"x.npy", "b.npz"}, None, "mixes .npz and .npy"),
    (set(), None, "holds no .npz or .npy files"),
])
def test_folder_errors_name_the_file_or_input(tmp_path, files, names, message):
    for name in files:
        (np.save if name.endswith(".npy") else np.savez)(tmp_path / name, np.zeros(2))
    with pytest.raises(CalibrationDataError, match=message):
        list(folder_feeds(tmp_path, names))


def test_missing_folder_and_unreadable_npy(tmp_path):
    with pytest.raises(CalibrationDataError, match="does not exist"):
        folder_feeds(tmp_path / "nope")
    (tmp_path / "x_0.npy").write_bytes(b"garbage")
    with pytest.raises(CalibrationDataError, match="x_0.npy: cannot read input 'x'") as info:
        list(folder_feeds(tmp_path))
    assert info.value.input == "x"


# -- collect --------------------------------------------------------------------------------
def small_model() -> onnx.ModelProto:
    """x -> Mul(c) -> a -> Relu -> b -> MatMul(W) -> y."""
    rng = np.random.default_rng(8)
    nodes = [
        helper.make_node("Mul", ["x", "c"], ["a"], name="mul"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("MatMul", ["b", "W"], ["y"], name="matmul"),
    ]
    graph = helper.make_graph(
        nodes, "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        initializer=[numpy_helper.from_array(np.float32([1, -2, 3, -4]), "c"),
                     numpy_helper.from_array(rng.normal(size=(4, 3)).astype(np.float32), "W")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def reference(x: np.ndarray, model: onnx.ModelProto) -> dict[str, np.ndarray]:
    init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    a = x * init["c"]
    b = np.maximum(a, 0)
    return {"x": x, "a": a, "b": b, "y": b @ init["W"]}


def test_collect_histograms_every_activation(make_registry):
    model = small_model()
    before = model.SerializeToString()
    rng = np.random.default_rng(9)
    batches = [{"x": rng.normal(0, s, (5, 4)).astype(np.float32)} for s in (1.0, 3.0, 0.5)]
    seen = []
    stats = collect(model, batches, registry=make_registry(), progress=seen.append)
    assert activation_tensors(model) == ["x", "a", "b", "y"] and list(stats) == ["x", "a", "b", "y"]
    assert seen == [1, 2, 3] and stats.batches == 3
    values = [reference(b["x"], model) for b in batches]
    for name in stats:
        every = np.concatenate([v[name].ravel() for v in values])
        assert stats.range(name) == pytest.approx((every.min(), every.max()), rel=1e-6)
        assert stats[name].total == every.size
    assert stats["b"].lo == 0.0  # Relu output: one-sided histogram
    assert set(stats.ranges("entropy")) == set(stats) and model.SerializeToString() == before


def test_collect_chosen_tensors_and_errors(make_registry, tmp_path):
    model = small_model()
    registry = make_registry()
    x = np.ones((2, 4), np.float32)
    stats = collect(model, [{"x": x}], tensors=["b"], registry=registry)
    assert list(stats) == ["b"] and stats.range("b") == (0.0, 3.0)
    np.save(tmp_path / "x_0.npy", x)
    assert collect(model, tmp_path, registry=registry).batches == 1
    with pytest.raises(ValueError, match="'nope' is neither a graph input nor a node output"):
        collect(model, [{"x": x}], tensors=["nope"], registry=registry)
    with pytest.raises(CalibrationDataError, match="batch 1: no value for model input 'x'"):
        collect(model, [{"x": x}, {"z": x}], registry=registry)
    with pytest.raises(CalibrationDataError, match="batch 0: 'z' is not a model input"):
        collect(model, [{"x": x, "z": x}], registry=registry)
    with pytest.raises(CalibrationDataError, match="no calibration batches"):
        collect(model, [], registry=registry)
    with pytest.raises(ValueError, match="unknown calibration method 'kl'"):
        stats.ranges("kl")
