"""Compiled 2-D MaxPool over 8-bit codes kept channels last (a QDQ model's pools between int8
convolutions).

Why: the int8 convolutions write their codes channels last and hand them on as NCHW views
(``kernels_int8_conv``), so the next convolution reads them without a transpose. A MaxPool
between two of them (inception's stem and branch pools) ran on NCHW planes: a transpose into
NCHW order for the plane kernel, then one back for the next convolution, and the row kernel
over bytes (inception_v1's 13 code pools: 3.65 ms against 1.19 for the same pools in float32,
1 thread, session 22). Here each output pixel folds its window's pixels, each a run of C
contiguous codes, with ``max`` across the run (vectorized over channels), and the result is
channels last again: the next convolution reads it as it is. Windows are clipped to the input;
a window wholly in the padding (only with ceil mode) holds the dtype's lowest code, which is
what padding with that code and taking the max gives.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit, prange

from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
from .threads import pick, serial_twin

#: the code dtypes this kernel takes
CODES = (np.dtype(np.uint8), np.dtype(np.int8))


@njit(parallel=True, cache=True, nogil=True)
def max_pool_nhwc(x, y, lowest, dims):  # pragma: no cover - compiled
    """``y (N, OH, OW, C)`` = the max of each window of ``x (N, H, W, C)``; ``dims``: kh, kw, sh,
    sw, dh, dw, pad top, pad left."""
    n, h, w, c = x.shape
    _, oh, ow, _ = y.shape
    kh, kw, sh, sw, dh, dw, pt, pl = dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6], dims[7]
    for r in prange(n * oh):
        b = r // oh
        oy = r - b * oh
        for ox in range(ow):
            out = y[b, oy, ox]
            for ci in range(c):
                out[ci] = lowest
            for ki in range(kh):
                iy = oy * sh - pt + ki * dh
                if iy < 0 or iy >= h:
                    continue
                for kj in range(kw):
                    ix = ox * sw - pl + kj * dw
                    if ix < 0 or ix >= w:
                        continue
                    src = x[b, iy, ix]
                    for ci in range(c):
                        if src[ci] > out[ci]:
                            out[ci] = src[ci]


max_pool_nhwc_serial = serial_twin(max_pool_nhwc)


def max_pool(nhwc: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
             begin: Sequence[int], out_sp: Sequence[int], nthreads: int) -> np.ndarray:
    """MaxPool of channels-last codes ``nhwc`` (N, H, W, C) into a new channels-last array."""
    n, _, _, c = nhwc.shape
    y = np.empty((n, int(out_sp[0]), int(out_sp[1]), c), dtype=nhwc.dtype)
    dims = np.array((*kernel, *strides, *dilations, begin[0], begin[1]), dtype=np.int64)
    lowest = nhwc.dtype.type(np.iinfo(nhwc.dtype).min)
    pick(max_pool_nhwc, max_pool_nhwc_serial, nthreads, nhwc.size)(nhwc, y, lowest, dims)
    return y


@njit(parallel=True, cache=True, nogil=True)
def average_pool_nhwc(x, y, dims, shift, factor, params):  # pragma: no cover - compiled
    """``y (N, OH, OW, C)`` codes = the average of each window of codes ``x (N, H, W, C)``:
    ``clip(rint((S - shift) * factor) + y_zp)`` with ``S`` the window's exact sum and, per
    output position, ``shift`` = its positions inside the input times x_zp and ``factor`` =
    x_scale / y_scale over its divisor (both (OH, OW) float64, made by the caller);
    ``dims`` as :func:`max_pool_nhwc`; ``params``: y_zp, lowest code, highest code."""
    n, h, w, c = x.shape
    _, oh, ow, _ = y.shape
    kh, kw, sh, sw, dh, dw, pt, pl = dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6], dims[7]
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
                    for ci in range(c):
                        acc[ci] += np.int32(src[ci])
            s0 = shift[oy, ox]
            f = factor[oy, ox]
            out = y[b, oy, ox]
            for ci in range(c):
                v = np.rint((np.float64(acc[ci]) - s0) * f) + zy
                v = lo if v < lo else v
                out[ci] = hi if v > hi else v


average_pool_nhwc_serial = serial_twin(average_pool_nhwc)


def average_pool(nhwc: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                 begin: Sequence[int], shift: np.ndarray, factor: np.ndarray, params: np.ndarray, dtype: np.dtype,
                 nthreads: int) -> np.ndarray:
    """AveragePool of channels-last codes ``nhwc`` into new channels-last codes of ``dtype``
    (:func:`average_pool_nhwc`; the output's spatial shape is ``shift``'s)."""
    n, _, _, c = nhwc.shape
    y = np.empty((n, *shift.shape, c), dtype=dtype)
    dims = np.array((*kernel, *strides, *dilations, begin[0], begin[1]), dtype=np.int64)
    pick(average_pool_nhwc, average_pool_nhwc_serial, nthreads, nhwc.size)(nhwc, y, dims, shift, factor, params)
    return y
