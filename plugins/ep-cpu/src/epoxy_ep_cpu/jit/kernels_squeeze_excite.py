"""A squeeze-and-excitation block in one compiled pass (``ops/squeeze_excite.py``).

Per image: each channel's mean (float64 sums), the reduce 1x1 convolution and its activation,
the expand one and its activation (float64 throughout, rounded once to the input's dtype like
the unfused graph's gate tensor), then every channel scaled by its gate. On one thread: the
pool and the products are a few thousand multiply-adds, less than waking a worker.
"""

from __future__ import annotations

import numpy as np
from numba import njit, uint64

from . import (
    direct,
    kernel_cache,  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
)
from .kernels_special import sigmoid64, unit


@njit(inline="always", cache=True, nogil=True)
def _act(v, code, alpha, beta):  # pragma: no cover - compiled
    """Codes of ``ops/squeeze_excite.ACTIVATION_CODES`` on a float64 ``v``; NaN stays NaN."""
    if code == 1:
        return 0.0 if v < 0 else v
    if code == 2:
        return sigmoid64(v)
    if code == 4:
        return v * sigmoid64(v)
    if code == 3:
        return unit(v * alpha + beta)
    if code == 5:
        return v * unit(v / 6.0 + 0.5)
    return v


@njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def squeeze_excite(x, w1, b1, w2, b2, y, pooled, hidden, n, c, r, hw, act1, a1, c1, act2, a2, c2):  # pragma: no cover
    """``y = x * act2(W2 act1(W1 mean(x) + b1) + b2)`` per image; ``w1``: (R, C) and ``w2``:
    (C, R) flattened, ``b1``/``b2`` (zeros when absent); ``pooled`` (C) and ``hidden`` (R)
    float64 scratch."""
    inv = 1.0 / hw
    for b in range(n):
        xb = b * c * hw
        for ch in range(c):
            base = uint64(xb + ch * hw)
            total = 0.0
            for i in range(uint64(hw)):
                total += x[base + i]
            pooled[ch] = total * inv
        for j in range(r):
            acc = np.float64(b1[j])
            row = j * c
            for ch in range(c):
                acc += w1[row + ch] * pooled[ch]
            hidden[j] = _act(acc, act1, a1, c1)
        for ch in range(c):
            acc = np.float64(b2[ch])
            row = ch * r
            for j in range(r):
                acc += w2[row + j] * hidden[j]
            g = x.dtype.type(_act(acc, act2, a2, c2))
            base = uint64(xb + ch * hw)
            for i in range(uint64(hw)):
                y[base + i] = x[base + i] * g


class SqueezeExciteCall:
    """One block's prepared call: weights flattened in the input's dtype, scratch and the
    compiled overload settled at the first call of a dtype."""

    __slots__ = ("_fn", "_head", "_tail", "c", "dtype", "r")

    def __init__(self, w1: np.ndarray, b1: np.ndarray | None, w2: np.ndarray, b2: np.ndarray | None,
                 act1: int, a1: float, c1: float, act2: int, a2: float, c2: float) -> None:
        self.r, self.c = int(w1.shape[0]), int(w1.shape[1])
        self.dtype = w1.dtype
        dt = w1.dtype
        self._head = (np.ascontiguousarray(w1, dtype=dt).reshape(-1),
                      np.zeros(self.r, dt) if b1 is None else np.ascontiguousarray(b1, dtype=dt),
                      np.ascontiguousarray(w2, dtype=dt).reshape(-1),
                      np.zeros(self.c, dt) if b2 is None else np.ascontiguousarray(b2, dtype=dt))
        self._tail = (act1, float(a1), float(c1), act2, float(a2), float(c2))
        self._fn = None

    def accepts(self, x: np.ndarray) -> bool:
        return x.dtype == self.dtype and x.ndim == 4 and x.shape[1] == self.c

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = np.empty(x.shape, x.dtype)
        n, c, h, w = x.shape
        args = (x.reshape(-1), *self._head, y.reshape(-1), np.empty(c, np.float64), np.empty(self.r, np.float64),
                n, c, self.r, h * w, *self._tail)
        fn = self._fn
        if fn is None:
            fn = self._fn = direct.overload(squeeze_excite, args)
        fn(*args)
        return y
