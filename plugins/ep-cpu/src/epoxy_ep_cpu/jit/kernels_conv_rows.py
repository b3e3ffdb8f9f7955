"""Group-1 float32 2-D convolutions with output positions as the GEMM's rows and output
channels as its columns (``sgemm_ir``'s ``cgemm``): the packed weights are what the register
tile loads whole, the input grid what it broadcasts.

Why: the implicit GEMM (``kernels_conv_implicit``) puts output channels in the register
tile's rows and grid positions in its vectors, so its vector loads are runs of the input grid
at every tap's offset (most of them split over two cache lines), and it computes the grid's
padding columns and the last vector's unused lanes (a 14x14 map: 224 grid positions rounded
to 256 columns for 196 outputs). Here a tile is 6 output positions x 64 output channels: per
step of K (an input channel and tap) four aligned loads of the packed weights' row, one
broadcast of the input per position, read at ``X[gpos[r] + rowoff[k]]``, and 24 fused
multiply-adds; only real output positions are computed and any stride or dilation is a
table. That is onnxruntime's NCHWc kernels' register tile without their channel-blocked
layout. Measured on the Intel guest (1 thread, product alone): 76-88 G multiply-adds/s on
resnet50's 3x3 and stride-2 layers, onnxruntime 75-88 (bench/README.md, session 36).

The product lands position-major (``acc[p, channel]``), in chunks of positions that stay in
L2; the store (``rows_store_ir``: 16 x 16 blocks transposed in registers, the edges in numba)
writes them channel-major while adding the bias and residual and applying the activation.
Threads share the images' positions, or the 64-channel column tiles where the channels
outnumber the positions (each thread then reads its part of the weights).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit, uint64

from . import (
    config,
    direct,
    kernel_cache,  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
    kernels_sgemm,
    llvm_module,
    native_shares,
    rows_store_ir,
    threads,
)
from .activations import activate
from .kernels_conv import PreparedConvCall
from .kernels_conv_implicit import pad_planes, phase_grid
from .scratch import scratch
from .sgemm_ir import TILE_COLS, TILE_ROWS, WIDE_TILE  # WIDE_TILE: AVX-512's 6 x 64 tile, else AVX2's 6 x 16
from .threads import Split

_F32 = np.dtype(np.float32)
_NO_Z = np.empty(0, dtype=_F32)

#: fewest output channels: a tile's columns are 16-channel vectors
MIN_CHANNELS = 32
#: fewest im2col rows (C * kh * kw): with fewer, a tile stores after a few multiply-adds
MIN_DEPTH = 64
#: fewest multiply-adds worth the path (smaller layers: the small-layer kernel or the direct one)
MIN_MACS = 1 << 22
#: stride-1 3x3 layers with more output positions than this stay on F(4x4, 3x3) where allowed:
#: 2.25x fewer multiply-adds pay there (128 -> 128 on 28x28: 1.16-1.18 ms against 1.33 here).
#: On AVX2 all of them do (but the shallow ones on several threads, below): zfnet512's 512 ->
#: 512 on 12x12 took 15.8 ms here against 9.8 on F(2x2, 3x3), 1 thread, an AVX2-only AMD EPYC
#: (bench/README.md, session 42)
MAX_WINOGRAD_POSITIONS = 14 * 14 if WIDE_TILE else 0
#: on several threads, layers with at least this many output channels per output position (all
#: images') split their channels over the threads, each reading its part of the weights
COLUMN_SPLIT_RATIO = 1.0
#: 1x1 stride-1 layers of at most this many output positions an image come here rather than to
#: their own path (kernels_pointwise); see bench/README.md, session 36
POINTWISE_MAX_POSITIONS = 14 * 14
#: bytes of a share's product chunk (positions x padded channels), stored while in L2
CHUNK_BYTES = 1 << 18
#: layers with at least this many bytes of packed weights take chunks of up to
#: ``HEAVY_CHUNK_BYTES``: in a model every chunk streams all the weights from L3 (the layers
#: between evicted them), and resnet50's 2048 x 512 / 1024 x 256 layers on 7x7 / 14x14 maps read
#: them 2-4 times a run at 256 KB chunks. A/B at 1 thread against none heavy: resnet50 0.955-0.973,
#: densenet121, inception_v1/v2, squeezenet, alexnet 0.99-1.01 (every layer at 1 MB cost densenet121
#: 3 %: its small weights stay in L2 anyway); bench/README.md, session 41
HEAVY_WEIGHT_BYTES = 1 << 18
HEAVY_CHUNK_BYTES = 1 << 20
#: on several threads, layers of at most this many input channels come here up to 28x28 maps: the
#: Winograd variants' transforms split less well over threads than the product here (squeezenet
#: 0.95x, inception_v1/v2 0.98x at 2 threads; bench/README.md, session 36)
THREADS_SHALLOW_CHANNELS = 96
THREADS_SHALLOW_MAX_POSITIONS = 28 * 28
#: K rows a block: the tile's accumulators are stored and reloaded once a block
KC = 128
#: multiply-adds per thread below which a layer stays on one thread (4 M until session 40:
#: densenet121's 24 growth layers, 128 -> 32 3x3 on 14x14, 7.2 M, ran on one thread at 2, 124 us
#: against onnxruntime's 76; at 1 M, 2 threads: densenet121 0.95, inception_v1 0.97,
#: inception_v2 0.97, resnet50 and squeezenet 1.00; bench/ab_constant.py)
MACS_PER_THREAD = 1 << 20


_STORE_ARGS = [ctypes.c_void_p, ctypes.c_int64] + [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 6 + [ctypes.c_void_p]
_STORE = llvm_module.LazyModule("the row-gathered convolution's store", llvm_module.FLOAT_GEMM_FEATURES,
                                rows_store_ir.module_ir,
                                {rows_store_ir.ENTRY: _STORE_ARGS}, config.compiled_code_dir)


def store_address() -> int:
    """The compiled ``rows_store``'s address (``rows_store_ir``), for the compiled shares."""
    return _STORE.address(rows_store_ir.ENTRY)


def gains(n: int, ck: int, m: int, positions: int) -> bool:
    """Whether a layer of ``n`` images, ``ck`` im2col rows, ``m`` output channels and
    ``positions`` output positions an image is this path's (module docstring)."""
    return (kernels_sgemm.support() is None and m >= MIN_CHANNELS and ck >= MIN_DEPTH
            and n * positions * ck * m >= MIN_MACS)


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _store_rows(acc, ldo, bias, z, y, ch0, ch1, positions, act, alpha, beta, first,
                last):  # pragma: no cover - compiled
    """Output positions [first, last) of channels [ch0, ch1) of one image's planes from their
    position-major product (``acc[(p - first) * ldo + channel]``): bias, residual ``z`` (same
    layout as ``y``; empty for none) and activation, channel-major, 16 positions at a time per
    channel."""
    has_z = z.shape[0] > 0
    for p0 in range(first, last, 16):
        p1 = min(last, p0 + 16)
        for ch in range(ch0, ch1):
            bv = bias[ch]
            base = uint64(ch * positions)
            for p in range(p0, p1):
                v = acc[uint64((p - first) * ldo + ch)] + bv
                if has_z:
                    v += z[base + p]
                y[base + p] = activate(v, act, alpha, beta)


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _chunk(geo, x_at, acc, bias, z, y, image, j0, j1, q0, q1, alpha, beta):  # pragma: no cover - compiled
    """Positions [q0, q1) of ``image`` for columns [j0, j1): ``cgemm`` into ``acc`` (from its
    start), then their store: whole 16 x 16 blocks by ``rows_store`` (IR), the edges here."""
    gemm, b_at, gpos_at, ro_at, ldo, depth, kc, m, positions, xstep, act = (
        geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6], geo[7], geo[8], geo[10], geo[11])
    native_shares.call_address12(gemm, x_at + 4 * image * xstep, gpos_at + 8 * q0, ro_at, b_at, acc.ctypes.data,
                                 ldo, q1 - q0, depth, ldo, kc, j0, j1)
    plane_out = m * positions
    zi = z[image * plane_out:(image + 1) * plane_out] if z.shape[0] > 0 else z
    yi = y[image * plane_out:(image + 1) * plane_out]
    c1 = min(m, j1)
    z_at = zi.ctypes.data if z.shape[0] > 0 else uint64(0)
    native_shares.call_address12(geo[16], acc.ctypes.data, ldo, bias.ctypes.data, z_at, yi.ctypes.data, positions, j0,
                                 c1, q0, q1, act, geo[17])
    whole_p = (q1 - q0) // 16 * 16
    whole_c = (c1 - j0) // 16 * 16
    _store_rows(acc[whole_p * ldo:], ldo, bias, zi, yi, j0, c1, positions, act, alpha, beta, q0 + whole_p, q1)
    _store_rows(acc, ldo, bias, zi, yi, j0 + whole_c, c1, positions, act, alpha, beta, q0, q0 + whole_p)


@njit(cache=True, nogil=True, boundscheck=False)
def positions_share(geo, xp, acc, bias, z, y, alpha, beta, first, last):  # pragma: no cover - compiled
    """Row tiles [first, last) of every image's output positions (``geo[12]`` 0), or column
    tiles [first, last) of every position (1), in chunks of ``geo[13]`` positions: each chunk's
    product lands in this share's part of ``acc`` (``geo[13] * ldo`` floats, in the L2 cache)
    and is stored from there. ``geo``: the cgemm's address, the packed weights', the position
    table's and the row offsets', the accumulator's row length, K, the K block, M, positions,
    images, the grid's image step, the activation code, the split, the chunk, shares, units."""
    ldo, positions, images, chunk = geo[4], geo[8], geo[9], geo[13]
    share = (first * geo[14] + geo[15] - 1) // geo[15]  # bounds are units * t // shares: t back
    part = acc[share * chunk * ldo:(share + 1) * chunk * ldo]
    x_at = xp.ctypes.data
    if geo[12] == 1:
        j0 = first * TILE_COLS
        j1 = min(ldo, last * TILE_COLS)
        for image in range(images):
            for q0 in range(0, positions, chunk):
                _chunk(geo, x_at, part, bias, z, y, image, j0, j1, q0, min(positions, q0 + chunk), alpha, beta)
        return
    p0 = first * TILE_ROWS
    p1 = min(images * positions, last * TILE_ROWS)
    while p0 < p1:  # chunks within one image at a time
        image = p0 // positions
        q0 = p0 - image * positions
        q1 = min(positions, q0 + chunk, q0 + p1 - p0)
        _chunk(geo, x_at, part, bias, z, y, image, 0, ldo, q0, q1, alpha, beta)
        p0 += q1 - q0


def pack_weights(w: np.ndarray) -> kernels_sgemm.PackedFloatWeights:
    """A layer's weights ``(M, C, KH, KW)`` packed as the GEMM's columns (``K = C KH KW`` by
    ``M``): they do not depend on the input shape, so a layer packs them once."""
    m = int(w.shape[0])
    return kernels_sgemm.PackedFloatWeights(np.asarray(w, dtype=_F32).reshape(m, -1).T, 1)


class RowsConvCall(PreparedConvCall):
    """One input shape of a group-1 float32 2-D layer on ``cgemm``, prepared: the padded grid's
    geometry and row offsets (the implicit GEMM's phase grid), the table of output positions on
    it, the weights packed as the GEMM's columns, the epilogue and the thread count; the
    images' positions are one run of row tiles, split over the threads."""

    __slots__ = ("_chunk", "_count", "_fn", "_geo", "_gpos", "_own", "_pad", "_pad_split", "_params", "_pdims",
                 "_rowoff", "_split", "_units", "_weights", "bias", "dtype", "out_shape", "params", "shape", "xp_size")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, w: np.ndarray | None, bias: np.ndarray,
                 strides: tuple[int, ...], dilations: tuple[int, ...], begin: Sequence[int],
                 out_sp: Sequence[int], act: int, alpha: float, beta: float, nthreads: int,
                 packed: kernels_sgemm.PackedFloatWeights | None = None,
                 w_shape: tuple[int, ...] | None = None) -> None:
        """``packed``: the weights already packed (:func:`pack_weights`: one copy a layer
        shares between its input shapes, which may have let ``w`` go); ``w`` may then be None
        and ``w_shape`` gives its shape."""
        n, c = shape[0], shape[1]
        full_shape = tuple(w.shape) if w is not None else tuple(w_shape)  # type: ignore[arg-type]
        m, _, kh, kw = full_shape
        self._pdims, dims, self.xp_size, self._rowoff = phase_grid(shape, full_shape, strides, dilations, begin,
                                                                   out_sp)
        oh, ow, wq, plane = int(out_sp[0]), int(out_sp[1]), int(dims[3]), int(dims[1])
        # output (oy, ox) sits at grid position oy * wq + ox of the phase grid (as for igemm)
        self._gpos = (np.arange(oh, dtype=np.int64)[:, None] * wq + np.arange(ow, dtype=np.int64)[None, :]).reshape(-1)
        self.shape, self.dtype, self.out_shape = shape, dtype, (n, m, oh, ow)
        # a 1x1 stride-1 layer without padding reads the input itself as its grid
        self._own = (int(dims[2]), wq) == (int(shape[2]), int(shape[3])) and tuple(strides) == (1, 1) and (
            tuple(begin) == (0, 0)) and (kh, kw) == (1, 1)
        depth = c * kh * kw
        self._weights = packed if packed is not None else pack_weights(w)  # type: ignore[arg-type]
        if (self._weights.k, self._weights.n) != (depth, m):
            raise ValueError(f"packed weights hold ({self._weights.k}, {self._weights.n}); this layer needs "
                             f"({depth}, {m})")
        self.bias = np.ascontiguousarray(bias, dtype=_F32)
        self.params = (_F32.type(alpha), _F32.type(beta))
        positions = oh * ow
        weights = self._weights
        # threads share the output channels where the weights outweigh the positions (each
        # thread then reads its part of them), else the positions
        by_columns = nthreads > 1 and m >= COLUMN_SPLIT_RATIO * n * positions
        self._units = -(-weights._n_pad // TILE_COLS) if by_columns else -(-n * positions // TILE_ROWS)
        self._count = max(1, min(nthreads, self._units, n * m * depth * positions // MACS_PER_THREAD))
        ldo = weights._n_pad
        # a chunk's product stays in L2 until it is stored; one K block where K is a little past KC
        # (a 7x7 RGB stem, K = 147: a second block of 19 rows stored and reloaded every accumulator)
        budget = HEAVY_CHUNK_BYTES if 4 * depth * ldo >= HEAVY_WEIGHT_BYTES else CHUNK_BYTES
        fits = budget // (4 * ldo) // TILE_ROWS * TILE_ROWS
        self._chunk = max(TILE_ROWS, min(-(-positions // TILE_ROWS) * TILE_ROWS, fits))
        kc = depth if depth < KC + KC // 2 else KC
        self._params = np.array(self.params, dtype=_F32)  # the store's activation parameters
        self._geo = np.array((kernels_sgemm.gathered_address(), weights._packed_at, self._gpos.ctypes.data,
                              self._rowoff.ctypes.data, ldo, depth, kc, m, positions, n, c * plane, act,
                              int(by_columns), self._chunk, self._count, self._units, store_address(),
                              self._params.ctypes.data), dtype=np.int64)
        self._pad: Any = None
        self._fn: Any = None
        self._split: Any = None
        self._pad_split: Any = None

    @staticmethod
    def takes(shape: tuple[int, ...], w_shape: tuple[int, ...], dtype: np.dtype, out_sp: Sequence[int]) -> bool:
        """Whether a float32 layer is this path's (:func:`gains`)."""
        return dtype == _F32 and gains(int(shape[0]), int(shape[1] * w_shape[2] * w_shape[3]), int(w_shape[0]),
                                       int(out_sp[0]) * int(out_sp[1]))

    def __call__(self, x: np.ndarray, z: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
        n, c = self.shape[0], self.shape[1]
        acc = scratch("rows.acc", self._count * self._chunk * self._weights._n_pad, _F32)
        flat = x.reshape(-1)
        xp = flat if self._own else scratch("rows.padded", self.xp_size, _F32)
        y = np.empty(self.out_shape, dtype=_F32) if out is None else out
        args = (self._geo, xp, acc, self.bias, _NO_Z if z is None else z.reshape(-1), y.reshape(-1), *self.params)
        pad_args = (flat, xp, self._pdims)
        pad, fn = self._pad, self._fn
        if pad is None:
            pad = self._pad = direct.overload(pad_planes, (*pad_args, 0, 1))
            fn = self._fn = direct.overload(positions_share, (*args, 0, 1))
            self._split = Split(positions_share, fn, args, self._units, self._count)
            # the pad splits its planes too (a stride-2 layer's phase split of 128 planes of
            # 56x56 is ~10 % of the layer)
            self._pad_split = Split(pad_planes, pad, pad_args, n * c,
                                    threads.share_count(self._count, x.size, n * c))
        if self._count > 1:
            if not self._own:
                self._pad_split(*pad_args)
            self._split(*args)
        else:  # one thread: the kernels called directly
            if not self._own:
                pad(*pad_args, 0, n * c)
            fn(*args, 0, self._units)
        return y
