"""Group-1 float32 2-D convolutions as an implicit GEMM on the padded phase grid, on the
few-rows register-tiled kernel (``sgemm_ir``'s ``igemm``): no im2col matrix at all.

Why: the grid GEMM (``kernels_conv_gemm``) pads and phase-splits every input plane, copies
``C * kh * kw`` im2col rows out of it, and runs one BLAS product per image, inside which
OpenBLAS packs those columns once more. With the exporter CNNs' few output channels (16-64)
the copies and the packing were most of a layer: the bench CNN's 16 -> 32 stride-2 layer at
batch 16 ran at ~26 G multiply-adds/s, its im2col alone ~0.3 ms of 0.67. On the phase grid
every im2col row is already one contiguous run (kernels_conv_gemm's docstring): row
``(channel, kernel position)`` of image ``i`` starts ``rowoff = channel * plane + offset(kernel
position)`` floats into the image's grid. ``igemm`` reads B's rows through that table, 64
columns (four vectors) at a time, so the GEMM streams the grid itself while the weights
are the few rows of its register tiles. It computes the grid's extra columns (``wq - ow``
per output row), which the compiled store drops while adding the bias and the residual and
applying the activation.

Two grid layouts. Image-major (each image's grid after the last; an image's columns are its
grid positions rounded up to 16): for maps whose span is long. Interleaved (position-major,
image-minor: column ``q * n + i`` is position ``q`` of image ``i``) where rounding each image's
span up would add more than an eighth (an 8x8 stride-2 layer: 19 positions, 32 columns): the
batch's columns form one run. Measured in bench/README.md "Session 28".

Image-major grids whose rows are a vector wide or more run ``implicit_fused_ir``'s drivers
instead of ``igemm`` and the store pass (:func:`fused_driver`): the sums stored straight onto
the output planes with the bias, residual and activation, so the product (3.2 MB for an RGB
stem at 224x224) never goes through memory; ``fgemm_rows`` (row tiles outermost, each plane
written as one run) for 32+ output channels on a grid up to 1 MiB, else ``fgemm`` (column
tiles outermost) for one K block; the same bits (session 38).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit, uint64

from . import (
    blas_spin,
    config,
    direct,
    implicit_fused_ir,
    kernel_cache,  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
    kernels_sgemm,
    llvm_module,
    native_pool,
    native_shares,
    threads,
)
from .activations import activate
from .kernels_conv import PreparedConvCall, _geometry, _offsets, _pad_plane, layer_sizes
from .kernels_conv_gemm import _store_plane
from .scratch import scratch
from .sgemm_ir import LANES, TILE_ROWS
from .simd import SPAN, deinterleave32
from .threads import run_shares

_F32 = np.dtype(np.float32)
_NO_Z = np.empty(0, dtype=_F32)

#: fewest im2col rows (C * kh * kw) for this path: with fewer, every register tile reloads
#: and stores its accumulators after a few multiply-adds (an RGB 3x3 stem, K = 27, still
#: gains: 3 -> 16 on 32x32 at batch 16 0.91x the grid GEMM's time)
MIN_DEPTH = 16
#: most output channels (the GEMM's rows): the grid is read once per six rows, and with many
#: rows OpenBLAS's blocked kernel wins its packing back
MAX_ROWS = 96
#: fewest multiply-adds worth the path
MIN_MACS = 1 << 20
#: multiply-adds per thread below which a layer stays on one thread (~20 us of work: waking the
#: helper costs a few; the bench CNN's RGB stem at batch 16, 7.5 M, gains a second thread)
MACS_PER_THREAD = 1 << 20


#: narrowest grid row for ``fgemm`` (a vector then lies on at most two output rows)
FUSED_MIN_WIDTH = LANES
#: deepest im2col (C * kh * kw) for ``fgemm``: one K block. Its column tiles outermost re-read
#: all the weights for every column tile, where ``igemm``'s K blocks outermost keep one block
#: in L1: densenet121's 128 -> 32 3x3 layers (K = 1152) made the model 1.025-1.03x slower on
#: ``fgemm`` (bench/README.md, session 38). Measured when ``fgemm`` still blocked K through a
#: product buffer; summing the whole K in one pass it ran the 7x7 stem 1486 us against 1847.
#: Measured again with the whole-K ``fgemm`` (session 39): on the bench models it decides only
#: densenet121's six 128 -> 32 3x3 layers on 56x56 (the stems take ``fgemm_rows``), and no
#: limit there read 1.008x the model's time, 64 0.979-1.017x on resnet50, which it does not
#: touch: within the noise, so it stays
FUSED_MAX_DEPTH = kernels_sgemm.IMPLICIT_KC

#: fewest output channels, and largest grid (one image's, bytes), for ``fgemm_rows`` (row tiles
#: outermost, each output plane written as one run, the grid re-read from L2 a row tile).
#: One thread, us, a 64 MB touch before each call, fgemm / fgemm_rows / two-pass
#: (``bench/gemm_orders.py``): squeezenet's stem 3 -> 64 643 / 518 / 801, a 16 -> 64 3x3 on
#: 56x56 576 / 428 / 666, the 7x7 RGB stem 3658 / 1737 / 2406; but 3 -> 24 (shufflenet's stem)
#: 253 / 306, and densenet121's 128 -> 32 3x3 (a 1.7 MB grid) 2099 / 1819 / 1783
#: (bench/README.md, session 38)
ROWS_OUTER_MIN_ROWS = 32
ROWS_OUTER_MAX_GRID = 1 << 20

#: ``fgemm`` / ``fgemm_rows``: the implicit GEMM storing onto the output planes with the
#: epilogue (``implicit_fused_ir``), for grids of rows at least FUSED_MIN_WIDTH wide
_FUSED = llvm_module.LazyModule(
    "the implicit convolution GEMM with its store", llvm_module.AVX512, implicit_fused_ir.module_ir,
    {name: [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 4 + [ctypes.c_void_p] * 4 for name in ("fgemm", "fgemm_rows")},
    config.compiled_code_dir)


def support() -> str | None:
    """None when the kernel can run here (llvmlite and AVX-512: its store's masks and tiles
    were measured there only), else why not."""
    return llvm_module.missing(llvm_module.AVX512)


def fused_driver(m: int, depth: int, grid_floats: int, wq: int, interleaved: bool) -> str | None:
    """The ``implicit_fused_ir`` driver of a layer of ``m`` output channels, ``depth`` im2col
    rows and one image's grid of ``grid_floats``, rows ``wq`` wide: ``fgemm_rows`` (many
    channels, a grid that fits L2), ``fgemm`` (one K block), or None (``igemm`` and the store
    pass: the interleaved layout, grid rows narrower than a vector, deep layers on big grids)."""
    if interleaved or wq < max(LANES, FUSED_MIN_WIDTH):
        return None
    if m >= ROWS_OUTER_MIN_ROWS and 4 * grid_floats <= ROWS_OUTER_MAX_GRID:
        return "fgemm_rows"
    return "fgemm" if depth <= FUSED_MAX_DEPTH else None


def gains(n: int, ck: int, m: int, positions: int, nthreads: int = 1) -> bool:
    """Whether a layer of ``n`` images, ``ck`` im2col rows, ``m`` output channels and
    ``positions`` grid positions an image is this path's (module docstring). On more than one
    thread a single image splits its output channels, each thread padding the whole input:
    only where OpenBLAS's idle workers can be put to sleep meanwhile (``blas_spin``): next to
    a spinning worker the light models lost 4-11 % that way against BLAS's threads
    (bench/README.md, session 28); with it asleep an RGB stem took 0.65-0.82x the grid GEMM's
    time (session 32)."""
    return (support() is None and ck >= MIN_DEPTH and m <= MAX_ROWS
            and n * positions * ck * m >= MIN_MACS and (n > 1 or nthreads == 1 or blas_spin.available()))


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _pad_plane_pairs(x, xp, pdims, p):  # pragma: no cover - compiled
    """``_pad_plane`` for a layer of column stride 2: each input row is split into its even and
    odd columns (the two column phases) by vector shuffles (``simd.deinterleave32``) rather
    than the scalar strided loads numba compiles the general loop to."""
    h, wd, hq, wq, sh, pt, pl = pdims[0], pdims[1], pdims[2], pdims[3], pdims[4], pdims[6], pdims[7]
    xb = p * h * wd
    pb = p * sh * 2 * hq * wq
    # input column ix lands in phase (ix + pl) % 2 at column (ix + pl) // 2: the even columns
    # in phase pe from column je on, the odd ones in phase po from jo on
    pe, je = pl % 2, pl // 2
    po, jo = (pl + 1) % 2, (pl + 1) // 2
    n_even = max(0, min((wd + 1) // 2, wq - je))
    n_odd = max(0, min(wd // 2, wq - jo))
    both = min(n_even, n_odd)
    for pr in range(sh):
        for i in range(hq):
            iy = i * sh + pr - pt
            re = uint64(pb + ((pr * 2 + pe) * hq + i) * wq)
            ro = uint64(pb + ((pr * 2 + po) * hq + i) * wq)
            if iy < 0 or iy >= h:
                for j in range(uint64(wq)):
                    xp[re + j] = 0.0
                    xp[ro + j] = 0.0
                continue
            for j in range(uint64(je)):
                xp[re + j] = 0.0
            for j in range(uint64(je + n_even), uint64(wq)):
                xp[re + j] = 0.0
            for j in range(uint64(jo)):
                xp[ro + j] = 0.0
            for j in range(uint64(jo + n_odd), uint64(wq)):
                xp[ro + j] = 0.0
            src = uint64(xb + iy * wd)
            de, do = re + uint64(je), ro + uint64(jo)
            t = 0
            while t + SPAN // 2 <= both:
                deinterleave32(x, src + uint64(2 * t), xp, de + uint64(t), do + uint64(t))
                t += SPAN // 2
            for q in range(t, n_even):
                xp[de + uint64(q)] = x[src + uint64(2 * q)]
            for q in range(t, n_odd):
                xp[do + uint64(q)] = x[src + uint64(2 * q + 1)]


@njit(cache=True, nogil=True)
def pad_planes(x, xp, pdims, first, last):  # pragma: no cover - compiled
    """Input planes [first, last) zero-padded and split by stride phase (``_pad_plane``),
    image-major; column stride 2 by vector shuffles (``_pad_plane_pairs``)."""
    if pdims[5] == 2:
        for p in range(first, last):
            _pad_plane_pairs(x, xp, pdims, p)
    else:
        for p in range(first, last):
            _pad_plane(x, xp, pdims, p)


@njit(cache=True, nogil=True, boundscheck=False)
def pad_planes_interleaved(x, xp, pdims, c, n, first, last):  # pragma: no cover - compiled
    """Input planes [first, last) (= image * C + channel) zero-padded and split by stride phase
    as ``_pad_plane`` does, into the interleaved layout: grid position ``q`` of channel ``ch``
    of image ``i`` at ``(ch * plane + q) * n + i``."""
    h, wd, hq, wq, sh, sw, pt, pl = pdims[0], pdims[1], pdims[2], pdims[3], pdims[4], pdims[5], pdims[6], pdims[7]
    plane = sh * sw * hq * wq
    nu = uint64(n)
    for p in range(first, last):
        image = p // c
        ch = p - image * c
        xb = p * h * wd
        for pr in range(sh):
            for pc in range(sw):
                j0 = min(wq, max(0, (pl - pc + sw - 1) // sw))
                j1 = min(wq, max(j0, (wd + pl - pc + sw - 1) // sw))
                for i in range(hq):
                    rb = uint64(((ch * plane + ((pr * sw + pc) * hq + i) * wq) * n) + image)
                    iy = i * sh + pr - pt
                    if iy < 0 or iy >= h:
                        for j in range(uint64(wq)):
                            xp[rb + j * nu] = 0.0
                        continue
                    for j in range(uint64(j0)):
                        xp[rb + j * nu] = 0.0
                    sb = uint64(xb + iy * wd + j0 * sw + pc - pl)
                    swu = uint64(sw)
                    for j in range(uint64(j1 - j0)):
                        xp[rb + (uint64(j0) + j) * nu] = x[sb + j * swu]
                    for j in range(uint64(j1), uint64(wq)):
                        xp[rb + j * nu] = 0.0


@njit(cache=True, nogil=True)
def store_planes(acc, bias, z, y, m, cols, wq, oh, ow, act, alpha, beta, first, last):  # pragma: no cover
    """Output planes [first, last) (= image * M + channel) from the product's rows, ``cols``
    floats each (the grid's positions, rounded up), with the bias, residual and activation;
    image-major."""
    for p in range(first, last):
        _store_plane(acc, bias, z, y, p, m, cols, wq, oh, ow, act, alpha, beta)


@njit(cache=True, nogil=True, boundscheck=False)
def store_planes_interleaved(acc, bias, z, y, m, n, cols, wq, oh, ow, act, alpha, beta, first,
                             last):  # pragma: no cover - compiled
    """As :func:`store_planes` from the interleaved product, for output channels [first, last)
    of every image: output ``(oy, ox)`` of plane ``(i, ch)`` is row ``ch``'s column ``(oy * wq +
    ox) * n + i``."""
    has_z = z.shape[0] > 0
    nu = uint64(n)
    for image in range(n):
        for ch in range(first, last):
            p = image * m + ch
            bv = bias[ch]
            for oy in range(oh):
                a = uint64(ch * cols + oy * wq * n + image)
                d = uint64((p * oh + oy) * ow)
                for ox in range(uint64(ow)):
                    v = acc[a + ox * nu] + bv
                    if has_z:
                        v += z[d + ox]
                    y[d + ox] = activate(v, act, alpha, beta)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def phase_grid(shape: Sequence[int], w_shape: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
               begin: Sequence[int], out_sp: Sequence[int]) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """A group-1 layer's padded phase grid (``kernels_conv._geometry``): the pad's sizes, the
    geometry, the grid's size in floats, and the offset of each im2col row (input channel,
    kernel position) into an image's grid: ``channel * plane + offset(kernel position)``."""
    key = (tuple(shape), tuple(w_shape), tuple(strides), tuple(dilations), tuple(begin), tuple(out_sp), 1)
    pdims, dims, (xp_size, _, _) = _geometry(*key)  # type: ignore[arg-type]
    offs = np.asarray(_offsets(dims), dtype=np.int64)
    rowoff = (np.arange(int(shape[1]), dtype=np.int64)[:, None] * int(dims[1]) + offs[None, :]).reshape(-1)
    return pdims, dims, int(xp_size), rowoff


def interleaves(n: int, span: int) -> bool:
    """Whether a batch of ``n`` images with ``span`` grid positions each takes the interleaved
    layout: when rounding each image's span up to 16 would add more than an eighth."""
    return n > 1 and _round_up(span, LANES) * 8 > span * 9


# argv of a share of one image's output channels on the native pool: the igemm, the input (address,
# size), the grids (base, one grid's size, shares, row tiles), pdims, the weights, rowoff, the
# accumulator (address, size), depth, cols, m, kc, xstep, bias, z (address, size), y (address,
# size), wq, oh, ow, act, alpha, beta (float64 bits), input planes, the compiled pad_planes and
# store_planes (native_shares.compiled_address: called by address, not linked in); the fused
# driver's address (``fgemm`` or ``fgemm_rows``; 0: igemm and store_planes), its parameters and
# geometry table
_ROWS_ARGV = 34


def _rows_share(argp, first, last):  # pragma: no cover - compiled (native_shares.share_address)
    """Row tiles [first, last) of a one-image layer: the whole input padded into this share's
    own grid, the product of those output channels, their store (the ``rows`` share of
    :meth:`ImplicitConvCall.__call__`, without the GIL)."""
    v = native_shares.carray(native_shares.i64_at(argp), (_ROWS_ARGV,))
    f = native_shares.carray(native_shares.f64_at(argp), (_ROWS_ARGV,))
    share = (first * v[5] + v[6] - 1) // v[6]  # bounds are total * t // shares: t back from first
    size = v[4]
    grid_at = v[3] + 4 * share * size
    xp = native_shares.carray(native_shares.f32_at(grid_at), (size,))
    for i in range(size - LANES, size):  # the last rounded-up columns read past the grid
        xp[i] = 0.0
    x = native_shares.carray(native_shares.f32_at(v[1]), (v[2],))
    native_shares.call_compiled(v[29], (x, xp, native_shares.carray(native_shares.i64_at(v[7]), (8,)), v[28] - v[28],
                                        v[28]))
    depth, cols, m = v[11], v[12], v[13]
    r0 = first * TILE_ROWS
    r1 = min(m, last * TILE_ROWS)
    if v[31] != 0:  # a fused driver: the product stored onto the output planes
        plane = v[23] * v[24]
        z_at = v[17] + 4 * r0 * plane if v[18] > 0 else 0
        native_shares.call_address12(v[31], v[8] + 4 * r0 * depth, v[9], grid_at, v[19] + 4 * r0 * plane, r1 - r0,
                                     depth, 1, cols, v[16] + 4 * r0, z_at, v[32], v[33])
        return
    native_shares.call_address13(v[0], v[8] + 4 * r0 * depth, v[9], grid_at, v[10] + 4 * r0 * cols, depth, cols,
                                 r1 - r0, depth, v[14], cols, 1, v[15], m * cols)
    native_shares.call_compiled(v[30], (native_shares.carray(native_shares.f32_at(v[10]), (v[21],)),
                                        native_shares.carray(native_shares.f32_at(v[16]), (m,)),
                                        native_shares.carray(native_shares.f32_at(v[17]), (v[18],)),
                                        native_shares.carray(native_shares.f32_at(v[19]), (v[20],)), m, cols, v[22],
                                        v[23], v[24], v[25], np.float32(f[26]), np.float32(f[27]), r0, r1))


@njit(cache=True, nogil=True)
def _point_rows(v, x, grids, acc, z, y):  # pragma: no cover - compiled
    """A ``_rows_share`` argv pointed at this call's arrays (the rest is the layer's template)."""
    v[1] = x.ctypes.data
    v[2] = x.size
    v[3] = grids.ctypes.data
    v[10] = acc.ctypes.data
    v[17] = z.ctypes.data
    v[18] = z.size
    v[19] = y.ctypes.data
    v[20] = y.size
    v[21] = acc.size


class ImplicitConvCall(PreparedConvCall):
    """One group-1 float32 layer for one input shape: ``act(conv(x, W) + bias + z)`` by the
    padded phase grid, the implicit GEMM and a compiled store (module docstring). The
    interface of ``kernels_conv_gemm.GridConvCall``."""

    __slots__ = ("_cols", "_count", "_fused", "_gemm", "_interleaved", "_kc", "_n", "_native", "_pad", "_pdims",
                 "_rowoff", "_store", "_store_tail", "_w", "_xstep", "bias", "dtype", "fused_driver", "out_shape",
                 "shape", "xp_size")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, w: np.ndarray, bias: np.ndarray,
                 strides: tuple[int, ...], dilations: tuple[int, ...], begin: Sequence[int],
                 out_sp: Sequence[int], act: int, alpha: float, beta: float, nthreads: int) -> None:
        n, c = shape[0], shape[1]
        m, _, kh, kw = w.shape
        self._pdims, dims, self.xp_size, rowoff = phase_grid(shape, w.shape, strides, dilations, begin, out_sp)
        oh, ow, wq, plane = int(out_sp[0]), int(out_sp[1]), int(dims[3]), int(dims[1])
        span = (oh - 1) * wq + ow
        self._interleaved = interleaves(n, span)
        if self._interleaved:  # one run of the batch's columns: one "image" for the kernel
            self._cols, self._rowoff, self._n = _round_up(span * n, LANES), rowoff * n, 1
        else:
            self._cols, self._rowoff, self._n = _round_up(span, LANES), rowoff, n
        # threads share the images of an image-major batch; else the output channels (row
        # tiles), each thread padding the whole input into its own grid (no wait between the
        # pad and the product: a few percent of the layer, done twice)
        units = n if self._n > 1 else -(-m // TILE_ROWS)
        self._xstep = c * plane
        self.shape, self.dtype = shape, dtype
        self.out_shape = (n, m, oh, ow)
        self._w = np.ascontiguousarray(w.reshape(m, c * kh * kw), dtype=_F32)
        self.bias = np.ascontiguousarray(bias, dtype=_F32)
        tail = (self._cols, wq, oh, ow, act, _F32.type(alpha), _F32.type(beta))
        self._store_tail = (m, n, *tail) if self._interleaved else (m, *tail)
        macs = self._n * m * self._w.shape[1] * self._cols
        self._count = max(1, min(nthreads, units, macs // MACS_PER_THREAD))
        self._gemm = kernels_sgemm.implicit_kernel()
        self._kc = kernels_sgemm.IMPLICIT_KC
        # the fused driver (its function, parameters, geometry table; :func:`fused_driver`):
        # the product stored onto the output planes, never through memory
        self._fused: tuple[Any, np.ndarray, np.ndarray] | None = None
        self.fused_driver = fused_driver(m, c * kh * kw, self._xstep, wq, self._interleaved)
        if self.fused_driver is not None:
            geo = dict(wq=wq, ow=ow, oh=oh, xstep=self._xstep, ystep=m * oh * ow, act=act)
            self._fused = (_FUSED.function(self.fused_driver), np.array([alpha, beta], dtype=_F32),
                           np.array([geo[f] for f in implicit_fused_ir.GEO_FIELDS], dtype=np.int64))
        self._pad: Any = None
        self._store: Any = None
        self._native: np.ndarray | None = None  # the native pool's argv template (_rows_template)

    @staticmethod
    def rows_outer(shape: tuple[int, ...], w_shape: tuple[int, ...], strides: Sequence[int],
                   dilations: Sequence[int], begin: Sequence[int], out_sp: Sequence[int]) -> bool:
        """Whether a layer this path takes would run ``fgemm_rows`` (:func:`fused_driver`)."""
        _, dims, _, _ = phase_grid(shape, w_shape, strides, dilations, begin, out_sp)
        n, c = int(shape[0]), int(shape[1])
        oh, ow, wq = int(out_sp[0]), int(out_sp[1]), int(dims[3])
        interleaved = interleaves(n, (oh - 1) * wq + ow)
        depth = c * int(w_shape[2]) * int(w_shape[3])
        return fused_driver(int(w_shape[0]), depth, c * int(dims[1]), wq, interleaved) == "fgemm_rows"

    @staticmethod
    def takes(shape: tuple[int, ...], w_shape: tuple[int, ...], dtype: np.dtype, wq: int,
              out_sp: Sequence[int], nthreads: int = 1) -> bool:
        """Whether a float32 layer is this path's on ``nthreads`` threads (:func:`gains`)."""
        return dtype == _F32 and gains(*layer_sizes(shape, w_shape, wq, out_sp), nthreads)

    def __call__(self, x: np.ndarray, z: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
        m, depth = self._w.shape
        cols, xstep, size = self._cols, self._xstep, self.xp_size
        n, c = self.shape[0], self.shape[1]
        acc = scratch("implicit.acc", self._n * m * cols, _F32)
        y = np.empty(self.out_shape, dtype=_F32) if out is None else out
        flat = x.reshape(-1)
        # the interleaved pad also takes the channel and image counts
        layout = (c, n) if self._interleaved else ()
        store_args = (acc, self.bias, _NO_Z if z is None else z.reshape(-1), y.reshape(-1), *self._store_tail)
        pad, store = self._pad, self._store
        if pad is None:
            sample = scratch("implicit.padded", size, _F32)
            pad = self._pad = direct.overload(pad_planes_interleaved if layout else pad_planes,
                                              (flat, sample, self._pdims, *layout, 0, 1))
            store = self._store = direct.overload(store_planes_interleaved if layout else store_planes,
                                                  (*store_args, 0, 1))
        gemm, w_at, ro_at, acc_at = self._gemm, self._w.ctypes.data, self._rowoff.ctypes.data, acc.ctypes.data
        pdims, kc = self._pdims, self._kc
        fused = self._fused
        if fused is not None:  # the fused driver's pointers: output, residual (None: null), bias, tables
            fgemm, params, geo = fused
            plane = self.out_shape[2] * self.out_shape[3]
            y_at, b_at = store_args[3].ctypes.data, self.bias.ctypes.data
            z_at = None if z is None else store_args[2].ctypes.data
            tables = (params.ctypes.data, geo.ctypes.data)

        def grid(first: int, last: int) -> int:
            """This thread's grid (``scratch`` is per thread) with input planes [first, last)
            padded into it; its address."""
            xp = scratch("implicit.padded", size, _F32)
            xp[-LANES:] = 0.0  # the last rounded-up columns read past the grid
            pad(flat, xp, pdims, *layout, first, last)
            return int(xp.ctypes.data)

        if self._n > 1:
            def images(first: int, last: int) -> None:
                at = grid(first * c, last * c)
                if fused is not None:
                    step = 4 * first * m * plane
                    fgemm(w_at, ro_at, at + 4 * first * xstep, y_at + step, m, depth, last - first, cols, b_at,
                          None if z_at is None else z_at + step, *tables)
                    return
                gemm(w_at, ro_at, at + 4 * first * xstep, acc_at + 4 * first * m * cols, depth, cols, m, depth, kc,
                     cols, last - first, xstep, m * cols)
                store(*store_args, first * m, last * m)

            run_shares(images, (), self._n, self._count)
            return y

        def rows(first: int, last: int) -> None:  # row tiles [first, last): output channels
            r0, r1 = first * TILE_ROWS, min(m, last * TILE_ROWS)
            at = grid(0, n * c)  # the whole input, each thread into its own grid
            if fused is not None:
                step = 4 * r0 * plane
                fgemm(w_at + 4 * r0 * depth, ro_at, at, y_at + step, r1 - r0, depth, 1, cols, b_at + 4 * r0,
                      None if z_at is None else z_at + step, *tables)
                return
            gemm(w_at + 4 * r0 * depth, ro_at, at, acc_at + 4 * r0 * cols, depth, cols, r1 - r0, depth, kc, cols, 1,
                 xstep, m * cols)
            store(*store_args, r0, r1)

        tiles = -(-m // TILE_ROWS)
        if not layout and self._count > 1 and threads.native():
            count = min(self._count, tiles)
            grids = scratch("implicit.grids", count * size, _F32)
            template = self._native
            if template is None:
                template = self._native = self._rows_template(count, tiles, flat, grids[:size], store_args)
            v = template.copy()
            _point_rows(v, flat, grids, acc, store_args[2], y.reshape(-1))
            if native_pool.pool(count - 1).run(native_shares.share_address(_rows_share), v,
                                               native_pool.bounds_for(tiles, count)):
                return y
        run_shares(rows, (), tiles, self._count)
        return y

    def _rows_template(self, count: int, tiles: int, flat: np.ndarray, grid: np.ndarray,
                       store_args: tuple[Any, ...]) -> np.ndarray:
        """The ``_rows_share`` argv of this layer but the per-call pointers (``_point_rows``)."""
        m, depth = self._w.shape
        n, c = self.shape[0], self.shape[1]
        v = np.zeros(_ROWS_ARGV, np.int64)
        v[0], v[7] = kernels_sgemm.implicit_address(), self._pdims.ctypes.data
        v[4], v[5], v[6] = self.xp_size, count, tiles
        v[8], v[9], v[11], v[12], v[13] = self._w.ctypes.data, self._rowoff.ctypes.data, depth, self._cols, m
        v[14], v[15], v[16], v[28] = self._kc, self._xstep, self.bias.ctypes.data, n * c
        v[22:26] = self._store_tail[2:6]
        v.view(np.float64)[26:28] = self._store_tail[6:8]
        v[29] = native_shares.compiled_address(pad_planes, (flat, grid, self._pdims))
        v[30] = native_shares.compiled_address(store_planes, store_args)
        if self._fused is not None:
            v[31], v[32], v[33] = (_FUSED.address(str(self.fused_driver)), self._fused[1].ctypes.data,
                                   self._fused[2].ctypes.data)
        return v
