"""ai.onnx.ml support vector machines: SVMRegressor (1), SVMClassifier (1).

Kernels (``kernel_params`` = gamma, coef0, degree): LINEAR ``<x, v>``, POLY
``(gamma <x, v> + coef0) ^ degree``, RBF ``exp(-gamma |x - v|^2)``, SIGMOID
``tanh(gamma <x, v> + coef0)``, evaluated for all rows and support vectors at once (one
matrix product; RBF through ``|x|^2 + |v|^2 - 2 <x, v>``).

SVMClassifier follows libsvm's one-vs-one scheme as onnxruntime runs it: with
``vectors_per_class`` (SVC) the decision value of classes ``i < j`` is
``sum_{v in i} coef[j-1][v] K(x, v) + sum_{v in j} coef[i][v] K(x, v) + rho[p]`` and a
positive value votes for ``i``; with ``prob_a``/``prob_b`` the pairwise Platt
probabilities are coupled into class probabilities (Wu, Lin and Weng's method, libsvm's
``multiclass_probability``). Without ``vectors_per_class`` the model is linear: one
coefficient row per class plus ``rho[0]`` (``kernel_type`` and the probabilities are then
ignored, as onnxruntime ignores them).

onnxruntime's conventions, kept so exported models agree with it: the SVC label is the
vote winner even when probabilities are given; two classes without probabilities report
the one decision value ``d`` as ``[-d, d]`` (NONE) or ``[1 - t, t]`` (``t = σ(d)`` for
LOGISTIC, ``d`` for the softmaxes); a linear two-class model labels ``labels[1]`` once the
top score passes 0.5 (all coefficients >= 0) or 0; SVMRegressor applies no post_transform.
"""

from __future__ import annotations

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from . import _ml_common as mlc
from ._flags import flag
from ._util import as_text

_KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


class _Kernel:
    """The kernel function of an SVM node, applied between rows and support vectors."""

    def __init__(self, node: NodeSpec, forced: str | None = None) -> None:
        name = forced or as_text(node.attr("kernel_type", "LINEAR")).upper()
        if name not in _KERNELS:
            raise Unsupported(f"{node.op_type}: kernel_type {name!r} is not one of {_KERNELS}")
        params = [float(v) for v in (node.attr("kernel_params") or ())]
        if params and len(params) != 3:
            raise Unsupported(f"{node.op_type}: kernel_params needs gamma, coef0, degree (got {len(params)} values)")
        self.name = name
        self.gamma, self.coef0, self.degree = params if params else (0.0, 0.0, 0.0)
        self.gamma, self.coef0, self.degree = (float(np.float32(v)) for v in (self.gamma, self.coef0, self.degree))

    def __call__(self, x: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        """``[N, V]`` kernel values of ``x`` ``[N, F]`` against ``vectors`` ``[V, F]``."""
        dot = x @ vectors.T
        if self.name == "LINEAR":
            return dot
        if self.name == "POLY":
            return np.power(self.gamma * dot + self.coef0, self.degree)
        if self.name == "SIGMOID":
            return np.tanh(self.gamma * dot + self.coef0)
        sq = (x * x).sum(axis=1)[:, None] + (vectors * vectors).sum(axis=1)[None, :] - 2.0 * dot
        return np.exp(-self.gamma * np.maximum(sq, 0.0))


#: rows per block of kernel evaluations (bounds the [rows, support vectors] matrix)
_ROWS = 4096


def _decisions(kernel: _Kernel, rows: np.ndarray, vectors: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """``kernel(rows, vectors) @ coef``, a block of rows at a time."""
    if rows.shape[0] <= _ROWS:
        return kernel(rows, vectors) @ coef
    return np.concatenate([kernel(rows[i:i + _ROWS], vectors) @ coef for i in range(0, rows.shape[0], _ROWS)])


def _features(x: np.ndarray, n_features: int, op: str) -> np.ndarray:
    rows = mlc.feature_matrix(x, op)
    if rows.shape[1] != n_features:
        raise ValueError(f"{op}: input has {rows.shape[1]} features, the model expects {n_features}")
    return rows


# --------------------------------------------------------------------------- SVMRegressor


@KERNELS.register("SVMRegressor", 1, domain=mlc.ML)
def svm_regressor(node: NodeSpec):
    coefficients = mlc.floats(node, "coefficients")
    rho = mlc.floats(node, "rho", (0.0,))
    n_supports = int(node.attr("n_supports", 0))
    one_class = flag(node, "one_class", 0)
    mlc.post_transform(node)  # validated; see run()
    if n_supports > 0:
        kernel = _Kernel(node)
        sv = mlc.floats(node, "support_vectors")
        if sv.size % n_supports or coefficients.size < n_supports:
            raise Unsupported(f"SVMRegressor: {sv.size} support vector values for {n_supports} vectors")
        vectors = sv.reshape(n_supports, -1)
        coef = coefficients[:n_supports]
        n_features = vectors.shape[1]
    else:
        # linear: the coefficients are the weight vector
        kernel = _Kernel(node, forced="LINEAR")
        vectors = coefficients.reshape(1, -1)
        coef = np.ones(1)
        n_features = coefficients.size

    def run(x: np.ndarray) -> np.ndarray:
        rows = _features(x, n_features, "SVMRegressor")
        scores = _decisions(kernel, rows, vectors, coef) + rho[0]
        if one_class:
            scores = np.where(scores > 0, 1.0, -1.0)
        # one score per row: onnxruntime applies no post_transform to it, PROBIT included
        return scores.reshape(-1, 1).astype(np.float32)

    return run


# --------------------------------------------------------------------------- SVMClassifier


def _pairwise_probability(dec: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Platt's sigmoid ``1 / (1 + exp(dec * A + B))``, clipped to [1e-7, 1 - 1e-7]."""
    f = dec * a + b
    e = np.exp(-np.abs(f))
    p = np.where(f >= 0, e / (1.0 + e), 1.0 / (1.0 + e))
    return np.clip(p, 1e-7, 1.0 - 1e-7)


def _couple(r: np.ndarray) -> np.ndarray:
    """Class probabilities from pairwise ones ``r[n, i, j]`` (P(i | i or j)), all rows at
    once: libsvm's ``multiclass_probability`` iterations, each row stopping where it
    converges."""
    n, k, _ = r.shape
    q = -(r.transpose(0, 2, 1) * r)  # Q[t][j] = -r[j][t] r[t][j]
    idx = np.arange(k)
    q[:, idx, idx] = np.einsum("njt,njt->nt", r, r)  # sum_{j != t} r[j][t]^2 (r[t][t] is 0)
    p = np.full((n, k), 1.0 / k)
    active = np.ones(n, dtype=bool)
    eps = 0.005 / k
    for _ in range(max(100, k)):
        qp = np.einsum("ntj,nj->nt", q, p)
        pqp = (p * qp).sum(axis=1)
        done = np.abs(qp - pqp[:, None]).max(axis=1) < eps
        active &= ~done
        if not active.any():
            break
        rows = np.nonzero(active)[0]
        pa, qpa, qa, pqpa = p[rows], qp[rows], q[rows], pqp[rows]
        for t in range(k):
            diff = (-qpa[:, t] + pqpa) / qa[:, t, t]
            pa[:, t] += diff
            pqpa = (pqpa + diff * (diff * qa[:, t, t] + 2.0 * qpa[:, t])) / (1.0 + diff) ** 2
            qpa = (qpa + diff[:, None] * qa[:, t, :]) / (1.0 + diff)[:, None]
            pa /= (1.0 + diff)[:, None]
        p[rows] = pa
    return p


@KERNELS.register("SVMClassifier", 1, domain=mlc.ML)
def svm_classifier(node: NodeSpec):
    labels = mlc.class_labels(node, "classlabels_ints")
    if labels.size == 0:
        raise Unsupported("SVMClassifier: needs classlabels_ints or classlabels_strings")
    k = labels.size
    coefficients = mlc.floats(node, "coefficients")
    if coefficients.size == 0:
        raise Unsupported("SVMClassifier: coefficients must not be empty")
    rho = mlc.floats(node, "rho")
    prob_a = mlc.floats(node, "prob_a")
    prob_b = mlc.floats(node, "prob_b")
    if prob_a.size != prob_b.size:
        raise Unsupported("SVMClassifier: prob_a and prob_b have different lengths")
    post = mlc.post_transform(node)
    per_class = mlc.ints(node, "vectors_per_class")
    all_positive = bool(np.all(coefficients >= 0))
    n_pairs = k * (k - 1) // 2
    if per_class.size:
        kernel = _Kernel(node)
        if per_class.size != k:
            raise Unsupported(f"SVMClassifier: vectors_per_class has {per_class.size} entries for {k} classes")
        n_vectors = int(per_class.sum())
        sv = mlc.floats(node, "support_vectors")
        if n_vectors == 0 or sv.size % n_vectors:
            raise Unsupported(f"SVMClassifier: {sv.size} support vector values for {n_vectors} vectors")
        vectors = sv.reshape(n_vectors, -1)
        if coefficients.size != (k - 1) * n_vectors:
            raise Unsupported(f"SVMClassifier: expected {(k - 1) * n_vectors} coefficients, got {coefficients.size}")
        if rho.size < n_pairs:
            raise Unsupported(f"SVMClassifier: expected {n_pairs} rho values, got {rho.size}")
        coef = coefficients.reshape(k - 1, n_vectors)
        starts = np.concatenate([[0], np.cumsum(per_class)])
        have_proba = prob_a.size > 0
        if have_proba and prob_a.size < n_pairs:
            raise Unsupported(f"SVMClassifier: expected {n_pairs} prob_a values, got {prob_a.size}")
        # pair p = (i, j), i < j, in libsvm's order; the decision is a dot product of the
        # kernel row with one combined coefficient vector per pair
        pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
        pair_coef = np.zeros((n_vectors, n_pairs))
        for p, (i, j) in enumerate(pairs):
            pair_coef[starts[i]:starts[i + 1], p] = coef[j - 1, starts[i]:starts[i + 1]]
            pair_coef[starts[j]:starts[j + 1], p] = coef[i, starts[j]:starts[j + 1]]
        first = np.asarray([i for i, _ in pairs], dtype=np.int64)
        second = np.asarray([j for _, j in pairs], dtype=np.int64)
        n_features = vectors.shape[1]
    else:
        kernel = _Kernel(node, forced="LINEAR")
        if coefficients.size % k:
            raise Unsupported(f"SVMClassifier: {coefficients.size} coefficients for {k} classes")
        vectors = coefficients.reshape(k, -1)
        n_features = vectors.shape[1]
        if rho.size == 0:
            raise Unsupported("SVMClassifier: rho must not be empty")

    def run_svc(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = _features(x, n_features, "SVMClassifier")
        n = rows.shape[0]
        dec = _decisions(kernel, rows, vectors, pair_coef) + rho[:n_pairs]
        # the label is the one-vs-one vote's winner (first on ties), probabilities or not
        votes = np.zeros((n, k), dtype=np.int64)
        win = np.where(dec > 0, first, second)
        np.add.at(votes, (np.arange(n)[:, None], win), 1)
        best = np.argmax(votes, axis=1)
        if have_proba:
            r = np.zeros((n, k, k))
            pr = _pairwise_probability(dec, prob_a[:n_pairs], prob_b[:n_pairs])
            r[:, first, second] = pr
            r[:, second, first] = 1.0 - pr
            scores = _couple(r) if n else np.zeros((0, k))
            return labels[best], mlc.apply_transform(scores, post).astype(np.float32)
        if k == 2:
            return _binary_svc(dec[:, 0], labels, best, post, all_positive)
        return labels[best], mlc.apply_transform(dec, post).astype(np.float32)

    def run_linear(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = _features(x, n_features, "SVMClassifier")
        scores = kernel(rows, vectors) + rho[0]
        best = np.argmax(scores, axis=1)
        if k == 2:
            # onnxruntime's binary rule: the second label once the top score passes 0.5
            # (all coefficients >= 0) or 0 (mixed signs), else the top class
            top = scores.max(axis=1)
            second = top >= 0.5 if all_positive else top > 0
            best = np.where(second, 1, best)
        return labels[best], mlc.apply_transform(scores, post).astype(np.float32)

    return run_svc if per_class.size else run_linear


def _binary_svc(dec: np.ndarray, labels: np.ndarray, best: np.ndarray, post: int,
                all_positive: bool) -> tuple[np.ndarray, np.ndarray]:
    """Two classes without probabilities: one decision value ``d`` (> 0 votes for the
    first class). onnxruntime writes ``[-d, d]`` under NONE and ``[1 - t, t]`` otherwise,
    ``t`` being ``σ(d)`` for LOGISTIC and ``d`` itself for the softmaxes."""
    if post == mlc.NONE:
        z = np.stack([-dec, dec], axis=1)
    elif post == mlc.PROBIT:
        # onnxruntime fills only the first column here; we leave the second at 0
        z = np.stack([mlc.probit(dec), np.zeros_like(dec)], axis=1)
    else:
        t = mlc.logistic(dec) if post == mlc.LOGISTIC else dec
        z = np.stack([1.0 - t, t], axis=1)
    return labels[best], z.astype(np.float32)
