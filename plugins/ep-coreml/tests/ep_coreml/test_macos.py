"""Real Core ML predictions (macOS only; ``nox -s ep_coreml_macos``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from coreml_harness import cpu_run, model, rand
from onnx import helper

import epoxy

pytestmark = pytest.mark.macos
N = helper.make_node


def _session(m, tmp_path, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return epoxy.InferenceSession(m, providers=[("coreml", {"cache_dir": str(tmp_path), **options}), "cpu"])


def _net():
    feeds = {"x": rand(1, 3, 16, 16)}
    m = model([
        N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        N("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["n"]),
        N("Relu", ["n"], ["r"]),
        N("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        N("Round", ["p"], ["q"]),  # cpu in the middle: two Core ML groups
        N("GlobalAveragePool", ["q"], ["g"]),
        N("Flatten", ["g"], ["f"]),
        N("Gemm", ["f", "fw", "fb"], ["l"], transB=1),
        N("Softmax", ["l"], ["y"]),
    ], feeds, consts={"w": rand(8, 3, 3, 3), "b": rand(8), "s": rand(8), "bb": rand(8), "mu": rand(8),
                      "var": rand(8, low=0.5, high=1.5), "fw": rand(10, 8), "fb": rand(10)})
    return m, feeds


def test_coreml_is_available():
    from epoxy.plugins import ProviderRegistry

    entry = ProviderRegistry().get("coreml")
    assert entry is not None and entry.available, entry and entry.unavailable_reason


@pytest.mark.parametrize("units", ["CPU_ONLY", "CPU_AND_GPU", "CPU_AND_NE", "ALL"])
def test_predict_matches_cpu(units, tmp_path):
    m, feeds = _net()
    sess = _session(m, tmp_path, compute_units=units)
    placed = {d.op_type: d.provider for d in sess.partition_report().nodes}
    assert placed["Conv"] == "coreml" and placed["Round"] == "cpu" and placed["Gemm"] == "coreml"
    (got,) = sess.run(None, feeds)
    np.testing.assert_allclose(got, cpu_run(m, feeds)["y"], rtol=1e-3 if units == "CPU_ONLY" else 2e-2, atol=1e-3)


def test_fp16_predict_is_close(tmp_path):
    m, feeds = _net()
    (got,) = _session(m, tmp_path, compute_precision="fp16").run(None, feeds)
    np.testing.assert_allclose(got, cpu_run(m, feeds)["y"], rtol=5e-2, atol=5e-3)


def test_int_and_bool_boundaries(tmp_path):
    feeds = {"x": rand(2, 5)}
    m = model([N("ArgMax", ["x"], ["a"], axis=1), N("Greater", ["x", "z"], ["g"])], feeds,
              outputs=["a", "g"], consts={"z": np.zeros(5, np.float32)})
    a, g = _session(m, tmp_path).run(None, feeds)
    np.testing.assert_array_equal(a, np.argmax(feeds["x"], axis=1))
    np.testing.assert_array_equal(g, feeds["x"] > 0)


def test_light_squeezenet_runs(tmp_path):
    from pathlib import Path

    import onnx

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"
    sess = _session(str(path), tmp_path)
    assert {d.provider for d in sess.partition_report().nodes} == {"coreml"}
    (prob,) = sess.run(None, {"data_0": np.random.default_rng(0).uniform(0, 1, (1, 3, 224, 224)).astype(np.float32)})
    assert prob.shape == (1, 1000, 1, 1) and np.isfinite(prob).all()
