"""Compiled direct 2-D convolution, NCHW, any group, with FusedConv's epilogue in the same pass.

Why direct: on few channels per group (depthwise, grouped, the tiny exporter CNNs' 8-16
channel layers) im2col + GEMM is mostly copies and per-call overhead. Here the input is
zero-padded and split by stride phase once per call (for stride 2, the even and odd rows and
columns as four grids), so that each kernel position reads one contiguous run of its phase
for a whole output plane: every output plane is accumulated in place, one (input channel,
kernel position) at a time, by one long unit-stride loop that LLVM vectorizes, its operands
in L1 on small maps. Indices are unsigned: numba then skips its negative-index wraparound,
which otherwise keeps LLVM from vectorizing (10x on a 256-element loop). Bias, an optional
residual Z of the output's shape and the activations that are exact elementwise ops (Relu,
LeakyRelu, Clip) are applied to the plane while it is still in cache. One compiled
specialization per dtype (float32/float64), none per shape. ``use_jit`` in ops/conv.py
decides which layers come here (measured rule).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit, prange, uint64

from . import (
    direct,
    kernel_cache,  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
)
from .activations import activate
from .threads import GRAIN, serial_twin, use

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

#: multiply-adds per thread below which a layer runs on fewer threads: measured on 2 cores
#: right after a BLAS call (depthwise 3x3; bench/conv_paths.py --jit-grain):
#: 1.8 M multiply-adds 0.28 ms on 1 thread, 0.31 on 2; 3.6 M 0.37 / 0.38; 10.8 M 2.1 / 1.3
#: (load ~1.3; at load ~2, with the second core busy, two threads never won up to 10.8 M)
MAC_GRAIN = 1 << 22


@njit(cache=True, nogil=True, boundscheck=False)
def _pad_plane(x, xp, dims, p):  # pragma: no cover - compiled
    """Input plane ``p`` (= batch * C + channel), zero-padded and split by stride phase into
    ``xp``: phase (pr, pc) is the (hq, wq) grid of padded elements [i * sh + pr, j * sw + pc]
    (``dims``: H, W, hq, wq, sh, sw, pad top, pad left)."""
    h, wd, hq, wq, sh, sw, pt, pl = dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6], dims[7]
    xb = p * h * wd
    pb = p * sh * sw * hq * wq
    for pr in range(sh):
        for pc in range(sw):
            # phase columns j whose input column j * sw + pc - pl lies in [0, W): [j0, j1)
            j0 = min(wq, max(0, (pl - pc + sw - 1) // sw))
            j1 = min(wq, max(j0, (wd + pl - pc + sw - 1) // sw))
            for i in range(hq):
                rb = uint64(pb + ((pr * sw + pc) * hq + i) * wq)
                iy = i * sh + pr - pt
                if iy < 0 or iy >= h:
                    for j in range(uint64(wq)):
                        xp[rb + j] = 0.0
                    continue
                for j in range(uint64(j0)):
                    xp[rb + j] = 0.0
                sb = uint64(xb + iy * wd + j0 * sw + pc - pl)
                xr = rb + uint64(j0)
                if sw == 1:
                    for j in range(uint64(j1 - j0)):
                        xp[xr + j] = x[sb + j]
                else:
                    swu = uint64(sw)
                    for j in range(uint64(j1 - j0)):
                        xp[xr + j] = x[sb + j * swu]
                for j in range(uint64(j1), uint64(wq)):
                    xp[rb + j] = 0.0


@njit(cache=True, nogil=True)
def _offsets(dims):  # pragma: no cover - compiled
    """Per kernel position, its offset into an input plane's phase grids: computed once per
    call (integer divisions cost ~30 cycles, too much per plane on 7x7 maps)."""
    hq, wq, kh, kw, sh, sw, dh, dw = dims[2], dims[3], dims[6], dims[7], dims[10], dims[11], dims[12], dims[13]
    offs = np.empty(kh * kw, dtype=np.int64)
    for ki in range(kh):
        ri = ki * dh
        for kj in range(kw):
            cj = kj * dw
            offs[ki * kw + kj] = (((ri % sh) * sw + cj % sw) * hq + ri // sh) * wq + cj // sw
    return offs


#: the update loops' vector width in elements: spans are rounded up to it (``_rounded``)
LANES = 16


@njit(cache=True, nogil=True, inline="always")
def _rounded(span):  # pragma: no cover - compiled
    return (span + LANES - 1) // LANES * LANES


@njit(cache=True, nogil=True, fastmath={"contract"}, boundscheck=False)
def _flat_block(xp, w, bias, z, y, dims, offs, acc, t, act, alpha, beta):  # pragma: no cover - compiled
    """Output planes of block ``t`` (``mb`` consecutive output channels of one batch item)
    on the phase grid of width wq: every kernel position is one offset into its stride phase
    of the padded plane, so each (input channel, kernel position) is a single long unit-stride
    loop (vectorized) updating ``mb`` planes from one load of the input; the grid's wq - ow
    extra columns per row are dropped when the epilogue stores the planes (``dims``: C, plane
    size, hq, wq, M, C/G, kh, kw, oh, ow, sh, sw, dh, dw, G, mb; ``offs``: :func:`_offsets`)."""
    c, psize, wq, m, cg, kh, kw, oh, ow, group, mb = (
        dims[0], dims[1], dims[3], dims[4], dims[5], dims[6], dims[7], dims[8], dims[9], dims[14], dims[15])
    blocks = m // mb
    b = t // blocks
    oc0 = (t - b * blocks) * mb
    g = oc0 // (m // group)
    span = (oh - 1) * wq + ow  # grid positions up to the last kept one
    # with ``whole`` (dims[16]) the update loops run over whole vectors, the span rounded up
    # to LANES (see _geometry); the extra lanes read the next grid positions (or the buffer's
    # zeroed tail) and are never stored
    whole = dims[16] != 0
    gl = uint64(_rounded(span)) if whole else uint64(span)
    # this block's accumulators: mb rows of ``gl`` in the call's buffer (one allocation a
    # call, not one a plane: ~0.1 us each, as much as a 7x7 depthwise plane's arithmetic)
    a0 = uint64(t * mb) * gl
    a1, a2, a3 = a0 + gl, a0 + 2 * gl, a0 + 3 * gl
    # the four rows as separate 1-D views: LLVM then vectorizes the update loop without
    # runtime overlap checks between rows of one buffer (2.6x the multiply-adds per second)
    r0, r1, r2, r3 = acc[a0:a1], acc[a1:a2], acc[a2:a3], acc[a3:a3 + gl]
    for j in range(mb):
        bv = bias[oc0 + j]
        aj = a0 + uint64(j) * gl
        for q in range(gl):
            acc[aj + q] = bv
    ks = kh * kw
    for ci in range(cg):
        xb = (b * c + g * cg + ci) * psize
        for k in range(ks):
            xo = uint64(xb + offs[k])
            if mb == 4 and whole:
                w0 = w[((oc0 + 0) * cg + ci) * ks + k]
                w1 = w[((oc0 + 1) * cg + ci) * ks + k]
                w2 = w[((oc0 + 2) * cg + ci) * ks + k]
                w3 = w[((oc0 + 3) * cg + ci) * ks + k]
                for v in range(gl // uint64(LANES)):  # whole vectors: a fixed 16-lane inner loop
                    vb = v * uint64(LANES)
                    for q in range(uint64(LANES)):
                        xv = xp[xo + vb + q]
                        r0[vb + q] += w0 * xv
                        r1[vb + q] += w1 * xv
                        r2[vb + q] += w2 * xv
                        r3[vb + q] += w3 * xv
            elif mb == 4:
                w0 = w[((oc0 + 0) * cg + ci) * ks + k]
                w1 = w[((oc0 + 1) * cg + ci) * ks + k]
                w2 = w[((oc0 + 2) * cg + ci) * ks + k]
                w3 = w[((oc0 + 3) * cg + ci) * ks + k]
                for q in range(gl):
                    xv = xp[xo + q]
                    r0[q] += w0 * xv
                    r1[q] += w1 * xv
                    r2[q] += w2 * xv
                    r3[q] += w3 * xv
            else:
                for j in range(mb):
                    wv = w[((oc0 + j) * cg + ci) * ks + k]
                    aj = a0 + uint64(j) * gl
                    for q in range(gl):
                        acc[aj + q] += wv * xp[xo + q]
    plane = oh * ow
    for j in range(mb):
        yb = (b * m + oc0 + j) * plane
        for oy in range(oh):
            rb = uint64(yb + oy * ow)
            ab = a0 + uint64(j) * gl + uint64(oy * wq)
            for ox in range(uint64(ow)):
                v = acc[ab + ox]
                if z.shape[0] > 0:
                    v += z[rb + ox]
                v = activate(v, act, alpha, beta)
                y[rb + ox] = v


@njit(parallel=True, cache=True, nogil=True)
def flat_parallel(x, xp, w, bias, z, y, pdims, dims, acc, planes, blocks, act, alpha, beta):  # pragma: no cover
    offs = _offsets(dims)
    for p in prange(planes):
        _pad_plane(x, xp, pdims, p)
    tail = xp.shape[0] - LANES
    for i in range(LANES):  # read by the last plane's rounded loops (finite, never stored)
        xp[tail + i] = 0.0
    for t in prange(blocks):
        _flat_block(xp, w, bias, z, y, dims, offs, acc, t, act, alpha, beta)


flat_serial = serial_twin(flat_parallel)  # the same loops without a parallel launch


_NO_Z = {dt: np.empty(0, dtype=dt) for dt in _FLOATS}


#: per-geometry index arrays of :func:`run_conv2d` (pdims, dims, sizes): building them is
#: two ``np.array`` calls and a dozen integer ops, as long as a tiny layer's arithmetic
_GEOMETRY: dict[tuple, tuple[np.ndarray, np.ndarray, tuple[int, int, int]]] = {}
_GEOMETRY_MAX = 512


def block_layout(wshape: tuple[int, ...], strides: Sequence[int], dilations: Sequence[int], out_sp: Sequence[int],
                 group: int) -> tuple[int, int, int, int, bool]:
    """``(mb, hq, wq, gl, whole)``: output channels per block, the phase grid's size, an
    accumulator row's length and whether the update loops run over whole vectors. ``whole``
    where the span rounded up to LANES adds at most a quarter: a scalar remainder (14 of an
    8x8 map's 78 grid positions) cost as much as the vector part (8 -> 8 channels on 8x8: 6.1
    -> 5.0 us a call, the 3 -> 8 stride-2 stem on 32x32 7.5 -> 6.4); 4x4 maps (22 -> 32) lose.
    Blocks of one channel (depthwise layers) keep exact spans: the same whole-vector loop
    there made the exporter efficientnet 1.4x and convnext 1.3x slower (A/B in one process)."""
    m, kh, kw = wshape[0], wshape[2], wshape[3]
    oh, ow = int(out_sp[0]), int(out_sp[1])
    hq, wq = oh + (kh - 1) * dilations[0] // strides[0], ow + (kw - 1) * dilations[1] // strides[1]
    mb = 4 if (m // group) % 4 == 0 else 1
    span = (oh - 1) * wq + ow
    rounded = (span + LANES - 1) // LANES * LANES
    whole = mb == 4 and (rounded - span) * 4 <= span
    return mb, hq, wq, (rounded if whole else span), whole


def _geometry(xshape: tuple[int, ...], wshape: tuple[int, ...], strides: tuple[int, ...],
              dilations: tuple[int, ...], begin: tuple[int, ...], out_sp: tuple[int, ...],
              group: int) -> tuple[np.ndarray, np.ndarray, tuple[int, int, int]]:
    n, c, h, wd = xshape
    m, cg, kh, kw = wshape
    oh, ow = out_sp
    sh, sw = strides
    mb, hq, wq, gl, whole = block_layout(wshape, strides, dilations, out_sp, group)
    pdims = np.array((h, wd, hq, wq, sh, sw, begin[0], begin[1]), dtype=np.int64)
    dims = np.array((c, sh * sw * hq * wq, hq, wq, m, cg, kh, kw, oh, ow, sh, sw, dilations[0], dilations[1], group,
                     mb, whole), dtype=np.int64)
    # xp keeps LANES zeroed elements past the last plane for the rounded loops' extra reads
    sizes = (n * c * sh * sw * hq * wq + LANES, n * m * gl, n * m // mb)  # xp, acc, blocks
    return pdims, dims, sizes


def run_conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray, z: np.ndarray | None,
               strides: tuple[int, ...], dilations: tuple[int, ...], begin: list[int], out_sp: list[int],
               group: int, act: int, alpha: float, beta: float, nthreads: int) -> np.ndarray:
    """``act(conv(x, w) + bias + z)`` for a float32/float64 4-D ``x`` whose dtype ``w``
    and ``bias`` (M,) share; ``z`` (the output's shape and dtype) or None; pads >= 0 (the
    end pads are implied by ``out_sp``). The caller checked the shape class."""
    key = (x.shape, w.shape, tuple(strides), tuple(dilations), tuple(begin), tuple(out_sp), group)
    found = _GEOMETRY.get(key)
    if found is None:
        if len(_GEOMETRY) >= _GEOMETRY_MAX:
            _GEOMETRY.clear()
        found = _GEOMETRY[key] = _geometry(*key)
    pdims, dims, (xp_size, acc_size, blocks) = found
    n, m = x.shape[0], w.shape[0]
    y = np.empty((n, m, out_sp[0], out_sp[1]), dtype=x.dtype)
    zz = _NO_Z[x.dtype] if z is None else np.ascontiguousarray(z).reshape(-1)
    xp = np.empty(xp_size, dtype=x.dtype)
    acc = np.empty(acc_size, dtype=x.dtype)
    args = (np.ascontiguousarray(x).reshape(-1), xp, w.reshape(-1), bias, zz, y.reshape(-1), pdims, dims, acc,
            n * x.shape[1], blocks, act, x.dtype.type(alpha), x.dtype.type(beta))
    count = _threads(nthreads, blocks, y.size * w[0].size)
    if count == 1:
        flat_serial(*args)
    else:
        use(count, count * GRAIN)
        flat_parallel(*args)
    return y


def _threads(nthreads: int, blocks: int, macs: int) -> int:
    return max(1, min(nthreads, blocks, macs // MAC_GRAIN))


def layer_sizes(shape: Sequence[int], w_shape: Sequence[int], wq: int,
                out_sp: Sequence[int]) -> tuple[int, int, int, int]:
    """``(images, im2col rows, output channels, grid positions an image)`` of a group-1 2-D
    layer on a phase grid of width ``wq``: what the GEMM paths' ``gains`` rules read."""
    positions = (int(out_sp[0]) - 1) * wq + int(out_sp[1])
    return int(shape[0]), int(shape[1] * w_shape[2] * w_shape[3]), int(w_shape[0]), positions


def call_accepts(x: np.ndarray, z: np.ndarray | None, dtype: np.dtype, out_shape: tuple[int, ...]) -> bool:
    """What every prepared conv call (this module's, ``kernels_pointwise``'s and
    ``kernels_conv_gemm``'s) takes: ``x`` C-contiguous of ``dtype``, ``z`` None or a
    C-contiguous array of ``out_shape`` and ``dtype``."""
    return (x.dtype == dtype and x.flags.c_contiguous
            and (z is None or (type(z) is np.ndarray and z.shape == out_shape and z.dtype == dtype
                               and z.flags.c_contiguous)))


class PreparedConvCall:
    """What every prepared conv call shares (``ops/conv._PreparedCalls``): :meth:`accepts` an
    input and residual :func:`call_accepts` takes; subclasses set ``dtype`` and ``out_shape``."""

    __slots__ = ()
    dtype: np.dtype
    out_shape: tuple[int, ...]

    def accepts(self, x: np.ndarray, z: np.ndarray | None) -> bool:
        return call_accepts(x, z, self.dtype, self.out_shape)


class Conv2dCall(PreparedConvCall):
    """:func:`run_conv2d` for one input shape of one layer, prepared: the index arrays,
    buffer sizes, weights, epilogue and thread count are settled once, and the compiled
    overload is looked up on the first call (``direct.overload``), so a repeated shape pays
    three allocations and the compiled call. On the exporter CNNs' 8-16 channel layers that
    is ~3 us instead of ~15 us of Python around the kernel.

    Callers pass ``x`` C-contiguous of ``dtype`` and ``shape``, and ``z`` None or a
    C-contiguous array of ``out_shape`` and ``dtype`` (:meth:`accepts` checks both)."""

    __slots__ = ("_fn", "_head", "_rest", "_tail", "acc_size", "count", "dtype", "out_shape", "shape", "xp_size")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, w: np.ndarray, bias: np.ndarray,
                 strides: tuple[int, ...], dilations: tuple[int, ...], begin: Sequence[int],
                 out_sp: Sequence[int], group: int, act: int, alpha: float, beta: float, nthreads: int) -> None:
        self.shape, self.dtype = shape, dtype
        key = (shape, w.shape, tuple(strides), tuple(dilations), tuple(begin), tuple(out_sp), group)
        pdims, dims, (self.xp_size, self.acc_size, blocks) = _geometry(*key)  # type: ignore[arg-type]
        n, m = shape[0], w.shape[0]
        self.out_shape = (n, m, int(out_sp[0]), int(out_sp[1]))
        self.count = _threads(nthreads, blocks, math.prod(self.out_shape) * w[0].size)
        self._head = (w.reshape(-1), bias)
        self._tail = (pdims, dims)
        self._fn: Any = None
        self._rest = (n * shape[1], blocks, act, dtype.type(alpha), dtype.type(beta))

    def __call__(self, x: np.ndarray, z: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
        dt = self.dtype
        y = np.empty(self.out_shape, dtype=dt) if out is None else out
        args = (x.reshape(-1), np.empty(self.xp_size, dtype=dt), *self._head,
                _NO_Z[dt] if z is None else z.reshape(-1), y.reshape(-1), *self._tail,
                np.empty(self.acc_size, dtype=dt), *self._rest)
        fn = self._fn
        if fn is None:
            fn = self._fn = direct.overload(flat_serial if self.count == 1 else flat_parallel, args)
        if self.count > 1:
            use(self.count, self.count * GRAIN)
        fn(*args)
        return y
