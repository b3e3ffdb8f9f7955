"""SVMRegressor and SVMClassifier (ai.onnx.ml 1) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from _ml_oracle import I64, POST_TRANSFORMS, F, S, check, features

pytest.importorskip("onnxruntime")

KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")
PARAMS = [0.3, 0.4, 2.0]  # gamma, coef0, degree


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("supports", [0, 3])
@pytest.mark.parametrize("one_class", [0, 1])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "PROBIT"])
def test_svm_regressor(kernel: str, supports: int, one_class: int, post: str) -> None:
    # onnxruntime applies no post_transform to the single regression score
    rng = np.random.default_rng(supports + one_class)
    attrs = {"kernel_type": kernel, "kernel_params": PARAMS, "rho": [0.2], "one_class": one_class,
             "post_transform": post}
    if supports:
        attrs.update(n_supports=supports, support_vectors=rng.normal(size=supports * 3).tolist(),
                     coefficients=rng.normal(size=supports).tolist())
    else:
        attrs["coefficients"] = rng.normal(size=3).tolist()
    check("SVMRegressor", {"X": features(rng, 30, 3)}, [("Y", F)], attrs, post="NONE")


def _svc(rng: np.random.Generator, k: int, kernel: str, proba: bool, labels: str, post: str,
         positive: bool = False) -> dict:
    per_class = rng.integers(1, 4, size=k).tolist()
    n = sum(per_class)
    pairs = k * (k - 1) // 2
    coef = rng.normal(size=(k - 1) * n)
    attrs = {"kernel_type": kernel, "kernel_params": PARAMS, "vectors_per_class": per_class,
             "support_vectors": rng.normal(size=n * 3).tolist(),
             "coefficients": (np.abs(coef) if positive else coef).tolist(),
             "rho": rng.normal(size=pairs).tolist(), "post_transform": post}
    if proba:
        attrs["prob_a"] = (-2 * np.abs(rng.normal(size=pairs))).tolist()
        attrs["prob_b"] = (0.3 * rng.normal(size=pairs)).tolist()
    if labels == "strings":
        attrs["classlabels_strings"] = [f"k{i}" for i in range(k)]
    else:
        attrs["classlabels_ints"] = list(range(1, 2 * k, 2))
    return attrs


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("proba", [False, True])
def test_svm_classifier_svc(k: int, kernel: str, proba: bool) -> None:
    rng = np.random.default_rng(k)
    attrs = _svc(rng, k, kernel, proba, "ints", "NONE")
    check("SVMClassifier", {"X": features(rng, 40, 3)}, [("Y", I64), ("Z", F)], attrs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("proba", [False, True])
@pytest.mark.parametrize("post", POST_TRANSFORMS)
@pytest.mark.parametrize("labels", ["ints", "strings"])
def test_svm_classifier_post_transforms(k: int, proba: bool, post: str, labels: str) -> None:
    rng = np.random.default_rng(10 + k)
    attrs = _svc(rng, k, "RBF", proba, labels, post)
    check(
        "SVMClassifier",
        {"X": features(rng, 40, 3, np.float64)},
        [("Y", S if labels == "strings" else I64), ("Z", F)],
        attrs,
        rtol=1e-4,
        atol=1e-5,
        ignore_probit_second=True,
    )


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("positive", [False, True])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_svm_classifier_linear(k: int, positive: bool, post: str) -> None:
    # no vectors_per_class: one coefficient row per class and rho[0]; two classes follow
    # onnxruntime's rule (the second label once the top score passes 0.5 or 0)
    rng = np.random.default_rng(20 + k)
    coef = rng.normal(size=k * 3) * 0.5
    attrs = {"coefficients": (np.abs(coef) if positive else coef).tolist(), "rho": [0.25], "kernel_type": "RBF",
             "kernel_params": PARAMS, "classlabels_ints": list(range(k)), "post_transform": post}
    check("SVMClassifier", {"X": features(rng, 40, 3)}, [("Y", I64), ("Z", F)], attrs)


def test_svm_classifier_all_positive_binary_svc() -> None:
    rng = np.random.default_rng(30)
    attrs = _svc(rng, 2, "POLY", False, "ints", "LOGISTIC", positive=True)
    check("SVMClassifier", {"X": features(rng, 40, 3, np.int64)}, [("Y", I64), ("Z", F)], attrs, rtol=1e-4, atol=1e-5)


def test_svm_many_rows_in_blocks() -> None:
    # more rows than one block of kernel evaluations
    rng = np.random.default_rng(31)
    attrs = _svc(rng, 3, "RBF", True, "strings", "NONE")
    check("SVMClassifier", {"X": features(rng, 5000, 3)}, [("Y", S), ("Z", F)], attrs, rtol=1e-4, atol=1e-5)
