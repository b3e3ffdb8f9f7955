"""epoxy.quantization's calibration against onnxruntime's calibrators and quantization helpers,
on ep-cpu, where the definitions match; where they do not, the test says how they differ.

- MinMax: same definition (the observed min and max over every batch): equal.
- Percentile (symmetric): same definition (the p-th percentile of |x|), different histograms
  (onnxruntime's 2048 bins over |x|, ours 2048 over x folded): within a bin of each.
- Entropy: different definitions. onnxruntime histograms x over [-m, m] and compares windows
  around zero merged into ``num_quantized_bins`` levels spanning both sides; ours is TensorRT's
  (|x| folded, 128 levels on one side). Their defaults (128 bins, 128 levels) leave one candidate,
  so its entropy is exactly MinMax (the pitfall of issue 19); with TensorRT-like resolution
  (4097 bins, 257 levels) the two land near each other.
- quant_params: same conventions as ``compute_scale_zp`` with onnxruntime's integer ranges: equal.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from epoxy.quantization import Histogram, collect, entropy, minmax, percentile, qrange, quant_params

quantization = pytest.importorskip("onnxruntime.quantization")
calibrate = pytest.importorskip("onnxruntime.quantization.calibrate")
quant_utils = pytest.importorskip("onnxruntime.quantization.quant_utils")


def heavy_tailed(n: int = 200_000, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_t(3, size=n).astype(np.float32)


def mlp(path) -> str:
    """x -> MatMul -> Add -> Relu -> MatMul -> Sigmoid -> y (ops only ep-cpu has, not the mini kernels)."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="add"),
        helper.make_node("Relu", ["hb"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["z"], name="mm2"),
        helper.make_node("Sigmoid", ["z"], ["y"], name="sigmoid"),
    ]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
        initializer=[numpy_helper.from_array(rng.normal(size=(8, 6)).astype(np.float32), "w1"),
                     numpy_helper.from_array(rng.normal(size=6).astype(np.float32), "b1"),
                     numpy_helper.from_array(rng.normal(size=(6, 3)).astype(np.float32), "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return str(path)


class Reader(quantization.CalibrationDataReader):
    def __init__(self, feeds):
        self._feeds = list(feeds)
        self._it = iter(self._feeds)

    def get_next(self):
        return next(self._it, None)


def test_collect_minmax_equals_onnxruntime_minmax_calibrator(tmp_path):
    path = mlp(tmp_path / "mlp.onnx")
    rng = np.random.default_rng(2)
    feeds = [{"x": rng.standard_t(3, (4, 8)).astype(np.float32) * s} for s in (1.0, 4.0, 0.3, 2.0)]
    calibrator = calibrate.create_calibrator(path, augmented_model_path=str(tmp_path / "aug.onnx"),
                                             calibrate_method=calibrate.CalibrationMethod.MinMax)
    calibrator.collect_data(Reader(feeds))
    theirs = {name: tuple(float(np.ravel(v)[0]) for v in data.range_value)
              for name, data in calibrator.compute_data().data.items()}
    stats = collect(path, Reader(feeds))
    assert set(theirs) <= set(stats) and {"h", "hb", "r", "z"} <= set(theirs)
    for name, (lo, hi) in theirs.items():
        # onnxruntime widens each range to include 0 there and then; ours does it in quant_params
        ours = minmax(stats[name])
        assert (min(ours.lo, 0.0), max(ours.hi, 0.0)) == pytest.approx((lo, hi), rel=1e-6), name


def _theirs(method: str, x: np.ndarray, num_bins: int, num_quantized_bins: int = 128) -> tuple[float, float]:
    collector = calibrate.HistogramCollector(method, True, num_bins, num_quantized_bins, 99.999, "same")
    collector.collect({"x": [x]})
    result = collector.compute_collection_result()["x"]
    return float(result[0]), float(result[1])


def test_percentile_matches_onnxruntime_within_a_bin():
    x = heavy_tailed()
    h = Histogram()
    h.update(x)
    lo, hi = _theirs("percentile", x, 2048)
    their_bin = float(np.abs(x).max()) / 2048
    assert abs(percentile(h).hi - hi) <= h.width + their_bin and lo == -hi


def test_entropy_against_onnxruntime():
    x = heavy_tailed()
    h = Histogram()
    h.update(x)
    assert _theirs("entropy", x, 128, 128) == pytest.approx((float(x.min()), float(x.max())))  # its default: MinMax
    ours = entropy(h).hi
    assert ours < 0.5 * float(np.abs(x).max())
    fine = _theirs("entropy", x, 4097, 257)[1]
    assert fine < 0.5 * float(np.abs(x).max()) and abs(ours - fine) <= 0.2 * fine


_TYPES = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8}


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("reduce_range", [False, True])
@pytest.mark.parametrize("rng", [(-1.0, 1.0), (0.0, 6.0), (-0.3, 7.1), (-5.0, -0.5), (2.0, 3.0), (-1e-3, 250.0)])
def test_quant_params_equal_onnxruntime(dtype, symmetric, reduce_range, rng):
    qmin, qmax = quant_utils.get_qmin_qmax_for_qType(_TYPES[dtype], reduce_range=reduce_range, symmetric=symmetric)
    assert (int(qmin), int(qmax)) == qrange(dtype, symmetric=symmetric, reduce_range=reduce_range)
    zp, scale = quant_utils.compute_scale_zp(np.float32(rng[0]), np.float32(rng[1]), qmin, qmax, symmetric=symmetric)
    ours = quant_params((float(np.float32(rng[0])), float(np.float32(rng[1]))), dtype=dtype, symmetric=symmetric,
                        reduce_range=reduce_range)
    assert ours.scale == np.float32(scale) and int(ours.zero_point) == int(zp)
