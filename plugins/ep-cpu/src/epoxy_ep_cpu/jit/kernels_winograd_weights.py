"""Winograd weight transforms ``G g G^T`` compiled: session creation's share of a 3x3 layer.

Why: the numpy transform (``ops/_winograd_f43.f43_weights``) is one float64 GEMM of the
(36, 9) Kronecker matrix by every 3x3 kernel, then a float32 copy: memory-bound on a
(36, M * C) float64 temporary that is 8x the weight, page-faulted fresh each layer. vgg19's
sixteen 3x3 layers spent 1.01 s of its 1.1 s partition from the session cache there (now 77-93
ms; 512 x 512 channels alone: 20.5 -> 10.6 ms). Here each block of kernels is transformed in cache, separably
(``t = G g`` then ``t G^T``, 162 float64 multiply-adds a kernel instead of 324), and written
once as float32 into the ``(36, M, C)`` layout the GEMMs read.

Same values as the numpy transform up to float64 rounding before the float32 store (a
float32 result can differ in its last bit where the float64 value sits on a half step).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from epoxy.kit.aligned import aligned_empty

from ..ops._winograd_f43 import _G as _G43
from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)

#: F(2x2, 3x3)'s G (Lavin & Gray, points 0, +-1, infinity), as ``ops/conv.winograd_weights`` applies it
_G23 = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])

#: kernels transformed per block: the block's 9 input and 36 output rows stay in L2
_BLOCK = 512


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _transform_block(wt, g, out, start, stop, t):  # pragma: no cover - compiled
    """``out[:, start:stop] = (G (x) G) @ wt[:, start:stop]``, separably in float64.
    ``wt``: (9, N) float32 kernels by column; ``g``: (T, 3) float64; ``out``: (T*T, N)
    float32; ``t``: (T*3, block) float64 scratch. Rows as 1-D slices so that the loops
    vectorize (a transposing gather per block ran 2x slower than numpy's transpose)."""
    size = g.shape[0]
    count = stop - start
    for j in range(3):
        a = wt[j, start:stop]
        b = wt[3 + j, start:stop]
        c = wt[6 + j, start:stop]
        for r in range(size):
            g0, g1, g2 = g[r, 0], g[r, 1], g[r, 2]
            row = t[r * 3 + j]
            for q in range(count):
                row[q] = g0 * np.float64(a[q]) + g1 * np.float64(b[q]) + g2 * np.float64(c[q])
    for r in range(size):
        t0 = t[r * 3]
        t1 = t[r * 3 + 1]
        t2 = t[r * 3 + 2]
        for s in range(size):
            h0, h1, h2 = g[s, 0], g[s, 1], g[s, 2]
            dst = out[r * size + s, start:stop]
            for q in range(count):
                dst[q] = np.float32(h0 * t0[q] + h1 * t1[q] + h2 * t2[q])


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _transform(wt, g, out, block):  # pragma: no cover - compiled
    """Block by block on the calling thread: a ``prange`` here took 2.9 s more to compile
    cold (numba's parallel lowering), paid at session creation, for 10.6 -> 7.2 ms on
    vgg19's largest layer."""
    n = wt.shape[1]
    t = np.empty((g.shape[0] * 3, block), dtype=np.float64)
    for start in range(0, n, block):
        _transform_block(wt, g, out, start, min(n, start + block), t)


def transformed(w: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``(M, C, 3, 3)`` float32 weights as the ``(T*T, M, C)`` float32 matrices ``G g G^T``
    for the ``(T, 3)`` float64 matrix ``g``."""
    m, c = int(w.shape[0]), int(w.shape[1])
    size = int(g.shape[0])
    out = aligned_empty((size * size, m * c), np.float32)
    _transform(np.ascontiguousarray(w.reshape(m * c, 9).T, dtype=np.float32), g, out, _BLOCK)
    return out.reshape(size * size, m, c)


def f43_weights(w: np.ndarray) -> np.ndarray:
    """F(4x4, 3x3)'s ``(36, M, C)`` weights, as ``ops/_winograd_f43.f43_weights`` gives them."""
    return transformed(w, _G43)


def f23_weights(w: np.ndarray) -> np.ndarray:
    """F(2x2, 3x3)'s ``(16, M, C)`` float32 weights, as ``ops/conv.winograd_weights`` gives them
    (computed in float64 here, so a value may differ from that float32 path in its last bit)."""
    return transformed(w, _G23)
