"""Compiled Softmax/LogSoftmax over a [outer, n, inner] view, reducing the middle axis.

The row maximum is subtracted as it is, NaN included (a row holding NaN or +inf, or only
-inf, comes out all NaN), exactly as the numpy path and the ONNX reference do."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .threads import pick, serial_twin

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
#: the most elements the compiled kernel takes: without SVML numba calls a scalar exp per
#: element, slower than numpy's vectorized exp, so it wins only where numpy's per-call
#: overhead (several temporaries) dominates; timing the two with timeit at 1 thread put the
#: crossover between 1024 and 4096 elements
SMALL = 2048


@njit(parallel=True, cache=True, nogil=True)
def softmax(x, log, y):  # pragma: no cover - compiled
    outer, n, inner = x.shape
    for p in prange(outer * inner):
        o = p // inner
        i = p - o * inner
        m = x[o, 0, i]
        for k in range(1, n):
            if m != m:
                break
            v = x[o, k, i]
            if v != v or v > m:
                m = v
        s = 0.0
        for k in range(n):
            e = np.exp(x[o, k, i] - m)
            s += e
            if not log:
                y[o, k, i] = e
        if log:
            ls = np.log(s)
            for k in range(n):
                y[o, k, i] = (x[o, k, i] - m) - ls
        else:
            for k in range(n):
                y[o, k, i] = y[o, k, i] / s


softmax_serial = serial_twin(softmax)


def run_softmax(x: np.ndarray, axis: int, log: bool, nthreads: int) -> np.ndarray | None:
    """Softmax (or LogSoftmax) of ``x`` over ``axis``, or ``None`` for a case the numpy path
    keeps (dtypes other than float32/float64, empty tensors, more than :data:`SMALL` elements)."""
    if x.dtype not in _FLOATS or x.size == 0 or x.size > SMALL:
        return None
    n = x.shape[axis]
    outer = x.size // (n * _prod(x.shape[axis + 1:]))
    x3 = x.reshape(outer, n, -1)
    y = np.empty(x3.shape, x.dtype)
    pick(softmax, softmax_serial, nthreads, x.size)(x3, log, y)
    return y.reshape(x.shape)


def _prod(dims: tuple[int, ...]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out
