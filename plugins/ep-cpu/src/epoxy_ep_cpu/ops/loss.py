"""Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss."""

from __future__ import annotations

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._reduce_util import as_array, work_dtype


def _nll(
    logp: np.ndarray,
    target: np.ndarray,
    weight: np.ndarray | None,
    ignore_index: int | None,
    reduction: str,
) -> np.ndarray:
    """Weighted NLL of log-probabilities ``logp`` (N, C, d...) at ``target`` (N, d...).

    ``logp`` is already in the work dtype; the result is in the work dtype too.
    """
    target = np.asarray(target).astype(np.int64, copy=False)
    n_classes = logp.shape[1] if logp.ndim > 1 else 0
    if ignore_index is not None:
        keep = target != ignore_index
        safe = np.where(keep, target, 0)
    else:
        keep = None
        safe = target
    if safe.size and n_classes and (safe.min() < 0 or safe.max() >= n_classes):
        raise ValueError(f"target class out of range [0, {n_classes})")
    picked = np.take_along_axis(logp, np.expand_dims(safe, 1), axis=1).squeeze(1) if safe.size else np.zeros(
        safe.shape, dtype=logp.dtype
    )
    if weight is not None:
        w = np.asarray(weight).astype(logp.dtype, copy=False)[safe]
    else:
        w = np.ones(safe.shape, dtype=logp.dtype)
    if keep is not None:
        w = np.where(keep, w, logp.dtype.type(0))
    loss = -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.asarray(np.sum(loss))
    # mean: divided by the total applied weight (the count of kept samples without weights)
    if weight is None and keep is None:
        return np.asarray(np.mean(loss)) if loss.size else np.asarray(np.nan, dtype=logp.dtype)
    return np.asarray(np.sum(loss) / np.sum(w))


def _loss_attrs(node: NodeSpec) -> tuple[str, int | None]:
    reduction = node.attr("reduction", "mean")
    if isinstance(reduction, bytes):
        reduction = reduction.decode()
    if reduction not in ("none", "sum", "mean"):
        raise Unsupported(f"unknown reduction {reduction!r}")
    ignore = node.attr("ignore_index")
    return reduction, (None if ignore is None else int(ignore))


@KERNELS.register("NegativeLogLikelihoodLoss", (12, 13, 22))
def negative_log_likelihood_loss(node: NodeSpec):
    reduction, ignore_index = _loss_attrs(node)

    def run(x: np.ndarray, target: np.ndarray, weight: np.ndarray | None = None) -> np.ndarray:
        x = np.asarray(x)
        xw = x.astype(work_dtype(x.dtype), copy=False)
        return as_array(_nll(xw, target, weight, ignore_index, reduction), x.dtype)

    return run


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, x.dtype.type(0))
    shifted = x - m
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


@KERNELS.register("SoftmaxCrossEntropyLoss", (12, 13))
def softmax_cross_entropy_loss(node: NodeSpec):
    reduction, ignore_index = _loss_attrs(node)
    want_log_prob = len(node.outputs) > 1 and node.outputs[1] != ""

    def run(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None):
        scores = np.asarray(scores)
        sw = scores.astype(work_dtype(scores.dtype), copy=False)
        logp = _log_softmax(sw, 1)
        loss = as_array(_nll(logp, labels, weights, ignore_index, reduction), scores.dtype)
        if len(node.outputs) == 1:
            return loss
        return loss, (as_array(logp, scores.dtype) if want_log_prob else None)

    return run
