"""Depthwise QLinearConv (one input channel per output channel, 2-D, constant weights) on
8-bit codes kept channels last.

Why: the int8 GEMM runs group-1 layers; a depthwise layer (mobile networks' 3x3 between their
1x1 layers) has no product to speak of, K = kh * kw per output, so a GEMM would be all
overhead. Channels last, each output pixel's C outputs are kh * kw multiply-adds of C
contiguous codes by C weights: one pass over the window, vectorized across channels, with
exact int32 sums of ``(x - x_zp) * (w - w_zp)``; positions in the padding hold ``x_zp`` and
add nothing, as in the numpy path's zero-padded float conv. The requantization is the
numpy path's float64 steps in its order, ``clip(rint((float64(sum) + bias) * scale) + y_zp)``,
so the codes are the same. Reads channels-last codes as QLinearConv hands them on and writes
channels last.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit, prange

from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
from . import kernels_int8_gemm as int8_gemm
from .threads import pick, serial_twin

_CODES = (np.dtype(np.uint8), np.dtype(np.int8))


@njit(parallel=True, cache=True, nogil=True)
def depthwise_nhwc(x, weights, x_zp, dims, bias, scale, params, y):  # pragma: no cover - compiled
    """``y (N, OH, OW, C)`` codes from codes ``x (N, H, W, C)`` and ``weights (kh, kw, C)`` int32
    (``w - w_zp``); ``dims``: sh, sw, dh, dw, pad top, pad left; ``bias``/``scale`` float64 per
    channel; ``params``: y_zp, lowest code, highest code."""
    n, h, w, c = x.shape
    _, oh, ow, _ = y.shape
    kh, kw = weights.shape[0], weights.shape[1]
    sh, sw, dh, dw, pt, pl = dims[0], dims[1], dims[2], dims[3], dims[4], dims[5]
    zy, lo, hi = params[0], params[1], params[2]
    for r in prange(n * oh):
        b = r // oh
        oy = r - b * oh
        acc = np.empty(c, np.int32)
        for ox in range(ow):
            for ci in range(c):
                acc[ci] = 0
            for ki in range(kh):
                iy = oy * sh - pt + ki * dh
                if iy < 0 or iy >= h:
                    continue
                for kj in range(kw):
                    ix = ox * sw - pl + kj * dw
                    if ix < 0 or ix >= w:
                        continue
                    src = x[b, iy, ix]
                    wk = weights[ki, kj]
                    for ci in range(c):
                        acc[ci] += (np.int32(src[ci]) - x_zp) * wk[ci]
            out = y[b, oy, ox]
            for ci in range(c):
                v = np.rint((np.float64(acc[ci]) + bias[ci]) * scale[ci]) + zy
                v = lo if v < lo else v
                out[ci] = hi if v > hi else v


depthwise_nhwc_serial = serial_twin(depthwise_nhwc)


class PackedDepthwiseInt8:
    """A depthwise layer's constant weights ``(C, 1, kh, kw)`` of 8-bit codes minus their zero
    point (one, or one per channel), as ``(kh, kw, C)`` int32 for :func:`depthwise_nhwc`."""

    __slots__ = ("channels", "nthreads", "weights")

    def __init__(self, w: np.ndarray, zero_point: np.ndarray | None, nthreads: int) -> None:
        self.channels = w.shape[0]
        zp = np.zeros(1, np.int32) if zero_point is None else np.asarray(zero_point).astype(np.int32).reshape(-1)
        centered = w[:, 0].astype(np.int32) - zp.reshape(-1, 1, 1)
        self.weights = np.ascontiguousarray(centered.transpose(1, 2, 0))
        self.nthreads = nthreads

    @staticmethod
    def fits(w: np.ndarray, zero_point: np.ndarray | None, group: int) -> bool:
        """2-D depthwise (one input channel per group, one output per group), 8-bit codes, a
        zero point of their dtype that is one or one per channel."""
        if w.ndim != 4 or w.dtype not in _CODES or w.shape[1] != 1 or group != w.shape[0] or group < 2:
            return False
        if zero_point is None:
            return True
        zp = np.asarray(zero_point)
        return zp.dtype == w.dtype and zp.size in (1, w.shape[0])

    def requantization(self, bias: np.ndarray | None, scale: np.ndarray,
                       y_zero_point: np.ndarray) -> int8_gemm.Requantization:
        """The per-channel terms :meth:`requantized` reads (the GEMM's, unpadded)."""
        return int8_gemm.Requantization(self.channels, self.channels, bias, scale, y_zero_point)

    def requantized(self, x: np.ndarray, zero_point: np.ndarray | None, strides: Sequence[int],
                    dilations: Sequence[int], begin: Sequence[int], out_sp: Sequence[int],
                    terms: int8_gemm.Requantization) -> np.ndarray | None:
        """QLinearConv's output codes as an (N, C, OH, OW) view of channels-last codes, or None
        for what this does not take (not 4-D 8-bit codes of C channels, a zero point not a
        scalar of x's dtype, negative pads)."""
        if x.ndim != 4 or x.dtype not in _CODES or x.shape[1] != self.channels or min(begin) < 0:
            return None
        if zero_point is not None and (np.asarray(zero_point).size != 1 or np.asarray(zero_point).dtype != x.dtype):
            return None
        n = x.shape[0]
        oh, ow = int(out_sp[0]), int(out_sp[1])
        if 0 in (n, oh, ow):
            return None
        nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))  # free for the codes QLinearConv hands on
        x_zp = np.int32(0 if zero_point is None else int(np.asarray(zero_point).reshape(())))
        y = np.empty((n, oh, ow, self.channels), dtype=terms.dtype)
        dims = np.array((strides[0], strides[1], dilations[0], dilations[1], begin[0], begin[1]), dtype=np.int64)
        params = np.array(terms.scalars, np.float64)
        pick(depthwise_nhwc, depthwise_nhwc_serial, self.nthreads, y.size * self.weights.shape[0])(
            nhwc, self.weights, x_zp, dims, terms.biases, terms.scales, params, y)
        return y.transpose(0, 3, 1, 2)


def pack(w: Any, zero_point: Any, group: int, nthreads: int) -> PackedDepthwiseInt8 | None:
    """The weights packed when the layer is depthwise, else None."""
    if not isinstance(w, np.ndarray) or not PackedDepthwiseInt8.fits(w, zero_point, group):
        return None
    return PackedDepthwiseInt8(w, zero_point, nthreads)
