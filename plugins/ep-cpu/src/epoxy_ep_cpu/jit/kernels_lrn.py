"""LRN (local response normalization across channels): the window sums compiled, one pass per
block of positions, split over the native pool.

Why: the numpy path makes ``size + 6`` passes over the tensor (the squares, a copy, one add per
window offset, the scale, the bias, log, exp, the product), all on one thread: inception_v1's
two LRNs took 2.6 ms of a 19 ms run at 2 threads (bench/README.md, session 37). Here a block
of positions of one image has its window sums, scale and bias in one pass that reads each
channel's block from the cache; log, exp and the product stay numpy's vectorized passes
(numba's scalar log/exp made the whole-kernel version 1.04-1.10x slower than numpy). The sums
add the squares in the numpy path's order (the centre, then the offsets from the lowest to the
highest, those inside the channel axis only): the same bits as the numpy path.
"""

from __future__ import annotations

import numpy as np
from numba import njit, uint64

from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
from .threads import Shares, share_count

#: positions a block (one image's): the window's channels of a block stay in the L1/L2 cache
BLOCK = 256
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@njit(cache=True, nogil=True, boundscheck=False)
def lrn_blocks(x, y, c, plane, blocks, before, after, scale, bias, first, last):  # pragma: no cover - compiled
    """Blocks [first, last) (block ``u``: image ``u // blocks``, positions from ``(u % blocks) *
    BLOCK``) of ``y = bias + scale * (window sum of x**2 over channels)``."""
    acc = np.empty(BLOCK, dtype=x.dtype)
    lo_off = -min(before, c - 1)
    hi_off = min(after, c - 1)
    for u in range(first, last):
        image = u // blocks
        p0 = (u % blocks) * BLOCK
        p1 = min(plane, p0 + BLOCK)
        base = uint64(image * c * plane)
        for ch in range(c):
            row = base + uint64(ch * plane)
            for p in range(p0, p1):
                v = x[row + uint64(p)]
                acc[p - p0] = v * v
            for off in range(lo_off, hi_off + 1):
                k = ch + off
                if off == 0 or k < 0 or k >= c:
                    continue
                src = base + uint64(k * plane)
                for p in range(p0, p1):
                    v = x[src + uint64(p)]
                    acc[p - p0] += v * v
            for p in range(p0, p1):
                y[row + uint64(p)] = acc[p - p0] * scale + bias


class LRNCall:
    """One LRN node's call for one input shape and dtype (float32/float64, at least 3-D,
    C-contiguous): the geometry and the split settled once."""

    __slots__ = ("_args", "_beta", "_shares", "dtype", "shape")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, size: int, alpha: float, beta: float, bias: float,
                 nthreads: int) -> None:
        n, c = int(shape[0]), int(shape[1])
        plane = int(np.prod(shape[2:]))
        before = (size - 1) // 2
        blocks = max(1, -(-plane // BLOCK))
        self.shape, self.dtype = shape, dtype
        t = dtype.type
        self._args = (c, plane, blocks, before, size - 1 - before, t(alpha / size), t(bias))
        self._beta = t(-beta)
        self._shares = Shares(lrn_blocks, n * blocks, share_count(nthreads, n * c * plane, n * blocks))

    @staticmethod
    def handles(x: np.ndarray) -> bool:
        return x.dtype in _FLOATS and x.ndim >= 3 and x.size > 0 and x.flags.c_contiguous

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = np.empty(self.shape, dtype=self.dtype)
        self._shares(x.reshape(-1), y.reshape(-1), *self._args)
        # x * d ** -beta as x * exp(-beta * log d), in numpy's vectorized log and exp (numba's
        # are scalar calls here: the whole pass in the kernel ran 1.04-1.10x slower)
        with np.errstate(all="ignore"):
            np.log(y, out=y)
            y *= self._beta
            np.exp(y, out=y)
        y *= x
        return y
