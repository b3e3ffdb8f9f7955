"""Compiled GlobalAveragePool over an [N*C, H*W] view (one compiled kernel per dtype).

Windowed MaxPool/AveragePool stay on the numpy path: a per-output-window kernel measured
2-3x slower than its separable whole-tensor passes on [64, 112, 112] (see the jit tier's
notes in docs/THREADING.md)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .threads import use

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@njit(parallel=True, cache=True, nogil=True, fastmath={"reassoc"})
def global_avg(x, y):  # pragma: no cover - compiled
    planes, n = x.shape
    for c in prange(planes):
        s = 0.0
        for k in range(n):
            s += x[c, k]
        y[c] = s / n


def run_global_avg(x: np.ndarray, nthreads: int) -> np.ndarray | None:
    """GlobalAveragePool of a float32/float64 (N, C, ...) tensor with a non-empty image."""
    if x.ndim < 3 or x.dtype not in _FLOATS or x.size == 0:
        return None
    planes = x.shape[0] * x.shape[1]
    y = np.empty(planes, x.dtype)
    use(nthreads, x.size)
    global_avg(x.reshape(planes, -1), y)
    return y.reshape(x.shape[:2] + (1,) * (x.ndim - 2))
