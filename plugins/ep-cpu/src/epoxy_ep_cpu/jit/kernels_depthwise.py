"""Compiled depthwise 2-D convolution (one input channel per output channel), stride 1 or 2,
NCHW, with FusedConv's epilogue in the same pass.

Why not the direct kernel (``kernels_conv``): it updates an output plane one kernel position
at a time, so each of a 7x7 kernel's 49 taps loads and stores the whole accumulator, and the
exact-span loops end in a scalar remainder; on depthwise layers that ran 2-7x slower than
onnxruntime (1 thread: [136, 28, 28] 3x3 0.14 ms against 0.061, [8, 16, 8, 8] 7x7 0.10
against 0.016, [96, 112, 112] 3x3 stride 2 0.66 against 0.25; bench/README, session 18).
Here a plane is placed once into a scratch grid ``wp`` wide whose padding stays zero (one
grid per thread's share of planes; for stride 2, four phase grids by row and column parity,
so each kernel position still reads a unit-stride run), and each kernel row is one pass over
the flat grid that folds all ``kw`` taps of that row (3, 5 and 7 written out): the
accumulator moves once per kernel row instead of once per tap. The grid's ``wp - ow`` extra
columns per row are computed and dropped by the store, which applies the residual and the
activation (the bias starts the first row's pass). One compiled specialization per dtype."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit, uint64

from . import (
    direct,
    kernel_cache,  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
    kernels_conv,
    kernels_depthwise_channels,
    threads,
)
from .activations import ACT_HARD_SWISH, activate, activate_wide
from .kernels_conv import LANES, call_accepts
from .scratch import scratch


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _place(x, xp, xb, h, wd, wp, pt, pl):  # pragma: no cover - compiled
    """The plane at ``x[xb:]`` written at row ``pt``, column ``pl`` of the padded grid ``wp``
    wide. Only the interior: the grid's padding is zeroed once per thread's share of planes
    and never written (with pads >= 0 every input row and column lies inside the grid);
    zeroing it per plane was a third of a 7x7 map's time."""
    w = uint64(wp)
    cols = uint64(wd)
    for r in range(uint64(h)):
        sb = uint64(xb) + r * cols
        db = (r + uint64(pt)) * w + uint64(pl)
        for j in range(cols):
            xp[db + j] = x[sb + j]


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _place_s2(x, xp, xb, h, wd, hq, wq, pt, pl):  # pragma: no cover - compiled
    """Stride 2: the plane split by the parity of its padded row and column into four
    (hq, wq) phase grids (phase (pr, pc) at ``((pr * 2 + pc) * hq) * wq``), so that every
    kernel position reads one unit-stride run of one phase; only the interior is written
    (see :func:`_place`), input rows and columns no window reads are skipped. An input row's
    column pairs (2t, 2t + 1) go to the two column phases in one loop (a deinterleave)."""
    pa = pl % 2  # the column phase of even input columns; odd ones take the other
    ia, ib = pl // 2, (pl + 1) // 2  # the phase index of input columns 0 and 1
    pairs = min(wd // 2, wq - ia, wq - ib)
    for r in range(h):
        pr = r + pt
        ri = pr // 2
        if ri >= hq:
            break
        sb = uint64(xb + r * wd)
        row = (pr % 2 * 2) * hq + ri
        da = uint64((row + pa * hq) * wq + ia)
        db = uint64((row + (1 - pa) * hq) * wq + ib)
        for t in range(uint64(max(0, pairs))):
            xp[da + t] = x[sb + t + t]
            xp[db + t] = x[sb + t + t + uint64(1)]
        for j in range(2 * max(0, pairs), wd):  # an odd width's last column, or columns past the grid
            d = (j + pl) // 2
            if d < wq:
                xp[uint64((row + (j + pl) % 2 * hq) * wq + d)] = x[sb + uint64(j)]


@njit(cache=True, nogil=True, boundscheck=False, fastmath={"contract"}, inline="always")
def _kernel_row(xp, acc, w, wo, a, b, step, span, kw, first, bv):  # pragma: no cover - compiled
    """``acc[:span] (+)= sum_j w[wo + j] * xp[o_j + q]``: one kernel row's taps in one pass
    (``first``: the accumulator starts from the bias ``bv`` instead). Tap ``j`` reads from
    ``o_j = (a if j is even else b) + (j // 2) * step``: stride 1 passes the row's start,
    the next column and step 2; stride 2 the row in the even and the odd column phase and
    step 1 (3, 5 and 7 taps written out; callers pass the steps as constants)."""
    wk = w[wo:wo + kw]
    p0, p1 = uint64(a), uint64(b)
    d = uint64(step)
    if kw == 3:
        w0, w1, w2 = wk[0], wk[1], wk[2]
        for q in range(uint64(span)):
            s = w0 * xp[p0 + q] + w1 * xp[p1 + q] + w2 * xp[p0 + d + q]
            acc[q] = (bv + s) if first else acc[q] + s
        return
    if kw == 5:
        w0, w1, w2, w3, w4 = wk[0], wk[1], wk[2], wk[3], wk[4]
        for q in range(uint64(span)):
            s = (w0 * xp[p0 + q] + w1 * xp[p1 + q] + w2 * xp[p0 + d + q] + w3 * xp[p1 + d + q]
                 + w4 * xp[p0 + d + d + q])
            acc[q] = (bv + s) if first else acc[q] + s
        return
    if kw == 7:
        w0, w1, w2, w3, w4, w5, w6 = wk[0], wk[1], wk[2], wk[3], wk[4], wk[5], wk[6]
        for q in range(uint64(span)):
            s = (w0 * xp[p0 + q] + w1 * xp[p1 + q] + w2 * xp[p0 + d + q] + w3 * xp[p1 + d + q]
                 + w4 * xp[p0 + d + d + q] + w5 * xp[p1 + d + d + q] + w6 * xp[p0 + d + d + d + q])
            acc[q] = (bv + s) if first else acc[q] + s
        return
    if first:
        for q in range(uint64(span)):
            acc[q] = bv
    two = uint64(2)
    for j in range(uint64(kw)):
        wv = wk[j]
        o = (p0 if j % two == 0 else p1) + (j // two) * d
        for q in range(uint64(span)):
            acc[q] += wv * xp[o + q]


@njit(cache=True, nogil=True, boundscheck=False, fastmath={"contract"}, inline="always")
def _taps3x3(xp, acc, w, wb, offs, span, bv):  # pragma: no cover - compiled
    """A 3x3 plane's nine taps in one pass over the grid: ``acc[q] = ((bv + s0) + s1) + s2``,
    ``s_r`` kernel row ``r``'s three taps, each tap ``t`` reading ``xp[offs[t] + q]`` (the
    order and grouping of :func:`_kernel_row`'s three passes, so the same bits). One loop
    instead of three: on small maps (8x8, span 78) each pass was mostly its vector loop's
    setup and scalar remainder."""
    w0, w1, w2, w3, w4, w5, w6, w7, w8 = (w[wb], w[wb + 1], w[wb + 2], w[wb + 3], w[wb + 4], w[wb + 5], w[wb + 6],
                                          w[wb + 7], w[wb + 8])
    o0, o1, o2, o3, o4, o5 = uint64(offs[0]), uint64(offs[1]), uint64(offs[2]), uint64(offs[3]), uint64(offs[4]), \
        uint64(offs[5])
    o6, o7, o8 = uint64(offs[6]), uint64(offs[7]), uint64(offs[8])
    for q in range(uint64(span)):
        s0 = w0 * xp[o0 + q] + w1 * xp[o1 + q] + w2 * xp[o2 + q]
        s1 = w3 * xp[o3 + q] + w4 * xp[o4 + q] + w5 * xp[o5 + q]
        s2 = w6 * xp[o6 + q] + w7 * xp[o7 + q] + w8 * xp[o8 + q]
        acc[q] = ((bv + s0) + s1) + s2


@njit(cache=True, nogil=True, boundscheck=False, fastmath={"contract"}, inline="always")
def _row5(xp, w, wt, a, b, d, q):  # pragma: no cover - compiled
    """One 5-tap kernel row's sum at ``q``: taps read ``(a if j is even else b) + (j // 2) * d``
    (as :func:`_kernel_row`), the row's weights from ``w[wt]``."""
    return (w[wt] * xp[a + q] + w[wt + uint64(1)] * xp[b + q] + w[wt + uint64(2)] * xp[a + d + q]
            + w[wt + uint64(3)] * xp[b + d + q] + w[wt + uint64(4)] * xp[a + d + d + q])


@njit(cache=True, nogil=True, boundscheck=False, fastmath={"contract"}, inline="always")
def _taps5x5(xp, acc, w, wb, offs, span, bv):  # pragma: no cover - compiled
    """:func:`_taps3x3` for a 5x5 kernel: 25 taps in one pass, the five rows' sums added in
    row order; each row's taps from its two column phases (``offs`` of its taps 0 and 1) in
    steps of ``offs[2] - offs[0]``."""
    d = uint64(offs[2] - offs[0])
    a0, b0, a1, b1 = uint64(offs[0]), uint64(offs[1]), uint64(offs[5]), uint64(offs[6])
    a2, b2, a3, b3 = uint64(offs[10]), uint64(offs[11]), uint64(offs[15]), uint64(offs[16])
    a4, b4 = uint64(offs[20]), uint64(offs[21])
    five = uint64(5)
    for q in range(uint64(span)):
        v = bv + _row5(xp, w, wb, a0, b0, d, q)
        v += _row5(xp, w, wb + five, a1, b1, d, q)
        v += _row5(xp, w, wb + five * uint64(2), a2, b2, d, q)
        v += _row5(xp, w, wb + five * uint64(3), a3, b3, d, q)
        v += _row5(xp, w, wb + five * uint64(4), a4, b4, d, q)
        acc[q] = v


@njit(cache=True, nogil=True, boundscheck=False, fastmath={"contract"}, inline="always")
def _row7(xp, w, wt, a, b, d, q):  # pragma: no cover - compiled
    """:func:`_row5` for a 7-tap kernel row."""
    return (w[wt] * xp[a + q] + w[wt + uint64(1)] * xp[b + q] + w[wt + uint64(2)] * xp[a + d + q]
            + w[wt + uint64(3)] * xp[b + d + q] + w[wt + uint64(4)] * xp[a + d + d + q]
            + w[wt + uint64(5)] * xp[b + d + d + q] + w[wt + uint64(6)] * xp[a + d + d + d + q])


@njit(cache=True, nogil=True, boundscheck=False, fastmath={"contract"}, inline="always")
def _taps7x7(xp, acc, w, wb, offs, span, bv):  # pragma: no cover - compiled
    """:func:`_taps5x5` for a 7x7 kernel (ConvNeXt's): 49 taps in one pass, the seven rows'
    sums added in row order."""
    d = uint64(offs[2] - offs[0])
    seven = uint64(7)
    a0, b0, a1, b1 = uint64(offs[0]), uint64(offs[1]), uint64(offs[7]), uint64(offs[8])
    a2, b2, a3, b3 = uint64(offs[14]), uint64(offs[15]), uint64(offs[21]), uint64(offs[22])
    a4, b4, a5, b5 = uint64(offs[28]), uint64(offs[29]), uint64(offs[35]), uint64(offs[36])
    a6, b6 = uint64(offs[42]), uint64(offs[43])
    for q in range(uint64(span)):
        v = bv + _row7(xp, w, wb, a0, b0, d, q)
        v += _row7(xp, w, wb + seven, a1, b1, d, q)
        v += _row7(xp, w, wb + seven * uint64(2), a2, b2, d, q)
        v += _row7(xp, w, wb + seven * uint64(3), a3, b3, d, q)
        v += _row7(xp, w, wb + seven * uint64(4), a4, b4, d, q)
        v += _row7(xp, w, wb + seven * uint64(5), a5, b5, d, q)
        v += _row7(xp, w, wb + seven * uint64(6), a6, b6, d, q)
        acc[q] = v


@njit(cache=True, nogil=True, inline="always")
def tap_offsets(offs, oh, kh, kw, wp, s):  # pragma: no cover - compiled
    """Where each tap (row-major) reads in the grid of :func:`_plane`: ``ki * wp + kj`` on a
    stride-1 grid; on stride 2's phase grids (``hq`` rows each), the phase of the tap's row
    and column parity at row ``ki // 2``, column ``kj // 2``."""
    hq = oh + (kh - 1) // 2
    for ki in range(kh):
        for kj in range(kw):
            if s == 1:
                offs[ki * kw + kj] = ki * wp + kj
            else:
                offs[ki * kw + kj] = (((ki % 2) * 2 + kj % 2) * hq + ki // 2) * wp + kj // 2


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _grid_scratch(x, dims):  # pragma: no cover - compiled
    """A share's scratch for the grid kernel: the padded grid (or stride 2's four phase grids),
    its accumulator and the taps' offsets, with the grid's row width. The padding stays zero:
    planes write the interior only; LANES more, which the one-pass kernels' whole vectors read
    past the last tap's span (finite, their sums dropped)."""
    oh, ow, kh, kw, s = dims[3], dims[4], dims[5], dims[6], dims[9]
    if s == 1:
        wp = ow + kw - 1
        grid = (oh + kh - 1) * wp
    else:
        wp = ow + (kw - 1) // 2
        grid = 4 * (oh + (kh - 1) // 2) * wp
    xp = np.zeros(grid + LANES, dtype=x.dtype)
    acc = np.empty(grid + LANES, dtype=x.dtype)
    offs = np.empty(kh * kw, dtype=np.int64)
    tap_offsets(offs, oh, kh, kw, wp, s)
    return xp, acc, offs, wp


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _place_any(x, xp, p, dims, wp):  # pragma: no cover - compiled
    """Plane ``p`` into the grid (:func:`_place`) or stride 2's phase grids (:func:`_place_s2`)."""
    h, wd, oh, kh, pt, pl = dims[1], dims[2], dims[3], dims[5], dims[7], dims[8]
    if dims[9] == 1:
        _place(x, xp, p * h * wd, h, wd, wp, pt, pl)
    else:
        _place_s2(x, xp, p * h * wd, h, wd, oh + (kh - 1) // 2, wp, pt, pl)


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _vectors(dims, wp):  # pragma: no cover - compiled
    """The one-pass kernels' span: the plane's grid positions rounded up to whole vectors (a
    scalar remainder of up to 15 elements was a third of an 8x8 plane's time)."""
    span = (dims[3] - 1) * wp + dims[4]
    return -(-span // LANES) * LANES


@njit(cache=True, nogil=True, boundscheck=False, fastmath={"contract"}, inline="always")
def _store(acc, z, y, p, oh, ow, wp, act, alpha, beta):  # pragma: no cover - compiled
    """Plane ``p``'s outputs from the accumulator (``wp`` wide; its extra columns dropped), with
    the residual (``z`` empty: none) and the activation."""
    yb = uint64(p * oh * ow)
    w_ = uint64(wp)
    o = uint64(ow)
    has_z = z.shape[0] > 0
    for oy in range(uint64(oh)):
        rb = yb + oy * o
        ab = oy * w_
        for ox in range(o):
            v = acc[ab + ox]
            if has_z:
                v += z[rb + ox]
            y[rb + ox] = activate(v, act, alpha, beta)


# The grid kernel's plane loops, one compiled function per window: its place, its taps and the
# store only, so that a model compiles the windows it runs and nothing else. With one loop for
# every window (the window's branch picked per plane) a plane ran 2.3x slower (8 x 48 planes of
# 8x8, 3x3: 48 us against 21); with a loop per window behind one entry, inlined helpers and
# every branch lowered in each, a cold first run compiled all of them: ~30 s of shufflenet's 47.
# Each is ``fn(x, w, bias, z, y, dims, act, alpha, beta, first, last)``: planes [first, last),
# with scratch of its own (a share of ``threads.Shares``).
@njit(cache=True, nogil=True, fastmath={"contract"})
def planes_3x3(x, w, bias, z, y, dims, act, alpha, beta, first, last):  # pragma: no cover - compiled
    xp, acc, offs, wp = _grid_scratch(x, dims)
    vectors = _vectors(dims, wp)
    c, oh, ow = dims[0], dims[3], dims[4]
    for p in range(first, last):
        ch = p % c
        _place_any(x, xp, p, dims, wp)
        _taps3x3(xp, acc, w, uint64(ch * 9), offs, vectors, bias[ch])
        _store(acc, z, y, p, oh, ow, wp, act, alpha, beta)


@njit(cache=True, nogil=True, fastmath={"contract"})
def planes_5x5(x, w, bias, z, y, dims, act, alpha, beta, first, last):  # pragma: no cover - compiled
    xp, acc, offs, wp = _grid_scratch(x, dims)
    vectors = _vectors(dims, wp)
    c, oh, ow = dims[0], dims[3], dims[4]
    for p in range(first, last):
        ch = p % c
        _place_any(x, xp, p, dims, wp)
        _taps5x5(xp, acc, w, uint64(ch * 25), offs, vectors, bias[ch])
        _store(acc, z, y, p, oh, ow, wp, act, alpha, beta)


@njit(cache=True, nogil=True, fastmath={"contract"})
def planes_7x7(x, w, bias, z, y, dims, act, alpha, beta, first, last):  # pragma: no cover - compiled
    xp, acc, offs, wp = _grid_scratch(x, dims)
    vectors = _vectors(dims, wp)
    c, oh, ow = dims[0], dims[3], dims[4]
    for p in range(first, last):
        ch = p % c
        _place_any(x, xp, p, dims, wp)
        _taps7x7(xp, acc, w, uint64(ch * 49), offs, vectors, bias[ch])
        _store(acc, z, y, p, oh, ow, wp, act, alpha, beta)


@njit(cache=True, nogil=True, fastmath={"contract"})
def planes_rows(x, w, bias, z, y, dims, act, alpha, beta, first, last):  # pragma: no cover - compiled
    """Any other window: one pass per kernel row (:func:`_kernel_row`)."""
    xp, acc, offs, wp = _grid_scratch(x, dims)
    c, oh, ow, kh, kw, s = dims[0], dims[3], dims[4], dims[5], dims[6], dims[9]
    span = (oh - 1) * wp + ow
    hq = oh + (kh - 1) // 2
    for p in range(first, last):
        ch = p % c
        wb = ch * kh * kw
        _place_any(x, xp, p, dims, wp)
        if s == 1:
            for ki in range(kh):
                _kernel_row(xp, acc, w, wb + ki * kw, ki * wp, ki * wp + 1, 2, span, kw, ki == 0, bias[ch])
        else:
            for ki in range(kh):
                g0 = ((ki % 2 * 2) * hq + ki // 2) * wp  # phase (ki % 2, 0), row ki // 2
                _kernel_row(xp, acc, w, wb + ki * kw, g0, g0 + hq * wp, 1, span, kw, ki == 0, bias[ch])
        _store(acc, z, y, p, oh, ow, wp, act, alpha, beta)


#: square windows with a one-pass taps kernel -> its plane loop (others: :func:`planes_rows`)
_GRID_PLANES = {3: planes_3x3, 5: planes_5x5, 7: planes_7x7}


def grid_planes(kh: int, kw: int) -> Any:
    """The grid kernel's plane loop for a ``kh`` x ``kw`` window (either stride)."""
    return _GRID_PLANES.get(kh, planes_rows) if kh == kw else planes_rows

#: multiply-adds from which a grid-kind layer's planes split over the native pool's threads
#: (``threads.native``; a hand-off costs a few us there, ~2^17 multiply-adds of this kernel)
NATIVE_MACS_PER_SHARE = 1 << 17


@njit(cache=True, nogil=True, boundscheck=False, fastmath={"contract"})
def depthwise_small(x, w, bias, z, y, dims, planes, act, alpha, beta):  # pragma: no cover - compiled
    """Every plane's outputs one at a time from the taps that reach the input, on one thread:
    for the small maps late in a mobile network (2x2 and 4x4 planes under a 5x5 kernel), where
    the padded grid of :func:`_plane` is mostly padding and its per-plane setup costs more than
    the arithmetic (``SMALL_MAP``)."""
    c, h, wd, oh, ow, kh, kw, pt, pl, s = (dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6], dims[7],
                                           dims[8], dims[9])
    has_z = z.shape[0] > 0
    for p in range(planes):
        ch = p % c
        xb = p * h * wd
        wb = ch * kh * kw
        yb = p * oh * ow
        bv = bias[ch]
        for oy in range(oh):
            iy0 = oy * s - pt
            k0, k1 = max(0, -iy0), min(kh, h - iy0)
            for ox in range(ow):
                ix0 = ox * s - pl
                j0, j1 = max(0, -ix0), min(kw, wd - ix0)
                acc = bv
                for ky in range(k0, k1):
                    xr = uint64(xb + (iy0 + ky) * wd + ix0)
                    wr = uint64(wb + ky * kw)
                    for kx in range(uint64(j0), uint64(j1)):
                        acc += w[wr + kx] * x[xr + kx]
                o = uint64(yb + oy * ow + ox)
                if has_z:
                    acc += z[o]
                y[o] = activate_wide(acc, act, alpha, beta)


#: output positions per plane up to which a layer on one thread runs :func:`depthwise_small`;
#: measured at 1 thread (us per call, grid / small): 2x2 outputs under a 5x5 kernel, 8 x 64
#: planes 56.2 / 17.5, 8 x 48 stride 2 49.3 / 18.4, 1 x 64 8.4 / 3.3; 4x4 outputs lose (3x3, 8
#: x 32 planes 27.0 / 32.4, 1 x 32 4.7 / 5.2), 8x8 7x (30.7 / 207)
SMALL_MAP = 4
#: fewest channels for :mod:`kernels_depthwise_channels` (a vector of 16 float32 half empty
#: below); from ``CHANNELS_FULL_C`` it also takes the maps of at most ``SMALL_MAP`` outputs
CHANNELS_MIN_C = 16
CHANNELS_FULL_C = 32
#: output positions per plane up to which a one-thread layer runs the channels kernel:
#: (3x3-kernel layers of 16-31 channels, of 32 and more, kernels of 25 taps and more).
#: Measured after its register tiles (session 50; 1 thread, batch 1, us channels / grid):
#: 3x3, 16 channels 7x7 0.96, 14x14 1.06; 32 channels 14x14 0.83, 16x16 0.92, 28x28 1.14;
#: 64-256 channels 14x14 0.73-0.82, 28x28 1.04-1.74; 5x5, 16-256 channels 16x16 0.60-0.75,
#: 28x28 0.70-1.07; 8 channels lose everywhere (1.1-2.3). bench/README.md "Session 50".
CHANNELS_MAX_POSITIONS = (49, 196, 400)


def channels_max_positions(c: int, taps: int) -> int:
    """The largest output map (positions) the channels kernel takes for ``c`` channels and a
    kernel of ``taps`` taps (:data:`CHANNELS_MAX_POSITIONS`)."""
    narrow, wide, large_kernel = CHANNELS_MAX_POSITIONS
    if taps >= 25:
        return large_kernel
    return wide if c >= CHANNELS_FULL_C else narrow


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_NO_Z = {dt: np.empty(0, dtype=dt) for dt in _FLOATS}


def fits(c: int, m: int, group: int, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
         begin: Sequence[int], end: Sequence[int]) -> bool:
    """Whether this kernel runs a layer: 2-D, depthwise (one input channel per group, one
    output channel per input channel), stride 1 or 2 on both axes, undilated, pads >= 0."""
    return (len(kernel) == 2 and group == c == m and tuple(strides) in ((1, 1), (2, 2))
            and tuple(dilations) == (1, 1) and min(begin) >= 0 and min(end) >= 0)


def kernel_kind(planes: int, c: int, oh: int, ow: int, count: int, taps: int = 9) -> str:
    """Which kernel runs a layer on one thread's worth of work: ``channels`` (vectorized across
    channels, :mod:`kernels_depthwise_channels`) on maps up to :func:`channels_max_positions`
    with channels to fill vectors, ``small`` (per-output scalar loops) on the smallest maps
    left (and those of fewer than ``CHANNELS_FULL_C`` channels), else ``grid`` (one plane at
    a time on a padded grid). Layers split over threads always take ``grid``."""
    if count > 1:
        return "grid"
    positions = oh * ow
    tiny = positions <= SMALL_MAP
    if c >= CHANNELS_MIN_C and positions <= channels_max_positions(c, taps) and (c >= CHANNELS_FULL_C or not tiny):
        return "channels"
    return "small" if tiny else "grid"


class DepthwiseCall:
    """One depthwise layer's call for one input shape (:func:`fits`; ``stride`` 1 or 2 on
    both axes), prepared: the kernel (:func:`kernel_kind`), geometry, thread count and
    overload are settled once; ``activation_done`` when its store applied the ``store``
    activation, one the other calls leave to a pass after them. Callers pass ``x``
    C-contiguous of ``dtype`` and ``z`` None or a C-contiguous array of ``out_shape`` and
    ``dtype`` (:meth:`accepts`)."""

    __slots__ = ("_count", "_fn", "_head", "_kind", "_rest", "_scratch", "_shares", "activation_done", "dims",
                 "dtype", "out_shape", "shape")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, w: np.ndarray, bias: np.ndarray,
                 begin: Sequence[int], out_sp: Sequence[int], act: int, alpha: float, beta: float,
                 nthreads: int, stride: int = 1, store: tuple[int, float, float] | None = None) -> None:
        n, c, h, wd = shape
        kh, kw = int(w.shape[2]), int(w.shape[3])
        oh, ow = int(out_sp[0]), int(out_sp[1])
        self.shape, self.dtype = shape, dtype
        self.out_shape = (n, c, oh, ow)
        self.dims = np.array((c, h, wd, oh, ow, kh, kw, int(begin[0]), int(begin[1]), stride), dtype=np.int64)
        planes = n * c
        self._count = max(1, min(nthreads, planes, planes * oh * ow * kh * kw // kernels_conv.MAC_GRAIN))
        # a one-thread grid layer whose planes pay a hand-off each: split on the native pool
        # (such a layer stays on the grid kernel: the channels kernel runs on one thread)
        native_split = 1
        if self._count == 1 and nthreads > 1 and threads.native():
            native_split = max(1, min(nthreads, planes, planes * oh * ow * kh * kw // NATIVE_MACS_PER_SHARE))
        self._kind = kernel_kind(planes, c, oh, ow, 1, kh * kw)
        shares = max(self._count, native_split)
        if self._kind != "channels" or n == 1:  # a batch splits over its images on the channels kernel
            self._kind = kernel_kind(planes, c, oh, ow, shares, kh * kw)
        # the small-map kernels' stores also apply HardSwish (``store``: its
        # ``activations.activate_wide`` code), which the grid kernel leaves to a pass after it;
        # HardSigmoid's multiply-add would contract into one rounding under their fastmath
        # flags (other bits than the standalone op's): it stays after them
        self.activation_done = (store is not None and store[0] == ACT_HARD_SWISH
                                and self._kind in ("channels", "small"))
        if self.activation_done and store is not None:
            act, alpha, beta = store
        self._scratch = 0
        bias = np.ascontiguousarray(bias, dtype=dtype)
        scalars = (act, dtype.type(alpha), dtype.type(beta))
        self._shares: threads.Shares | None = None
        if self._kind == "channels":
            grid = kernels_depthwise_channels.grid_shape((oh, ow), (kh, kw), stride)
            image_shares = max(1, min(shares, n, planes * oh * ow * kh * kw // NATIVE_MACS_PER_SHARE))
            self._shares = threads.Shares(kernels_depthwise_channels.depthwise_channels, n, image_shares)
            self._scratch = kernels_depthwise_channels.scratch_size(c, grid, ow) * image_shares  # a slot a share
            self._head = (kernels_depthwise_channels.tap_weights(w, dtype), bias)
            self._rest: tuple[Any, ...] = (np.array((n, c, h, wd, oh, ow, kh, kw, int(begin[0]), int(begin[1]), stride,
                                                     *grid, image_shares), dtype=np.int64),
                                           kernels_depthwise_channels.tap_offsets((kh, kw), grid, c), *scalars)
            return
        self._head = (np.ascontiguousarray(w, dtype=dtype).reshape(-1), bias)
        if self._kind == "grid":  # planes in shares (one: the compiled loop called directly)
            self._shares = threads.Shares(grid_planes(kh, kw), planes, shares)
            self._rest = (self.dims, *scalars)
        else:
            self._rest = (self.dims, planes, *scalars)
        self._fn: Any = None

    def accepts(self, x: np.ndarray, z: np.ndarray | None) -> bool:
        return x.shape == self.shape and call_accepts(x, z, self.dtype, self.out_shape)

    def __call__(self, x: np.ndarray, z: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
        dt = self.dtype
        y = np.empty(self.out_shape, dtype=dt) if out is None else out
        flat_z = _NO_Z[dt] if z is None else z.reshape(-1)
        shares = self._shares
        if self._scratch:
            shares(x.reshape(-1), *self._head, flat_z, y.reshape(-1),  # type: ignore[misc]
                   scratch("depthwise.channels", self._scratch, dt), *self._rest)
        elif shares is not None:
            shares(x.reshape(-1), *self._head, flat_z, y.reshape(-1), *self._rest)
        else:
            args = (x.reshape(-1), *self._head, flat_z, y.reshape(-1), *self._rest)
            fn = self._fn
            if fn is None:
                fn = self._fn = direct.overload(depthwise_small, args)
            fn(*args)
        return y
