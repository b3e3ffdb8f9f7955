"""LinearRegressor and LinearClassifier (ai.onnx.ml 1) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from _ml_oracle import I64, POST_TRANSFORMS, F, S, check, features, ml_model, run_epoxy, run_ort

pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("targets", [1, 2, 3])
@pytest.mark.parametrize("post", POST_TRANSFORMS)
@pytest.mark.parametrize("intercepts", ["none", "per_target", "one"])
def test_linear_regressor(targets: int, post: str, intercepts: str) -> None:
    rng = np.random.default_rng(targets)
    attrs = {"coefficients": (rng.normal(size=targets * 4) * 0.3).tolist(), "targets": targets, "post_transform": post}
    if intercepts == "per_target":
        attrs["intercepts"] = rng.normal(size=targets).tolist()
    elif intercepts == "one":  # onnxruntime ignores intercepts unless there is one per target
        attrs["intercepts"] = [0.5]
    check("LinearRegressor", {"X": features(rng, 30, 4)}, [("Y", F)], attrs)


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_linear_regressor_input_types(dtype: type) -> None:
    # onnxruntime implements float32 only; its result on the float32 view is the oracle
    rng = np.random.default_rng(5)
    attrs = {"coefficients": rng.normal(size=6).tolist(), "intercepts": [0.1, -0.2], "targets": 2}
    x = features(rng, 20, 3, dtype)
    got = run_epoxy(ml_model("LinearRegressor", {"X": x}, [("Y", F)], attrs), {"X": x})[0]
    x32 = x.astype(np.float32)
    expected = run_ort(ml_model("LinearRegressor", {"X": x32}, [("Y", F)], attrs), {"X": x32})[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_linear_regressor_one_dimensional_input() -> None:
    x = np.array([1.0, -2.0, 0.5], np.float32)
    got = check("LinearRegressor", {"X": x}, [("Y", F)], {"coefficients": [0.5, 0.25, -1.0], "intercepts": [2.0]})
    assert got[0].shape == (1, 1)


@pytest.mark.parametrize("classes", [1, 2, 3, 5])
@pytest.mark.parametrize("post", POST_TRANSFORMS)
@pytest.mark.parametrize("labels", ["ints", "strings"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_linear_classifier(classes: int, post: str, labels: str, dtype: type) -> None:
    rng = np.random.default_rng(classes)
    n_labels = 2 if classes == 1 else classes
    attrs = {"coefficients": rng.normal(size=classes * 3).tolist(), "intercepts": rng.normal(size=classes).tolist(),
             "post_transform": post, "multi_class": int(classes > 2)}
    if labels == "strings":
        attrs["classlabels_strings"] = [f"label{i}" for i in range(n_labels)]
    else:
        attrs["classlabels_ints"] = list(range(7, 7 + 2 * n_labels, 2))
    x = features(rng, 40, 3, dtype)
    outputs = [("Y", S if labels == "strings" else I64), ("Z", F)]
    if classes == 1 and post == "PROBIT":
        # onnxruntime writes probit(s) over the first N entries of the [N, 2] buffer and
        # leaves the rest unwritten: only the labels are comparable
        model = ml_model("LinearClassifier", {"X": x}, outputs, attrs)
        got, expected = run_epoxy(model, {"X": x}), run_ort(model, {"X": x})
        np.testing.assert_array_equal(got[0], expected[0])
        assert got[1].shape == expected[1].shape and got[1].dtype == np.float32
        return
    check("LinearClassifier", {"X": x}, outputs, attrs)


def test_linear_classifier_binary_scores_are_complements() -> None:
    x = np.array([[1.0, -2.0], [0.0, 0.5], [-1.0, 0.0]], np.float32)
    attrs = {"coefficients": [0.5, -1.0], "intercepts": [0.1], "classlabels_ints": [3, 7]}
    labels, scores = check("LinearClassifier", {"X": x}, [("Y", I64), ("Z", F)], attrs)
    np.testing.assert_array_equal(labels, [7, 3, 3])
    np.testing.assert_allclose(scores[:, 0] + scores[:, 1], 1.0, rtol=1e-6)
