"""Compiled 2-D MaxPool / AveragePool for undilated windows that each reach the input (the
CNNs' strided pools), through one padded row buffer per output row.

Why a second windowed kernel: ``kernels_pool._pool_plane`` treats each output row's edge
windows one by one with bounds checks and divides outputs in a separate loop; on stride-2
pools that bookkeeping, not the arithmetic, was the time (1 thread, [96, 109, 109] 3x3 s2
MaxPool 0.46 ms, [272, 14, 14] 3x3 s2 AveragePool 0.11 ms; onnxruntime 0.23 and 0.016).
Here the window rows of an output row are folded into a buffer that already holds the
padding (the fold's identity: NaN under fmax, -inf for a plane without NaN, +0 for sums),
so every output folds the same ``kw`` buffer entries at a constant step, and AveragePool
divides in the same loop (now 0.26 and 0.05 ms; bench/pool_paths.py). Three plane loops:
sums (:func:`_plane_sum`), the plain max of a NaN-free plane under 2- or 3-wide stride-2
windows (:func:`_plane_max_s2`, the common case, written out), and the general max. Same
operands in the same order as ``_pool_plane`` and the numpy path, so the same values and,
but for the sign of a zero, the same bits: a +0 identity added to a sum that starts from +0
changes nothing, and NaN is fmax's identity. :func:`fits` keeps out geometries with a
window wholly in the padding (its value would depend on the identity)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit, uint64

from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
from .llvm_module import avx512
from .pool_folds import MAX, MAX_NO_NAN, SUM, has_nan, max2, max2_finite
from .simd import LANES, SPAN, deinterleave32, max3_rows, max_s2_lanes, max_s2_row
from .threads import Shares, share_count


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _max(v, a, mode):  # pragma: no cover - compiled
    return max2_finite(v, a) if mode == MAX_NO_NAN else max2(v, a)


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _max_rows(x, r, starts, count, base, wd, mode):  # pragma: no cover - compiled
    """``r[base:base + wd]`` = the max of the ``count`` input rows at ``starts``, folded in
    order (MAX or MAX_NO_NAN; the general case: planes with NaN, unusual windows)."""
    b = uint64(base)
    s0 = uint64(starts[0])
    for i in range(uint64(wd)):
        r[b + i] = x[s0 + i]
    for k in range(1, count):
        sk = uint64(starts[k])
        for i in range(uint64(wd)):
            r[b + i] = _max(x[sk + i], r[b + i], mode)


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _max_columns(r, y, yo, n, s, kw, mode):  # pragma: no cover - compiled
    """``n`` outputs from ``yo``: output ``i`` is the max of ``r[i * s + k]``, k < kw, in order."""
    for i in range(uint64(n)):
        b = i * uint64(s)
        a = r[b]
        for k in range(uint64(1), uint64(kw)):
            a = _max(r[b + k], a, mode)
        y[uint64(yo) + i] = a


#: output columns from which a stride-2 max pool's rows are split into even and odd entries
#: before the window max (on shorter rows the split's stores and reloads cost more than the
#: strided reads they replace)
SPLIT_MIN_OUTPUTS = 48
#: whether the masked 16-lane folds below pay: they do with AVX-512's mask registers; on an
#: AVX2 CPU (an AMD EPYC without AVX-512, 1 thread) every shape ran 2.3-2.7x slower through them
#: than through the plain loops ([8, 8, 16, 16] 3x3 s2 MaxPool 64 -> 24 us, [1, 128, 54, 54]
#: 646 -> 262, [1, 256, 27, 27] 466 -> 188: bench/README, session 43)
MASKED_LANES = avx512()
#: input columns up to which a stride-2 max pool folds its window rows in masked 16-lane steps
#: (``simd.max3_rows``): numba's vectorized loop needs longer rows than small maps have, and
#: ran theirs scalar
LANE_ROWS_MAX_COLUMNS = 64 if MASKED_LANES else 0
#: output columns up to which a stride-2 max pool folds each output row in registers
#: (``simd.max_s2_row``, at most 16)
REGISTER_ROWS_MAX_OUTPUTS = LANES if MASKED_LANES else 0
#: :func:`lanes_route`'s answers: plain loops, masked 16-lane row folds, rows in registers
LOOP_ROWS, LANE_ROWS, REGISTER_ROWS = 0, 1, 2


def lanes_route(ow: int, cols: int) -> int:
    """How a stride-2 max pool with ``ow`` outputs a row over ``cols`` input columns folds
    its rows (decided per shape in Python, so that the thresholds stay settable)."""
    if ow <= min(REGISTER_ROWS_MAX_OUTPUTS, LANES):
        return REGISTER_ROWS
    return LANE_ROWS if cols <= LANE_ROWS_MAX_COLUMNS else LOOP_ROWS


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _plane_max_s2(x, y, r, eo, ident, xb, yb, h, wd, oh, ow, kh, kw, pt, pl, cols,
                  lanes_route):  # pragma: no cover - compiled
    """:func:`_plane_max`'s MAX_NO_NAN case for stride-2 windows of 2 or 3 (the CNNs' MaxPools),
    with the window rows' offsets computed in place and every loop written out: through the
    general plane function's mode and count dispatch the same loops ran 1.4x slower. How a row
    folds is ``lanes_route``'s: in registers (up to 16 outputs), in masked 16-lane steps through
    the row buffer ``r`` (up to 64 columns), or in plain loops, split into even and odd entries
    (``eo``: the even ones, then from ``half`` the odd ones) from SPLIT_MIN_OUTPUTS outputs."""
    w = uint64(wd)
    b = uint64(pl)
    one = uint64(1)
    split = ow >= SPLIT_MIN_OUTPUTS
    tiny = lanes_route == REGISTER_ROWS
    short = lanes_route == LANE_ROWS
    zero, lanes = uint64(0), uint64(LANES)
    blocks = (ow + 1 + SPAN // 2 - 1) // (SPAN // 2)  # even entries 0..ow, odd ones 0..ow-1
    half = uint64(blocks * (SPAN // 2))
    for oy in range(oh):
        first = max(0, 2 * oy - pt)
        count = min(h, 2 * oy - pt + kh) - first
        s0 = uint64(xb + first * wd)
        yo = uint64(yb + oy * ow)
        # the lane routes' window rows: a row twice (or thrice) folds two rows (or copies one),
        # the same bits
        s1 = s0 + w if count >= 2 else s0
        s2 = s1 + w if count == 3 else s1
        if tiny:  # the whole row in registers (``simd.max_s2_row``)
            max_s2_row(x, s0, s1, s2, pl, cols, ident, kw == 3, y, yo, ow)
            continue
        if short:
            for c in range(zero, uint64(cols), lanes):
                max3_rows(x, s0 + c, s1 + c, s2 + c, r, b + c, min(lanes, uint64(cols) - c))
        elif count == 3:
            for i in range(uint64(cols)):
                r[b + i] = max2_finite(x[s0 + w + w + i], max2_finite(x[s0 + w + i], x[s0 + i]))
        elif count == 2:
            for i in range(uint64(cols)):
                r[b + i] = max2_finite(x[s0 + w + i], x[s0 + i])
        else:
            for i in range(uint64(cols)):
                r[b + i] = x[s0 + i]
        if not split:  # 16 outputs a step from two loads of the row buffer (``simd.max_s2_lanes``)
            for o in range(zero, uint64(ow), lanes):
                max_s2_lanes(r, o + o, kw == 3, y, yo + o, min(lanes, uint64(ow) - o))
            continue
        # the buffer's even and odd entries split apart by vector shuffles: output i's window
        # is then even[i], odd[i] (and even[i + 1]), read at unit stride
        for block in range(blocks):
            deinterleave32(r, uint64(block * SPAN), eo, uint64(block * (SPAN // 2)), half + uint64(block * (SPAN // 2)))
        if kw == 3:
            for i in range(uint64(ow)):
                y[yo + i] = max2_finite(eo[i + one], max2_finite(eo[half + i], eo[i]))
        else:
            for i in range(uint64(ow)):
                y[yo + i] = max2_finite(eo[half + i], eo[i])


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _plane_sum(x, y, div, r, e, xb, yb, h, wd, oh, ow, kh, kw, sh, sw, pt, pl, cols):  # pragma: no cover
    """AveragePool's plane (:func:`_plane_max` is MaxPool's): each output's sum from ``e``
    (+0) over its window's row sums, in the numpy path's order (rows first, then columns),
    divided by its ``div`` entry in the same loop; the loops written out as in
    :func:`_plane_max_s2`."""
    w = uint64(wd)
    b = uint64(pl)
    one, two = uint64(1), uint64(2)
    for oy in range(oh):
        first = max(0, oy * sh - pt)
        count = min(h, oy * sh - pt + kh) - first
        s0 = uint64(xb + first * wd)
        if count == 3:
            for i in range(uint64(cols)):
                r[b + i] = (x[s0 + i] + x[s0 + w + i]) + x[s0 + w + w + i]
        elif count == 2:
            for i in range(uint64(cols)):
                r[b + i] = x[s0 + i] + x[s0 + w + i]
        else:
            for i in range(uint64(cols)):
                r[b + i] = x[s0 + i]
            for k in range(one, uint64(count)):
                sk = s0 + k * w
                for i in range(uint64(cols)):
                    r[b + i] += x[sk + i]
        yo = uint64(yb + oy * ow)
        do = uint64(oy * ow)
        if sw == 2 and kw == 3:
            for i in range(uint64(ow)):
                y[yo + i] = (((e + r[i + i]) + r[i + i + one]) + r[i + i + two]) / div[do + i]
        elif sw == 2 and kw == 2:
            for i in range(uint64(ow)):
                y[yo + i] = ((e + r[i + i]) + r[i + i + one]) / div[do + i]
        else:
            for i in range(uint64(ow)):
                c = i * uint64(sw)
                a = e + r[c]
                for k in range(one, uint64(kw)):
                    a += r[c + k]
                y[yo + i] = a / div[do + i]


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _fill_edges(r, pl, cols, rw, fill):  # pragma: no cover - compiled
    """The row buffer's entries outside the input (``[0, pl)`` and from ``pl + cols``) set to
    the fold's identity ``fill``."""
    for j in range(pl):
        r[j] = fill
    for j in range(pl + cols, rw):
        r[j] = fill


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _plane_max(x, y, ident, r, eo, starts, p, h, wd, oh, ow, kh, kw, sh, sw, pt, pl, rw,
               lanes_route):  # pragma: no cover - compiled
    """MaxPool's plane ``p`` of an (H, W) -> (oh, ow) pool with a (kh, kw) window, strides
    (sh, sw), pads (pt, pl) at the start and a row buffer ``rw`` wide; ``ident``: each mode's
    identity in ``x``'s dtype; ``r`` (``rw`` and ``SPAN`` more), ``eo`` (``rw`` and twice
    ``SPAN``) and ``starts`` (kh) are scratch. The buffer's entry ``j`` is the input column
    ``j - pl``; the entries outside the input hold the identity. The geometry comes as
    scalars: read from an array here it made the row loop 1.8x slower."""
    xb = p * h * wd
    yb = p * oh * ow
    mode = MAX if has_nan(x, xb, h * wd) else MAX_NO_NAN
    cols = min(wd, rw - pl)  # input columns some window reads
    _fill_edges(r, pl, cols, rw, ident[mode])
    if mode == MAX_NO_NAN and sh == 2 and sw == 2 and 2 <= kh <= 3 and 2 <= kw <= 3:
        _plane_max_s2(x, y, r, eo, ident[mode], xb, yb, h, wd, oh, ow, kh, kw, pt, pl, cols, lanes_route)
        return
    for oy in range(oh):
        count = 0
        for ki in range(kh):
            iy = oy * sh + ki - pt
            if 0 <= iy < h:
                starts[count] = xb + iy * wd
                count += 1
        _max_rows(x, r, starts, count, pl, cols, mode)
        _max_columns(r, y, yb + oy * ow, ow, sw, kw, mode)


@njit(cache=True, nogil=True)
def rows_planes_max(x, y, dims, ident, first, last):  # pragma: no cover - compiled
    """MaxPool's planes [first, last): a share of ``threads.Split`` (one scratch row for
    them all), the whole pool on one thread. Apart from :func:`rows_planes_sum` so that a
    model compiles only the folds it runs (cold compile: bench/README.md, session 28)."""
    h, wd, oh, ow, kh, kw, sh, sw, pt, pl, rw = (dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6],
                                                 dims[7], dims[8], dims[9], dims[10])
    lanes_route = dims[11]
    r = np.empty(rw + SPAN, dtype=x.dtype)  # the even/odd split reads whole blocks of SPAN
    eo = np.empty(rw + 2 * SPAN, dtype=x.dtype)
    starts = np.empty(kh, dtype=np.int64)
    for p in range(first, last):
        _plane_max(x, y, ident, r, eo, starts, p, h, wd, oh, ow, kh, kw, sh, sw, pt, pl, rw, lanes_route)


@njit(cache=True, nogil=True)
def rows_planes_sum(x, y, dims, div, ident, first, last):  # pragma: no cover - compiled
    """AveragePool's planes [first, last) (``div``: each output's divisor), as
    :func:`rows_planes_max`."""
    h, wd, oh, ow, kh, kw, sh, sw, pt, pl, rw = (dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6],
                                                 dims[7], dims[8], dims[9], dims[10])
    r = np.empty(rw, dtype=x.dtype)
    e = ident[SUM]
    cols = min(wd, rw - pl)
    _fill_edges(r, pl, cols, rw, e)  # the sums write only the entries inside the input
    for p in range(first, last):
        _plane_sum(x, y, div, r, e, p * h * wd, p * oh * ow, h, wd, oh, ow, kh, kw, sh, sw, pt, pl, cols)


#: per dtype, each fold's identity, indexed by mode: +0 (SUM), NaN (MAX), -inf (MAX_NO_NAN);
#: 8-bit codes (MaxPool on a QDQ model's codes) have no NaN, so only MAX_NO_NAN's minimum is used
_IDENTITY = {np.dtype(t): np.array([0.0, np.nan, -np.inf], dtype=t) for t in (np.float32, np.float64)}
_IDENTITY.update({np.dtype(t): np.array([0, np.iinfo(t).min, np.iinfo(t).min], dtype=t) for t in (np.uint8, np.int8)})
#: the integer dtypes this kernel takes (MaxPool only: see ``ops/pool.py``)
CODES = (np.dtype(np.uint8), np.dtype(np.int8))


def fits(kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int], begin: Sequence[int],
         in_sp: Sequence[int], out_sp: Sequence[int]) -> bool:
    """Whether this kernel runs a 2-D pool: undilated, pads smaller than the window, and
    every window's first row and column inside the input (ceil mode's last windows may
    reach past it, never wholly)."""
    if tuple(dilations) != (1, 1) or len(kernel) != 2:
        return False
    for k, s, b, size, o in zip(kernel, strides, begin, in_sp, out_sp):
        if not 0 <= b < k or (o - 1) * s - b >= size:
            return False
    return True


class RowsPoolCall:
    """One pool node's call for one input shape and dtype (see the module docstring);
    ``counts``: AveragePool's divisor factors per output row and column, None for MaxPool.
    Callers pass ``x`` C-contiguous of ``dtype``."""

    __slots__ = ("_rest", "_shares", "dtype", "out_shape", "shape")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, kernel: Sequence[int], strides: Sequence[int],
                 begin: Sequence[int], out_sp: Sequence[int], counts: tuple[np.ndarray, np.ndarray] | None,
                 nthreads: int) -> None:
        n, c, h, wd = shape
        oh, ow = int(out_sp[0]), int(out_sp[1])
        self.shape, self.dtype = shape, dtype
        self.out_shape = (n, c, oh, ow)
        width = (ow - 1) * strides[1] + kernel[1]
        cols = min(wd, width - begin[1])  # input columns some window reads (as in _plane_max)
        dims = np.array((h, wd, oh, ow, kernel[0], kernel[1], strides[0], strides[1], begin[0], begin[1], width,
                         lanes_route(ow, cols)), dtype=np.int64)
        div = np.ones(1, dtype=dtype)
        if counts is not None:
            both = np.multiply.outer(counts[0].astype(np.int64), counts[1].astype(np.int64)).reshape(-1)
            div = np.maximum(both, 1).astype(dtype)
        work = n * c * h * wd
        self._rest = (dims, _IDENTITY[dtype]) if counts is None else (dims, div, _IDENTITY[dtype])
        self._shares = Shares(rows_planes_max if counts is None else rows_planes_sum, n * c,
                              share_count(nthreads, work, n * c))  # planes over the native pool's helpers

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = np.empty(self.out_shape, dtype=self.dtype)
        self._shares(x.reshape(-1), y.reshape(-1), *self._rest)
        return y
