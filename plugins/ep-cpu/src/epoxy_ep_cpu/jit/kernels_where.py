"""Compiled Where for the attention-mask shapes: a full boolean condition selecting between a
full tensor and a scalar (or two full tensors, or two scalars).

Why: numpy's ``where`` branches per element, ~1.3 ns an element on a causal mask and ~6 on a
random one (llama's two masks per layer: 7 % of its batch-4 run); a select the vectorizer
turns into blend instructions costs a fraction of that, whatever the mask. Other
broadcasting patterns keep numpy's ``where``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)

#: output elements from which the compiled select pays for its call (below, numpy's where
#: is a few microseconds and numba's argument typing about as much)
MIN_ELEMENTS = 4096


@njit(cache=True, nogil=True, boundscheck=False)
def _full_full(c, x, y, out):  # pragma: no cover - compiled
    for i in range(out.shape[0]):
        out[i] = x[i] if c[i] else y[i]


@njit(cache=True, nogil=True, boundscheck=False)
def _scalar_full(c, x, y, out):  # pragma: no cover - compiled
    xv = x[0]
    for i in range(out.shape[0]):
        out[i] = xv if c[i] else y[i]


@njit(cache=True, nogil=True, boundscheck=False)
def _full_scalar(c, x, y, out):  # pragma: no cover - compiled
    yv = y[0]
    for i in range(out.shape[0]):
        out[i] = x[i] if c[i] else yv


@njit(cache=True, nogil=True, boundscheck=False)
def _scalar_scalar(c, x, y, out):  # pragma: no cover - compiled
    xv, yv = x[0], y[0]
    for i in range(out.shape[0]):
        out[i] = xv if c[i] else yv


#: (x is a scalar, y is a scalar) -> the loop
_LOOPS = {(False, False): _full_full, (True, False): _scalar_full, (False, True): _full_scalar,
          (True, True): _scalar_scalar}
#: the dtypes numba compiles the loops for (not float16, the ml_dtypes floats or strings)
_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8,
                                          np.uint16, np.uint32, np.uint64, np.bool_))


def run_where(cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """``where(cond, x, y)`` when ``cond`` is a contiguous bool array of at least
    :data:`MIN_ELEMENTS` elements with the output's shape and ``x``, ``y`` (one numeric dtype)
    each of that shape and contiguous, or of one element; else None (numpy's where runs it)."""
    if cond.size < MIN_ELEMENTS or cond.dtype != np.bool_ or not cond.flags.c_contiguous:
        return None
    if x.dtype != y.dtype or x.dtype not in _DTYPES:
        return None
    shape = cond.shape
    x_scalar, y_scalar = x.size == 1 and x.ndim <= len(shape), y.size == 1 and y.ndim <= len(shape)
    if not x_scalar and (x.shape != shape or not x.flags.c_contiguous):
        return None
    if not y_scalar and (y.shape != shape or not y.flags.c_contiguous):
        return None
    out = np.empty(shape, x.dtype)
    _LOOPS[(x_scalar, y_scalar)](cond.reshape(-1), x.reshape(-1), y.reshape(-1), out.reshape(-1))
    return out
