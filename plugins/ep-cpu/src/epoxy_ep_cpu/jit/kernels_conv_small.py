"""Small group-1 float32 convolutions (the exporter CNNs' 8-64 channel layers on 4x4-32x32
maps) in one compiled call: pad, a position-tiled implicit GEMM, store.

Why: such a layer is 20 K - 1 M multiply-adds, a microsecond or two of arithmetic, and the
paths made for larger layers spent 5-35 us on it (bench/README.md, session 29): the direct
kernel's plane-at-a-time loops ran at ~9 G multiply-adds/s, the grid GEMM copied im2col rows
and called BLAS per image, the implicit GEMM (``kernels_conv_implicit``) rounds a map's grid
positions up to 16-float vectors (a 4x4 map's 22 to 32) and crosses from Python three times.
Here the register tile is 8 or 16 grid positions x 8 or 16 output channels on AVX-512, 4 or 8
positions x 8 channels on AVX2 (``position_gemm_ir.shapes``): a map's positions are rounded up
to a tile only, the weights' rows are a few vectors in L1. On an AVX2 CPU (session 43, 1
thread) the exporter CNNs' layers ran in 0.47-0.77x the time of the routes they took before
(the grid GEMM, the direct kernel). One numba function pads the input
into the phase grid (skipped when the input is its own grid: stride 1, no padding, as 1x1
layers), calls the LLVM-IR product by its address (``native_call``) and stores the planes
with the bias, the residual and the activation.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np
from numba import njit, uint64

from epoxy.kit.aligned import aligned_zeros

from . import (
    config,
    direct,
    kernel_cache,  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
    llvm_module,
    position_gemm_ir,
    sgemm_ir,
)
from .activations import ACT_HARD_SIGMOID, ACT_HARD_SWISH, activate_wide
from .kernels_conv import LANES as SLACK
from .kernels_conv import PreparedConvCall, _geometry, _offsets, layer_sizes
from .kernels_conv_implicit import pad_planes
from .native_call import call_product
from .threads import Split

_F32 = np.dtype(np.float32)
_NO_Z = np.empty((0, 0, 0, 0), dtype=_F32)

#: most output channels (four blocks of 16: past them the input is re-read per block, and the
#: other paths' wider tiles win)
MAX_CHANNELS = 64
#: fewest im2col rows (C * kh * kw) on a layer of more than ``SHALLOW_MAX_POSITIONS`` positions
#: in all (every image's): with fewer the store pass outweighs the product, and BLAS writes the
#: planes directly (8 -> 16 or 48 channels 1x1 on 16x16 at batch 8: 1.01-1.14x slower); fewer
#: positions gain anyway (8 -> 32 on 8x8 at batch 8 0.88x, 3 -> 16 on 32x32 0.80x). On AVX2 no
#: limit: there every shallow layer measured ran faster here (1x1, 4-12 -> 8-48 channels on 16x16
#: and 24x24 at batch 2-16: 0.65-0.91x the pointwise route's time at 1 thread, 0.66-0.74x at 2;
#: bench/README, session 43)
MIN_DEPTH = 16 if sgemm_ir.WIDE_TILE else 1
SHALLOW_MAX_POSITIONS = 1024
#: most grid positions an image (the map's rows times the grid's width) of a layer with a
#: spatial kernel: 32x32 maps still gain at one thread (3x3 layers 0.82-0.93x the implicit
#: GEMM's time, 1,086 positions), larger ones are left to the implicit GEMM, BLAS and Winograd
#: paths' longer rows (bench/README.md, session 29)
MAX_POSITIONS = 1100
#: most im2col values an image (``ck`` rows x grid positions): the kernel reads an image's
#: grid once per block of 16 output channels, and past this it lost to the implicit GEMM on an
#: Intel Xeon (1 thread, us, small / implicit: 64 -> 64 stride 2 on 56x56, 576 x 812, 645 /
#: 542; 128 -> 32 on 28x28, 1152 x 840, 632 / 485; kept: 32 -> 32 on 32x32, 288 x 1088, 148 /
#: 164; 64 -> 64 on 14x14, 576 x 224, 129 / 137; bench/README.md, session 35)
MAX_IMAGE_VALUES = 3 << 17
#: most positions an image of a 1x1 layer: BLAS writes its planes directly, and from 28x28 its
#: product gains back the store pass (64 -> 16 on 28x28 at batch 4: 1.05x slower here, 56x56 1.05x)
MAX_POINTWISE_POSITIONS = 768
#: most input channels of a 1x1 layer: deeper ones run faster on BLAS (an Intel Xeon, one
#: thread, this path / BLAS: 32 -> 48 on 13x13 1.05x, 64 -> 48 1.21x, 128 -> 48 1.27x, 64 -> 32
#: on 27x27 1.28x, squeezenet's 384 -> 64 on 13x13 1.36x; an AMD EPYC: 384 -> 48 1.02x, 64 -> 16
#: on 28x28 at batch 4 1.05x; bench/README.md, sessions 29 and 34)
MAX_POINTWISE_DEPTH = 48
#: most multiply-adds of a one-image 1x1 layer on more than one thread: this path runs an image
#: on one thread, the others split larger layers (BLAS writes a 1x1 layer's planes on both)
MAX_MACS_ONE_IMAGE = 1 << 20
#: ... of a one-image layer with a spatial kernel: its one thread beats the BLAS paths' two up to
#: ~10 M multiply-adds (each call right after a two-thread BLAS product, median ms, this path on
#: one thread / the two-thread route: 128 -> 32 3x3 on 7x7 0.059 / 0.106, on 14x14 0.167 / 0.211,
#: 64 -> 64 on 7x7 0.057 / 0.074, 16 -> 32 5x5 on 27x27 0.205 / 0.263; even at 3-8 M with 64
#: outputs; from 13 M the two threads win: 32 -> 64 on 27x27 0.279 / 0.214; bench/README.md,
#: session 32)
MAX_MACS_ONE_IMAGE_SPATIAL = 12 << 20
#: multiply-adds per thread below which a batch stays on one thread
MACS_PER_THREAD = 1 << 20

_MODULE = llvm_module.LazyModule(
    "the small-convolution kernel", llvm_module.FLOAT_GEMM_FEATURES, position_gemm_ir.module_ir,
    {position_gemm_ir.entry_name(width, size): [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 7
     for width in position_gemm_ir.LANE_WIDTHS for size in position_gemm_ir.TILE_SIZES},
    config.compiled_code_dir)


def support() -> str | None:
    """None when the kernel can run here (llvmlite, AVX2 and FMA: ``position_gemm_ir.shapes``
    sizes its tiles for AVX-512 or AVX2), else why not."""
    return llvm_module.missing(llvm_module.FLOAT_GEMM_FEATURES)


def product_address(lanes: int, tile: int) -> int:
    """The compiled driver for registers of ``lanes`` channels and tiles of ``tile``
    positions: its address (the module is compiled once per process, its object code cached
    beside numba's kernels)."""
    return _MODULE.address(position_gemm_ir.entry_name(lanes, tile))


def gains(n: int, ck: int, m: int, positions: int, nthreads: int = 1, taps: int = 9) -> bool:
    """Whether a float32 group-1 layer of ``n`` images, ``ck`` im2col rows, ``m`` output
    channels, ``positions`` grid positions an image and ``taps`` kernel positions is this
    path's on ``nthreads`` threads: up to ``MAX_CHANNELS`` outputs on maps up to
    ``MAX_POSITIONS`` (``MAX_POINTWISE_POSITIONS`` and ``MAX_POINTWISE_DEPTH`` inputs for 1x1
    layers) and ``MAX_IMAGE_VALUES`` im2col values an image, ``MIN_DEPTH`` rows unless
    the layer is small, on AVX-512 or AVX2 + FMA; one image on several threads only up to
    ``MAX_MACS_ONE_IMAGE`` (``MAX_MACS_ONE_IMAGE_SPATIAL`` with a spatial kernel)."""
    most = MAX_POSITIONS if taps > 1 else MAX_POINTWISE_POSITIONS
    one_image = MAX_MACS_ONE_IMAGE_SPATIAL if taps > 1 else MAX_MACS_ONE_IMAGE
    return (support() is None and m <= MAX_CHANNELS and positions <= most and ck * positions <= MAX_IMAGE_VALUES
            and (taps > 1 or ck <= MAX_POINTWISE_DEPTH)
            and (ck >= MIN_DEPTH or n * positions <= SHALLOW_MAX_POSITIONS)
            and (nthreads == 1 or n > 1 or positions * ck * m <= one_image))


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _pad_planes_unit_stride(x, xp, pdims, first, last):  # pragma: no cover - compiled
    """Input planes [first, last) zero-padded into their grids, for stride 1: the grids'
    span zeroed in one run, then one copy per input row (``kernels_conv._pad_plane``'s
    per-row zero runs cost more than the copies on 4x4-8x8 maps)."""
    h, wd, hq, wq, pt, pl = pdims[0], pdims[1], pdims[2], pdims[3], pdims[6], pdims[7]
    plane = hq * wq
    for j in range(uint64(first * plane), uint64(last * plane)):
        xp[j] = 0.0
    rows, cols = min(h, hq - pt), uint64(max(0, min(wd, wq - pl)))
    for p in range(first, last):
        for iy in range(rows):
            src = uint64((p * h + iy) * wd)
            dst = uint64(p * plane + (iy + pt) * wq + pl)
            for j in range(cols):
                xp[dst + j] = x[src + j]


#: where ``small_conv``'s integer constants start: the layer's sizes, the pad's, the row offsets
_PDIMS_AT, _ROWOFF_AT = 15, 23


@njit(cache=True, inline="always")
def _weights_at(m):  # pragma: no cover - compiled (and called from Python)
    """Where the packed weights start in a layer's ``floats``: past alpha, beta and the ``m``
    biases, rounded up to whole cache lines (16 floats)."""
    return (2 + m + 15) // 16 * 16


@njit(cache=True, nogil=True, boundscheck=False)
def small_conv(x, y, z, ints, floats, first, last):  # pragma: no cover - compiled
    """Images [first, last) of the layer: padded into a grid (unless ``dims[12]`` says the
    input is its own grid), the product into channel-major accumulator rows of ``cols`` an
    image, then the output planes. Few arguments (each costs ~0.1 us to pass): ``ints`` holds
    ``dims`` (address, C, K, positions, xstep, ostep, M, cols, wq, oh, ow, act, input-is-grid,
    grid size, channel blocks), the pad's sizes and the row offsets; ``floats`` alpha, beta,
    the bias and the packed weights."""
    dims, pdims, rowoff = ints[:_PDIMS_AT], ints[_PDIMS_AT:_ROWOFF_AT], ints[_ROWOFF_AT:]
    address, c, k, positions, xstep, ostep = dims[0], dims[1], dims[2], dims[3], dims[4], dims[5]
    m, cols, wq, oh, ow, act, blocks = dims[6], dims[7], dims[8], dims[9], dims[10], dims[11], dims[14]
    alpha, beta, bias, w = floats[0], floats[1], floats[2:2 + m], floats[_weights_at(m):]
    x = x.reshape(-1)
    z = z.reshape(-1)
    y = y.reshape(-1)
    work = np.empty(dims[13] + (last - first) * ostep, dtype=np.float32)
    xp, acc = work[:dims[13]], work[dims[13]:]
    if dims[12] != 0:
        grid = x
    else:
        if pdims[4] == 1 and pdims[5] == 1:
            _pad_planes_unit_stride(x, xp, pdims, first * c, last * c)
        else:
            pad_planes(x, xp, pdims, first * c, last * c)
        for j in range(xp.shape[0] - SLACK, xp.shape[0]):
            xp[j] = 0.0  # the last tile's positions past the map read here: finite, unused
        grid = xp
    call_product(address, w, rowoff, grid[first * xstep:], acc, k, positions, last - first, xstep, ostep, cols,
                 blocks)
    has_z = z.shape[0] > 0
    for image in range(first, last):
        for ch in range(m):
            bv = bias[ch]
            for oy in range(oh):
                a = uint64((image - first) * ostep + ch * cols + oy * wq)
                d = uint64(((image * m + ch) * oh + oy) * ow)
                for ox in range(uint64(ow)):
                    v = acc[a + ox] + bv
                    if has_z:
                        v += z[d + ox]
                    y[d + ox] = activate_wide(v, act, alpha, beta)


class SmallConvCall(PreparedConvCall):
    """One small group-1 float32 layer for one input shape: ``act(conv(x, W) + bias + z)`` in
    one compiled call (module docstring). The interface of ``kernels_conv.Conv2dCall``; its
    store also applies HardSigmoid and HardSwish (``activations.activate_wide``), which the
    other calls leave to a pass after them: ``activation_done`` says so."""

    __slots__ = ("_fn", "_floats", "_ints", "_n", "_split", "activation_done", "dtype", "out_shape", "shape")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, w: np.ndarray, bias: np.ndarray,
                 strides: tuple[int, ...], dilations: tuple[int, ...], begin: Sequence[int],
                 out_sp: Sequence[int], act: int, alpha: float, beta: float, nthreads: int) -> None:
        n, c, h, wd = shape
        m, _, kh, kw = w.shape
        key = (shape, w.shape, tuple(strides), tuple(dilations), tuple(begin), tuple(out_sp), 1)
        pdims, dims, (xp_size, _, _) = _geometry(*key)
        oh, ow, hq, wq, plane = int(out_sp[0]), int(out_sp[1]), int(dims[2]), int(dims[3]), int(dims[1])
        positions = (oh - 1) * wq + ow
        lanes = position_gemm_ir.lanes_for(m)
        blocks = -(-m // lanes)
        tile = position_gemm_ir.tile_for(positions)
        cols = -(-positions // tile) * tile
        # the input is its own grid (stride 1, no padding: 1x1 layers) unless the last tile
        # would read past it
        own_grid = tuple(strides) == (1, 1) and min(begin) == 0 and (hq, wq) == (h, wd) and positions == cols
        k = c * kh * kw
        offs = np.asarray(_offsets(dims), dtype=np.int64)
        rowoff = (np.arange(c, dtype=np.int64)[:, None] * plane + offs[None, :]).reshape(-1)
        packed = np.zeros((blocks * lanes, k), dtype=_F32)
        packed[:m] = w.reshape(m, k)
        # channel block b's rows of K, each ``lanes`` floats: [b][k][lane]
        packed = packed.reshape(blocks, lanes, k).transpose(0, 2, 1).reshape(-1)
        layer = np.array((product_address(lanes, tile), c, k, positions, c * plane, blocks * lanes * cols, m, cols,
                          wq, oh, ow, act, int(own_grid), 0 if own_grid else xp_size, blocks), dtype=np.int64)
        self._ints = np.concatenate((layer, pdims, rowoff)).astype(np.int64)
        at = _weights_at.py_func(m)  # the packed rows on cache lines (the kernel loads them whole)
        self._floats = aligned_zeros(at + packed.size, _F32)
        self._floats[:2] = alpha, beta
        self._floats[2:2 + m] = bias
        self._floats[at:] = packed
        self.shape, self.dtype, self._n = shape, dtype, n
        self.out_shape = (n, m, oh, ow)
        # whether the store applies an activation the other kernels leave to a pass after them
        self.activation_done = act in (ACT_HARD_SIGMOID, ACT_HARD_SWISH)
        count = max(1, min(nthreads, n, n * positions * k * m // MACS_PER_THREAD))
        sample = (np.empty(shape, dtype=_F32), np.empty(self.out_shape, dtype=_F32), _NO_Z, self._ints, self._floats)
        self._fn = direct.overload(small_conv, (*sample, 0, n))
        # images in shares on the native pool: its helpers stay awake (``run_shares``' sleeping
        # ones cost 70-130 us to wake on a VM, more than such a layer takes)
        self._split = Split(small_conv, self._fn, sample, n, count) if count > 1 else None

    @staticmethod
    def takes(shape: tuple[int, ...], w_shape: tuple[int, ...], dtype: np.dtype, wq: int,
              out_sp: Sequence[int], nthreads: int = 1) -> bool:
        """Whether a float32 layer is this path's on ``nthreads`` threads (:func:`gains`)."""
        return dtype == _F32 and gains(*layer_sizes(shape, w_shape, wq, out_sp), nthreads,
                                       taps=int(w_shape[2] * w_shape[3]))

    def __call__(self, x: np.ndarray, z: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
        y = np.empty(self.out_shape, dtype=_F32) if out is None else out
        args = (x, y, _NO_Z if z is None else z, self._ints, self._floats)
        if self._split is None:
            self._fn(*args, 0, self._n)
        else:
            self._split(*args)
        return y
