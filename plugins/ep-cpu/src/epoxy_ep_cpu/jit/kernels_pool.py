"""Compiled GlobalAveragePool over an [N*C, H*W] view, and windowed 2-D MaxPool /
AveragePool (one compiled kernel per dtype each).

The windowed kernel is separable like the numpy path (``ops/pool.py``), in the same order:
per output row, the window's input rows are reduced into one row buffer (a contiguous,
vectorized pass, all rows of a 3-row window at once), then each output folds its window's
columns of that buffer in registers, the interior windows without bounds checks (1 thread,
min of interleaved runs: squeezenet's 3x3 stride-2 MaxPool of [96, 109, 109] 0.64 -> 0.45 ms,
inception_v2's 3x3 stride-1 AveragePool of [192, 28, 28] 0.46 -> 0.29; onnxruntime's NCHW
kernels 0.24 and 0.09, bench/README session 16). Padding is
never materialized: positions outside the input are skipped, which is what padding with
zeros (sums) or NaN under ``fmax`` (max: NaN inputs are ignored, a window of nothing but
NaN or padding gives NaN) does. A per-output-window kernel measured 2-3x slower than the
numpy passes on [64, 112, 112].

3x3 stride-1 pools padded by 1 all round (the output the input's size: inception's branch
pools) run as two passes over whole planes (:func:`_same3_plane`): in one plane a row's
window rows sit at fixed offsets, so a single long loop folds every interior row and a
second folds the columns, instead of two short loops per row (1 thread, [192, 28, 28]:
MaxPool 0.22 -> 0.066 ms, AveragePool 0.26 -> 0.065; onnxruntime 0.068 and 0.071; bench/README
session 17), with the numpy path's bits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit, prange, uint64

from . import (
    direct,
    kernel_cache,  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
)
from . import kernels_pool_codes as codes  # noqa: F401 - reached as ``module.codes``
from . import kernels_pool_rows as rows
from .pool_folds import MAX, MAX_NO_NAN, SUM, has_nan, max2, max2_finite
from .threads import GRAIN, Shares, serial_twin, share_count, use

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@njit(parallel=True, cache=True, nogil=True, fastmath={"reassoc"})
def global_avg(x, y):  # pragma: no cover - compiled
    planes, n = x.shape
    for c in prange(planes):
        s = 0.0
        for k in range(n):
            s += x[c, k]
        y[c] = s / n


global_avg_serial = serial_twin(global_avg)
#: (dtype, parallel) -> global_avg's overload for a C-contiguous 2-D input (see ``direct``)
_GLOBAL_AVG: dict[tuple[np.dtype, bool], Any] = {}


def run_global_avg(x: np.ndarray, nthreads: int) -> np.ndarray | None:
    """GlobalAveragePool of a float32/float64 (N, C, ...) tensor with a non-empty image; a
    tensor of fewer than ``GRAIN`` elements a thread runs without a parallel launch."""
    if x.ndim < 3 or x.dtype not in _FLOATS or x.size == 0:
        return None
    planes = x.shape[0] * x.shape[1]
    y = np.empty(planes, x.dtype)
    x2 = x.reshape(planes, -1)
    if not x2.flags.c_contiguous:  # the overload reads its input as C-contiguous
        x2 = np.ascontiguousarray(x2)
    count = max(1, min(nthreads, planes, x.size // GRAIN))
    key = (x.dtype, count > 1)
    fn = _GLOBAL_AVG.get(key)
    if fn is None:
        fn = _GLOBAL_AVG[key] = direct.overload(global_avg if count > 1 else global_avg_serial, (x2, y))
    if count > 1:
        use(count, x.size)
    fn(x2, y)
    return y.reshape(x.shape[:2] + (1,) * (x.ndim - 2))


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _fold(v, a, is_max):  # pragma: no cover - compiled
    """One more window element ``v`` into the running ``a``: fmax (a NaN ``a`` gives way)
    or the sum, in the numpy path's operand order."""
    if is_max:
        return v if (v > a) | (a != a) else a
    return a + v


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _rows_into(x, r, starts, count, wd, mode):  # pragma: no cover - compiled
    """``r`` = the window's ``count`` input rows (at ``starts``) folded element by element
    (``mode``: SUM, MAX or MAX_NO_NAN): one vectorized loop for two or three rows (2-D
    pools' usual windows), else row by row."""
    wu = uint64(wd)
    s0 = uint64(starts[0])
    is_max = mode != SUM
    if count == 3:  # the reduction chosen outside the loops, which then vectorize
        s1, s2 = uint64(starts[1]), uint64(starts[2])
        if mode == MAX_NO_NAN:
            for i in range(wu):
                r[i] = max2_finite(x[s2 + i], max2_finite(x[s1 + i], x[s0 + i]))
        elif is_max:
            for i in range(wu):
                r[i] = max2(x[s2 + i], max2(x[s1 + i], x[s0 + i]))
        else:
            for i in range(wu):
                r[i] = (x[s0 + i] + x[s1 + i]) + x[s2 + i]
        return
    if count == 2:
        s1 = uint64(starts[1])
        if mode == MAX_NO_NAN:
            for i in range(wu):
                r[i] = max2_finite(x[s1 + i], x[s0 + i])
        elif is_max:
            for i in range(wu):
                r[i] = max2(x[s1 + i], x[s0 + i])
        else:
            for i in range(wu):
                r[i] = x[s0 + i] + x[s1 + i]
        return
    for i in range(wu):
        r[i] = x[s0 + i]
    for k in range(1, count):
        sk = uint64(starts[k])
        if is_max:
            for i in range(wu):
                r[i] = max2(x[sk + i], r[i])
        else:
            for i in range(wu):
                r[i] += x[sk + i]


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _columns(r, y, yo, b0, n, s, d, kw, e, mode):  # pragma: no cover - compiled
    """``n`` outputs from ``yo``: output ``i`` folds ``r[b0 + i * s + k * d]``, k < kw. Inlined
    where the caller passes constant steps, so that LLVM sees them (a stride-2 gather with a
    constant step measured 1.3x faster than with a run-time one)."""
    is_max = mode != SUM
    if kw == 3 and mode == MAX_NO_NAN:
        for i in range(n):
            b = b0 + i * s
            y[yo + i] = max2_finite(r[b + d + d], max2_finite(r[b + d], r[b]))
    elif kw == 2 and mode == MAX_NO_NAN:
        for i in range(n):
            b = b0 + i * s
            y[yo + i] = max2_finite(r[b + d], r[b])
    elif kw == 3 and is_max:
        for i in range(n):
            b = b0 + i * s
            y[yo + i] = max2(r[b + d + d], max2(r[b + d], r[b]))
    elif kw == 3:
        for i in range(n):
            b = b0 + i * s
            y[yo + i] = ((e + r[b]) + r[b + d]) + r[b + d + d]
    elif kw == 2 and is_max:
        for i in range(n):
            b = b0 + i * s
            y[yo + i] = max2(r[b + d], r[b])
    elif kw == 2:
        for i in range(n):
            b = b0 + i * s
            y[yo + i] = (e + r[b]) + r[b + d]
    else:
        for i in range(n):
            b = b0 + i * s
            a = e
            for kj in range(uint64(kw)):
                a = _fold(r[b + kj * d], a, is_max)
            y[yo + i] = a


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _interior_columns(r, y, yr, ia, ib, sw, pl, kw, dw, e, mode):  # pragma: no cover - compiled
    """Outputs ``ia`` to ``ib`` of one output row (at ``yr``), whose windows lie inside the
    row buffer ``r``: 2- and 3-wide windows unrolled, one loop per reduction, the usual
    steps (stride 1 or 2, no dilation) as constants. Folding ``e`` first is an identity
    (0 for sums; max starts from the first column) that keeps the numpy path's operand
    order. (A loop over the window per output, or the reduction chosen per element,
    measured 1.4x slower than the old one-pass-per-column form.)"""
    n = uint64(ib - ia)
    b0 = uint64(ia * sw - pl)
    yo = yr + uint64(ia)
    one, two = uint64(1), uint64(2)
    if dw == 1 and sw == 2:
        _columns(r, y, yo, b0, n, two, one, kw, e, mode)
    elif dw == 1 and sw == 1:
        _columns(r, y, yo, b0, n, one, one, kw, e, mode)
    else:
        _columns(r, y, yo, b0, n, uint64(sw), uint64(dw), kw, e, mode)


@njit(cache=True, nogil=True, boundscheck=False)
def _pool_plane(x, y, dims, cnt_h, cnt_w, empty, p, is_max, r, starts):  # pragma: no cover - compiled
    """Plane ``p`` (= batch * C + channel); ``dims``: H, W, oh, ow, kh, kw, sh, sw, dh, dw,
    pad top, pad left; ``cnt_h`` / ``cnt_w``: AveragePool's divisor factors per output row /
    column; ``empty[0]``: an empty window's value (NaN / 0), in ``x``'s dtype so that every
    sum stays in that dtype, as in the numpy path. Each output folds ``empty[0]`` and then
    its window's row-reduced columns in order, in registers (the columns of interior
    windows without bounds checks). ``r`` (W elements) and ``starts`` (kh) are scratch,
    allocated once per thread's share of planes: allocating them per plane was half the
    time of a pool over many small planes ([272, 14, 14] stride 2)."""
    h, wd, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl = (dims[0], dims[1], dims[2], dims[3], dims[4], dims[5],
                                                     dims[6], dims[7], dims[8], dims[9], dims[10], dims[11])
    xb = p * h * wd
    yb = p * oh * ow
    e = empty[0]
    mode = SUM
    if is_max:
        mode = MAX if has_nan(x, xb, h * wd) else MAX_NO_NAN
    # interior output columns [ia, ib): every window column lies in [0, W)
    ia = min(ow, max(0, (pl + sw - 1) // sw))
    last = wd - 1 - (kw - 1) * dw + pl  # ox * sw <= last
    ib = min(ow, last // sw + 1) if last >= 0 else 0
    ib = max(ia, ib)
    for oy in range(oh):
        count = 0
        for ki in range(kh):
            iy = oy * sh + ki * dh - pt
            if 0 <= iy < h:
                starts[count] = xb + iy * wd
                count += 1
        yr = uint64(yb + oy * ow)
        if count == 0:  # the window's rows all lie in the padding
            for i in range(uint64(ow)):
                y[yr + i] = e
            continue
        _rows_into(x, r, starts, count, wd, mode)
        _interior_columns(r, y, yr, ia, ib, sw, pl, kw, dw, e, mode)
        for edge in range(2):  # the outputs whose windows reach into the padding
            for ox in range(0, ia) if edge == 0 else range(ib, ow):
                a = e
                b = ox * sw - pl
                for kj in range(kw):
                    ix = b + kj * dw
                    if 0 <= ix < wd:
                        a = _fold(r[uint64(ix)], a, is_max)
                y[yr + uint64(ox)] = a
        if not is_max:
            ch = cnt_h[oy]
            for ox in range(ow):
                c = ch * cnt_w[ox]
                y[yr + uint64(ox)] /= c if c > 1 else 1


@njit(cache=True, nogil=True, boundscheck=False)
def _same3_plane(x, y, v, div, recip, e, p, h, wd, is_max):  # pragma: no cover - compiled
    """Plane ``p`` of a 3x3 stride-1 pool padded by 1 on every side (the output is the input's
    size; inception's branch pools), as two passes over the whole plane instead of one per
    row: ``v`` = each row's window rows folded (one loop over all interior rows: a row's
    neighbours are at fixed offsets +-W), then each output folds ``v``'s three columns (one
    loop over the plane, the first and last column of every row redone after it, since the
    loop reads across row ends); AveragePool's sums are divided by ``div`` (per output, 1
    where the numpy path divides by nothing; ``recip``: see the full windows below). Same
    operand order as :func:`_pool_plane` (``e``: its empty-window value, 0 of ``x``'s dtype
    for sums), so the same bits."""
    n = uint64(h * wd)
    w = uint64(wd)
    xb = uint64(p) * n
    # rows: top (window rows 0, 1), interior (-1, 0, +1), bottom (-1, 0)
    last = n - w
    if h == 1:
        for i in range(w):
            v[i] = x[xb + i]
    elif is_max:
        for i in range(w):
            v[i] = max2(x[xb + w + i], x[xb + i])
        for j in range(w, last):
            v[j] = max2(x[xb + j + w], max2(x[xb + j], x[xb + j - w]))
        for j in range(last, n):
            v[j] = max2(x[xb + j], x[xb + j - w])
    else:
        for i in range(w):
            v[i] = x[xb + i] + x[xb + w + i]
        for j in range(w, last):
            v[j] = (x[xb + j - w] + x[xb + j]) + x[xb + j + w]
        for j in range(last, n):
            v[j] = x[xb + j - w] + x[xb + j]
    yb = uint64(p) * n
    one = uint64(1)
    if wd == 1:
        for j in range(n):
            y[yb + j] = v[j] if is_max else (e + v[j]) / div[j]
    elif is_max:  # the branches outside the loops, which then vectorize
        for j in range(one, n - one):
            y[yb + j] = max2(v[j + one], max2(v[j], v[j - one]))
        for r in range(uint64(h)):  # the edge columns: two window columns each
            a0 = r * w
            a1 = a0 + w - one
            y[yb + a0] = max2(v[a0 + one], v[a0])
            y[yb + a1] = max2(v[a1], v[a1 - one])
    else:
        # full windows (the interior rows' outputs; their edge columns are redone below) sum
        # nine values: with ``recip`` (float32) the sum times 1/9 in float64 rounds to the
        # quotient's float32 bits (9 is odd, so the exact quotient is never a float32 rounding
        # midpoint, nor within 2^-52 of one) and vector multiplies are ~3x faster than
        # divides; the border outputs' counts (6 and 4 without count_include_pad) divide
        full = 1.0 / 9.0
        if h >= 3 and recip:
            for j in range(w + one, last - one):
                y[yb + j] = (((e + v[j - one]) + v[j]) + v[j + one]) * full
        elif h >= 3:
            for j in range(w + one, last - one):
                y[yb + j] = (((e + v[j - one]) + v[j]) + v[j + one]) / div[j]
        for j in range(one, w - one):  # the top and the bottom row
            y[yb + j] = (((e + v[j - one]) + v[j]) + v[j + one]) / div[j]
        for j in range(last + one, n - one):
            y[yb + j] = (((e + v[j - one]) + v[j]) + v[j + one]) / div[j]
        for r in range(uint64(h)):
            a0 = r * w
            a1 = a0 + w - one
            y[yb + a0] = ((e + v[a0]) + v[a0 + one]) / div[a0]
            y[yb + a1] = ((e + v[a1 - one]) + v[a1]) / div[a1]


@njit(cache=True, nogil=True)
def pool2d_planes(x, y, dims, cnt_h, cnt_w, empty, is_max, first, last):  # pragma: no cover - compiled
    """Planes [first, last) of the general windowed pool: a share of ``threads.Split`` (its
    scratch allocated once), the whole pool on one thread."""
    r = np.empty(dims[1], dtype=x.dtype)
    starts = np.empty(dims[4], dtype=np.int64)
    for p in range(first, last):
        _pool_plane(x, y, dims, cnt_h, cnt_w, empty, p, is_max, r, starts)


@njit(cache=True, nogil=True, boundscheck=False)
def _same3_chunk(x, y, v, div, e, p0, p1, h, wd, is_max):  # pragma: no cover - compiled
    """Planes [p0, p1) of :func:`_same3_plane`'s pool as one block: each pass is one loop over
    all the block's planes, then the entries that loop got wrong are redone: the first and last
    row of every plane (the vertical loop read the neighbouring plane's rows) and the first and
    last column of every row. Why: a 13x13 or 7x7 plane's loops are shorter than one unrolled
    vector iteration, so per plane they ran scalar (1 thread, [1024, 7, 7] MaxPool 71 -> 30 us,
    [512, 13, 13] 48 -> 36; bench/README, session 40). Each entry is folded from the same
    operands in the same order as in :func:`_same3_plane`, so the same bits. Needs ``h, wd >=
    2``; AveragePool only with the full windows' 1/9 (``recip``): one multiply over the block,
    the border outputs divided by their ``div`` entries below."""
    n = uint64(h * wd)
    w = uint64(wd)
    one = uint64(1)
    b = uint64(p0) * n
    size = uint64(p1 - p0) * n
    if is_max:
        for j in range(b + w, b + size - w):
            v[j - b] = max2(x[j + w], max2(x[j], x[j - w]))
    else:
        for j in range(b + w, b + size - w):
            v[j - b] = (x[j - w] + x[j]) + x[j + w]
    for s in range(uint64(0), size, n):  # each plane's top and bottom row
        t = s + n - w
        if is_max:
            for i in range(w):
                v[s + i] = max2(x[b + s + w + i], x[b + s + i])
            for i in range(w):
                v[t + i] = max2(x[b + t + i], x[b + t - w + i])
        else:
            for i in range(w):
                v[s + i] = x[b + s + i] + x[b + s + w + i]
            for i in range(w):
                v[t + i] = x[b + t - w + i] + x[b + t + i]
    if is_max:
        for j in range(one, size - one):
            y[b + j] = max2(v[j + one], max2(v[j], v[j - one]))
        for a0 in range(uint64(0), size, w):  # every row's edge columns: two window columns
            a1 = a0 + w - one
            y[b + a0] = max2(v[a0 + one], v[a0])
            y[b + a1] = max2(v[a1], v[a1 - one])
        return
    full = 1.0 / 9.0  # see _same3_plane: the float32 quotient's bits
    for j in range(one, size - one):
        y[b + j] = (((e + v[j - one]) + v[j]) + v[j + one]) * full
    last = n - w
    for s in range(uint64(0), size, n):
        for i in range(one, w - one):  # the top and the bottom row: windows of 6 (or 9 counted)
            y[b + s + i] = (((e + v[s + i - one]) + v[s + i]) + v[s + i + one]) / div[i]
        for i in range(last + one, n - one):
            y[b + s + i] = (((e + v[s + i - one]) + v[s + i]) + v[s + i + one]) / div[i]
        for r in range(uint64(0), n, w):
            a0 = s + r
            a1 = a0 + w - one
            y[b + a0] = ((e + v[a0]) + v[a0 + one]) / div[r]
            y[b + a1] = ((e + v[a1 - one]) + v[a1]) / div[r + w - one]


@njit(cache=True, nogil=True)
def same3_planes(x, y, div, recip, empty, h, wd, is_max, chunk, first, last):  # pragma: no cover - compiled
    """Planes [first, last) of a 3x3 stride-1 pool padded by 1 (:func:`_same3_plane`), as
    :func:`pool2d_planes`: ``chunk`` planes at a time through :func:`_same3_chunk` where it
    applies, else plane by plane."""
    e = empty[0]
    if h >= 2 and wd >= 2 and (is_max or recip):
        v = np.empty(chunk * h * wd, dtype=x.dtype)
        p = first
        while p < last:
            q = min(last, p + chunk)
            _same3_chunk(x, y, v, div, e, p, q, h, wd, is_max)
            p = q
        return
    v = np.empty(h * wd, dtype=x.dtype)
    for p in range(first, last):
        _same3_plane(x, y, v, div, recip, e, p, h, wd, is_max)


#: how many elements (of one dtype) :func:`same3_planes` folds a block of planes at a time:
#: its row buffer stays in L1 (16 KB of float32)
SAME3_BLOCK_ELEMENTS = 4096


_NO_COUNT = np.ones(1, dtype=np.int64)
#: a window with no input element: NaN for MaxPool, 0 for AveragePool (read-only in the kernel)
_EMPTY_MAX = {dt: np.full(1, np.nan, dtype=dt) for dt in _FLOATS}
_EMPTY_AVG = {dt: np.zeros(1, dtype=dt) for dt in _FLOATS}


def same_size_3x3(kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int], begin: Sequence[int],
                  out_sp: Sequence[int], in_sp: Sequence[int]) -> bool:
    """Whether a pool is 3x3, stride 1, undilated and padded by 1 on every side (its output
    the input's size): the whole-plane kernel :func:`_same3_plane` runs it."""
    return (tuple(kernel) == (3, 3) and tuple(strides) == (1, 1) and tuple(dilations) == (1, 1)
            and tuple(begin) == (1, 1) and tuple(int(o) for o in out_sp) == tuple(int(i) for i in in_sp))


def pool2d_fits(x: np.ndarray, begin: Sequence[int]) -> bool:
    """Whether :class:`Pool2dCall` runs ``x``: float32/float64, 4-D, not empty, pads >= 0."""
    return x.ndim == 4 and x.dtype in _FLOATS and x.size > 0 and min(begin) >= 0


def prepare(shape: tuple[int, ...], dtype: np.dtype, kernel: Sequence[int], strides: Sequence[int],
            dilations: Sequence[int], begin: Sequence[int], out_sp: Sequence[int],
            counts: tuple[np.ndarray, np.ndarray] | None, nthreads: int) -> Any:
    """The prepared call for a 2-D pool (:func:`pool2d_fits`): the whole-plane 3x3 stride-1
    kernel, else the row-buffer kernel (``kernels_pool_rows``) where every window reaches the
    input, else :class:`Pool2dCall`."""
    in_sp = shape[2:]
    if not same_size_3x3(kernel, strides, dilations, begin, out_sp, in_sp) and rows.fits(
            kernel, strides, dilations, begin, in_sp, out_sp):
        return rows.RowsPoolCall(shape, dtype, kernel, strides, begin, out_sp, counts, nthreads)
    return Pool2dCall(shape, dtype, kernel, strides, dilations, begin, out_sp, counts, nthreads)


class Pool2dCall:
    """One pool node's windowed 2-D MaxPool (``counts`` None) or AveragePool (divisor factors
    per output row and column) for one input shape and dtype (:func:`pool2d_fits`; end pads
    and ceil mode are in ``out_sp``).

    Why prepared: the geometry array, the thread count and numba's overload are settled at
    the shape's first run; a call is then one allocation and the compiled loop (the
    dispatcher's typing of eight arguments and the per-call setup were ~15 us of a 20 us
    pool on the exporter CNNs' 16x16 maps). Callers pass ``x`` C-contiguous of ``dtype``."""

    __slots__ = ("_rest", "_shares", "dtype", "out_shape", "shape")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, kernel: Sequence[int], strides: Sequence[int],
                 dilations: Sequence[int], begin: Sequence[int], out_sp: Sequence[int],
                 counts: tuple[np.ndarray, np.ndarray] | None, nthreads: int) -> None:
        n, c, h, wd = shape
        self.shape, self.dtype = shape, dtype
        self.out_shape = (n, c, int(out_sp[0]), int(out_sp[1]))
        dims = np.array((h, wd, out_sp[0], out_sp[1], kernel[0], kernel[1], strides[0], strides[1], dilations[0],
                         dilations[1], begin[0], begin[1]), dtype=np.int64)
        cnt_h, cnt_w = counts if counts is not None else (_NO_COUNT, _NO_COUNT)
        empty = _EMPTY_MAX[dtype] if counts is None else _EMPTY_AVG[dtype]
        count = share_count(nthreads, n * c * h * wd, n * c)
        self._shares = Shares(pool2d_planes, n * c, count)  # planes over the native pool's helpers
        self._rest: tuple = (dims, cnt_h, cnt_w, empty, counts is None)
        if same_size_3x3(kernel, strides, dilations, begin, out_sp, (h, wd)):
            self._shares = Shares(same3_planes, n * c, count)
            div = np.ones(1, dtype=dtype)
            if counts is not None:
                both = np.multiply.outer(cnt_h.astype(np.int64), cnt_w.astype(np.int64)).reshape(-1)
                div = np.where(both > 1, both, 1).astype(dtype)
            recip = dtype == np.float32 and (counts is None or bool((div.reshape(h, wd)[1:-1, 1:-1] == 9).all()))
            chunk = max(1, SAME3_BLOCK_ELEMENTS // (h * wd))
            self._rest = (div, recip, empty, h, wd, counts is None, chunk)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = np.empty(self.out_shape, dtype=self.dtype)
        self._shares(x.reshape(-1), y.reshape(-1), *self._rest)
        return y
