"""Softmax, LogSoftmax, Hardmax.

Before opset 13 the input is coerced to 2-D at ``axis`` (default 1) and the op runs over
the flattened trailing dims; from 13 it runs over the single ``axis`` (default -1).
"""

from __future__ import annotations

import math

import numpy as np

from epoxy.contract import NodeSpec

from .. import jit
from ..registry import KERNELS
from ._attr_checks import check_axis, check_static_axis
from ._conv_util import compute_dtype


def _softmax(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    """The row maximum is subtracted as it is, even when not finite: a row holding +inf
    (inf - inf), NaN or only -inf ((-inf) - (-inf)) comes out all NaN, as the ONNX reference
    and onnxruntime give it."""
    if x.size == 0:
        return x.copy()
    m = np.max(x, axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        e = x - m
        if log:
            return e - np.log(np.sum(np.exp(e), axis=axis, keepdims=True))
        np.exp(e, out=e)
        e /= np.sum(e, axis=axis, keepdims=True)
    return e


def _hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    y = np.zeros_like(x)
    if x.size == 0:
        return y
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    np.put_along_axis(y, idx, 1, axis=axis)
    return y


def _family(kind: str):
    def factory(node: NodeSpec):
        legacy = node.opset < 13
        axis_attr = int(node.attr("axis", 1 if legacy else -1))
        check_static_axis(node, "axis", axis_attr)
        compiled = jit.kernels("softmax") if kind != "Hardmax" else None
        nthreads = jit.thread_count() if compiled is not None else 0

        def apply(x: np.ndarray, axis: int) -> np.ndarray:
            if kind == "Hardmax":
                return _hardmax(x, axis)
            if compiled is not None:
                y = compiled.run_softmax(x, axis, kind == "LogSoftmax", nthreads)
                if y is not None:
                    return y
            # float16 stays float16 (as the ONNX reference computes); exotic floats -> float32
            cdt = x.dtype if x.dtype == np.float16 else compute_dtype(x.dtype)
            y = _softmax(x.astype(cdt, copy=False), axis, kind == "LogSoftmax")
            return y.astype(x.dtype, copy=False)

        def run(x: np.ndarray) -> np.ndarray:
            rank = x.ndim
            if rank == 0:
                return apply(x.reshape(1), 0).reshape(())
            axis = check_axis(node, "axis", axis_attr, rank)
            if legacy:
                outer = math.prod(x.shape[:axis])
                inner = math.prod(x.shape[axis:])
                return apply(x.reshape(outer, inner), 1).reshape(x.shape)
            return apply(x, axis)

        return run

    return factory


for _kind in ("Softmax", "LogSoftmax", "Hardmax"):
    KERNELS.register(_kind, (1, 11, 13))(_family(_kind))
