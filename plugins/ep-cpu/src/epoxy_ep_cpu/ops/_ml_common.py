"""Helpers shared by the ai.onnx.ml op families: score post-transforms, class labels,
feature matrices.

The post-transforms follow onnxruntime's conventions (the reference for ONNX-ML models in
practice): PROBIT uses the closed-form inverse-erf approximation with ``a = 0.147``
(Winitzki), which onnxruntime applies too, so probit scores agree to float rounding instead
of differing by ~1e-4; SOFTMAX_ZERO leaves entries with ``|x| <= 1e-7`` at zero and shifts
by the row maximum over all entries.
"""

from __future__ import annotations

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ._util import as_text

ML = "ai.onnx.ml"

NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT = range(5)
_TRANSFORMS = {"NONE": NONE, "SOFTMAX": SOFTMAX, "LOGISTIC": LOGISTIC, "SOFTMAX_ZERO": SOFTMAX_ZERO, "PROBIT": PROBIT}


def post_transform(node: NodeSpec) -> int:
    """The ``post_transform`` string attribute as a code (NONE when absent)."""
    name = as_text(node.attr("post_transform", "NONE")).upper()
    if name not in _TRANSFORMS:
        raise Unsupported(f"{node.op_type}: post_transform {name!r} is not one of {sorted(_TRANSFORMS)}")
    return _TRANSFORMS[name]


def logistic(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` without overflow for large ``|x|``."""
    e = np.exp(-np.abs(x))
    pos = 1.0 / (1.0 + e)
    return np.where(x >= 0, pos, 1.0 - pos)


def softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise softmax of a 2-D array."""
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def softmax_zero(x: np.ndarray) -> np.ndarray:
    """Row-wise softmax over the non-zero entries; zero entries stay zero."""
    nz = np.abs(x) > 1e-7
    m = x.max(axis=1, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        e = np.where(nz, np.exp(x - m), x * np.exp(-m))
        total = np.where(nz, e, 0.0).sum(axis=1, keepdims=True)
        return e / total


def probit(p: np.ndarray) -> np.ndarray:
    """``sqrt(2) * erfinv(2p - 1)`` with the ``a = 0.147`` closed-form erfinv, in float32
    as onnxruntime computes it (near p = 0.5 the float32 ``log(1 - x^2)`` is coarse, and
    matching its rounding keeps scores comparable)."""
    f = np.float32
    x = f(2.0) * np.asarray(p, dtype=f) - f(1.0)
    a = f(0.147)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ln = np.log((f(1.0) - x) * (f(1.0) + x))
        v = f(2.0) / (f(3.14159) * a) + f(0.5) * ln
        r = np.sqrt(-v + np.sqrt(v * v - f(1.0) / a * ln))
    return (f(np.sqrt(2.0)) * np.where(x < 0, -r, r)).astype(np.float64)


def apply_transform(scores: np.ndarray, kind: int) -> np.ndarray:
    """Post-transform of a ``[N, C]`` score matrix (row-wise for the softmaxes)."""
    if kind == NONE or scores.size == 0:
        return scores
    if kind == LOGISTIC:
        return logistic(scores)
    if kind == SOFTMAX:
        return softmax(scores)
    if kind == SOFTMAX_ZERO:
        return softmax_zero(scores)
    return probit(scores)


def apply_regression_transform(scores: np.ndarray, kind: int) -> np.ndarray:
    """Post-transform of regression outputs: with a single target only PROBIT applies
    (onnxruntime leaves one score untouched under LOGISTIC and the softmaxes)."""
    if scores.shape[1] == 1:
        return probit(scores) if kind == PROBIT else scores
    return apply_transform(scores, kind)


def class_labels(node: NodeSpec, ints_name: str) -> np.ndarray:
    """``classlabels_strings`` as an object array of ``str``, else the int64 labels
    (attribute ``ints_name``); empty int64 when neither is set."""
    strings = node.attr("classlabels_strings")
    if strings:
        return np.asarray([as_text(s) for s in strings], dtype=object)
    return np.asarray(node.attr(ints_name) or (), dtype=np.int64)


def floats(node: NodeSpec, name: str, default: tuple[float, ...] = ()) -> np.ndarray:
    """A FLOATS attribute as float64 (values stay exactly the float32 ones)."""
    return np.asarray(node.attr(name) or default, dtype=np.float32).astype(np.float64)


def ints(node: NodeSpec, name: str) -> np.ndarray:
    """An INTS attribute as int64 (empty when absent)."""
    return np.asarray(node.attr(name) or (), dtype=np.int64)


def floats_or_tensor(node: NodeSpec, name: str) -> np.ndarray | None:
    """``name_as_tensor`` (double precision) when present, else the FLOATS ``name``, as
    float64; None when neither is set."""
    tensor = node.attr(f"{name}_as_tensor")
    if tensor is not None:
        return np.asarray(tensor, dtype=np.float64).reshape(-1)
    value = node.attr(name)
    if value is None:
        return None
    return np.asarray(value, dtype=np.float32).astype(np.float64)


def feature_matrix(x: np.ndarray, op: str, dtype: type = np.float64) -> np.ndarray:
    """The input as ``[N, F]`` of ``dtype``: a 1-D input is one row, higher ranks keep
    the first axis as rows and flatten the rest (as onnxruntime reads them)."""
    a = np.asarray(x)
    if a.dtype.kind not in "fiub":
        raise TypeError(f"{op}: expects a numeric tensor, got {a.dtype}")
    if a.ndim == 0:
        a = a.reshape(1, 1)
    elif a.ndim == 1:
        a = a.reshape(1, -1)
    elif a.ndim > 2:
        a = a.reshape(a.shape[0], -1)
    return np.ascontiguousarray(a, dtype=dtype)
