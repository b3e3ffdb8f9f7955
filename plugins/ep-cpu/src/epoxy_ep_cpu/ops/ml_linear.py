"""ai.onnx.ml linear models: LinearRegressor (1), LinearClassifier (1).

Scores are ``X @ coefficients.T + intercepts`` (coefficients row-major, one row per target
or class), computed in float64 and returned as float32. Conventions follow onnxruntime:

* LinearRegressor with one target applies only PROBIT; intercepts count only when there is
  one per target.
* LinearClassifier's class count is the number of intercepts. With one class and two labels
  (a binary model) the label is ``labels[1]`` when the score is > 0 and the scores are
  ``[1 - s, s]`` (LOGISTIC: of ``σ(s)``; the softmaxes leave ``s`` as it is); otherwise the
  label is the first best-scoring class and the scores are post-transformed row by row.
  ``multi_class`` does not change the result (onnxruntime ignores it too).
"""

from __future__ import annotations

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from . import _ml_common as mlc


def _linear_scores(x: np.ndarray, coefficients: np.ndarray, intercepts: np.ndarray | None,
                   count: int | None, op: str) -> np.ndarray:
    rows = mlc.feature_matrix(x, op)
    f = rows.shape[1]
    n_out = count if count is not None else (coefficients.size // f if f else 0)
    if coefficients.size != n_out * f:
        raise ValueError(f"{op}: {coefficients.size} coefficients do not split into {n_out} rows of "
                         f"{f} features")
    scores = rows @ coefficients.reshape(n_out, f).T
    if intercepts is not None:
        scores += intercepts
    return scores


@KERNELS.register("LinearRegressor", 1, domain=mlc.ML)
def linear_regressor(node: NodeSpec):
    targets = int(node.attr("targets", 1))
    coefficients = mlc.floats(node, "coefficients")
    intercepts = mlc.floats(node, "intercepts")
    post = mlc.post_transform(node)
    # onnxruntime adds intercepts only when there is one per target
    bias = intercepts if intercepts.size == targets else None

    def run(x: np.ndarray) -> np.ndarray:
        scores = _linear_scores(x, coefficients, bias, targets, "LinearRegressor")
        return mlc.apply_regression_transform(scores, post).astype(np.float32)

    return run


@KERNELS.register("LinearClassifier", 1, domain=mlc.ML)
def linear_classifier(node: NodeSpec):
    coefficients = mlc.floats(node, "coefficients")
    if coefficients.size == 0:
        raise Unsupported("LinearClassifier: coefficients must not be empty")
    intercepts = mlc.floats(node, "intercepts")
    labels = mlc.class_labels(node, "classlabels_ints")
    post = mlc.post_transform(node)
    n_classes = intercepts.size or None
    if n_classes == 1 and labels.size != 2:
        raise Unsupported(f"LinearClassifier: one score needs two class labels, got {labels.size}")

    def run(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        scores = _linear_scores(x, coefficients, intercepts if intercepts.size else None, n_classes,
                                "LinearClassifier")
        c = scores.shape[1]
        if c == 1:
            s = scores[:, 0]
            label = np.where(s > 0, labels[1], labels[0]).astype(labels.dtype)
            if post == mlc.PROBIT:
                # onnxruntime leaves part of this output unwritten; we give [probit(s), 0]
                z = np.stack([mlc.probit(s), np.zeros_like(s)], axis=1)
            else:
                t = mlc.logistic(s) if post == mlc.LOGISTIC else s
                z = np.stack([1.0 - t, t], axis=1)
            return label, z.astype(np.float32)
        if labels.size != c:
            raise ValueError(f"LinearClassifier: {c} class scores but {labels.size} class labels")
        label = labels[np.argmax(scores, axis=1)] if scores.shape[0] else labels[:0]
        return label, mlc.apply_transform(scores, post).astype(np.float32)

    return run
