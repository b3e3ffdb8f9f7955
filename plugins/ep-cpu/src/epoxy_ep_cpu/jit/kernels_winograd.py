"""Winograd F(4x4, 3x3) convolutions with compiled tile transforms, prepared per input shape.

Why: the numpy F(4,3) path (``ops/_winograd_f43.py``) runs both tile transforms as dense
Kronecker GEMMs (36 multiply-adds per transformed element) after a strided gather, on one
thread: for densenet's 128 -> 32 channel layers on 56x56 the transforms cost twice its 36
small GEMMs (gather 0.5 ms + input transform 0.9 ms against 0.5 ms of GEMM, 1 thread), and
onnxruntime ran the whole layer in 2 ms. Here each transform is the sparse 1-D transform
applied to rows then columns (~12 adds per value), reading the image unpadded (the zero
border is made on the fly) and writing straight into the layouts the GEMMs use; the output
transform adds the bias and the residual and applies the activation while storing, like the
grid GEMM's store (``kernels_conv_gemm``). The 36 GEMMs ``U_k (M, C) @ V_k (C, tiles)``
stay in BLAS, with the batch folded into the tiles.

The transform matrices are those of Lavin & Gray (2015), points 0, +-1, +-2 and infinity (the
same as ``ops/_winograd_f43.py``, whose weight transform ``f43_weights`` gives ``U``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, uint64

from . import (
    direct,
    kernel_cache,  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
)
from .kernels_conv import PreparedConvCall
from .scratch import scratch
from .threads import Split, SplitMatmul, gemm_count, share_count
from .winograd_rows import chunk_plan, load_rows, scatter_plane, store_chunk

_NO_Z = {dt: np.empty(0, dtype=dt) for dt in (np.dtype(np.float32),)}
#: the transforms' coefficients as float32: Python float literals would make numba compute in
#: float64 and convert back (1.7x slower input transform, measured)
_F2, _F4, _F5, _F8 = np.float32(2.0), np.float32(4.0), np.float32(5.0), np.float32(8.0)


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _input_plane(x, v, p, c_count, h, w, top, left, ty, tx, tiles_total, rows, tmp, loc):  # pragma: no cover
    """B^T d B of every 6x6 tile (step 4) of input plane ``p`` (= image * C + channel) into
    ``v`` (36, C, n * tiles): element ``k`` of tile ``t`` of image ``b``, channel ``c`` at
    ``(k * C + c) * n_tiles + b * tiles + t``. ``rows``/``tmp``: 6 * (4 tx + 2) scratch.
    Indices are unsigned so that numba emits no negative-index checks (vector loops)."""
    b = p // c_count
    c = p - b * c_count
    wp = uint64(4 * tx + 2)
    plane = uint64(p * h * w)
    ks = uint64(ty * tx)
    base = uint64(c * tiles_total + b * ty * tx)
    txu = uint64(tx)
    for i in range(ty):
        load_rows(x, rows, plane, h, w, top, left, wp, 4 * i, 6)
        # over the tile's rows (each column of the band at once)
        for q in range(wp):
            z0 = rows[q]
            z1 = rows[wp + q]
            z2 = rows[2 * wp + q]
            z3 = rows[3 * wp + q]
            z4 = rows[4 * wp + q]
            z5 = rows[5 * wp + q]
            a = z4 - _F4 * z2  # shared terms: rows 1/2 and 3/4 are sums and differences
            b = z3 - _F4 * z1
            c = z4 - z2
            d = _F2 * (z3 - z1)
            tmp[q] = _F4 * z0 - _F5 * z2 + z4
            tmp[wp + q] = a + b
            tmp[2 * wp + q] = a - b
            tmp[3 * wp + q] = c + d
            tmp[4 * wp + q] = c - d
            tmp[5 * wp + q] = _F4 * z1 - _F5 * z3 + z5
        # over the tile's columns, into the plane's own (36, tiles) block (written out below
        # as 36 runs: 36 scattered runs of tx values per tile row measured 4x slower)
        t0 = uint64(i * tx)
        for k in range(6):
            tr = uint64(k) * wp
            o = uint64(6 * k) * ks + t0
            for j in range(txu):
                q = tr + uint64(4) * j
                z0 = tmp[q]
                z1 = tmp[q + uint64(1)]
                z2 = tmp[q + uint64(2)]
                z3 = tmp[q + uint64(3)]
                z4 = tmp[q + uint64(4)]
                z5 = tmp[q + uint64(5)]
                a = z4 - _F4 * z2
                b = z3 - _F4 * z1
                c = z4 - z2
                d = _F2 * (z3 - z1)
                loc[o + j] = _F4 * z0 - _F5 * z2 + z4
                loc[o + ks + j] = a + b
                loc[o + uint64(2) * ks + j] = a - b
                loc[o + uint64(3) * ks + j] = c + d
                loc[o + uint64(4) * ks + j] = c - d
                loc[o + uint64(5) * ks + j] = _F4 * z1 - _F5 * z3 + z5
    scatter_plane(loc, v, 36, ks, uint64(c_count * tiles_total), base)


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _output_stages(prod, ks, base, tiles, s, o):  # pragma: no cover - compiled
    """A^T P A of ``tiles`` tiles that lie one after the other in the GEMMs' products ``prod``
    (36, M, n * tiles), from tile ``base`` (``ks``: floats between two products): a chunk of
    ``winograd_rows.chunk_plan``, each stage one loop over the chunk's tiles, into ``o``
    (row ``a`` of tile ``t`` at ``4 * (a * tiles + t)``). ``s``: 24 * tiles scratch."""
    # over the tiles' rows: s[a, col, t] = sum_k A^T[a, k] P[6k + col, t]
    for col in range(6):
        src = uint64(col) * ks + base
        for t in range(tiles):
            p0 = prod[src + t]
            p1 = prod[src + uint64(6) * ks + t]
            p2 = prod[src + uint64(12) * ks + t]
            p3 = prod[src + uint64(18) * ks + t]
            p4 = prod[src + uint64(24) * ks + t]
            p5 = prod[src + uint64(30) * ks + t]
            s[uint64(col) * tiles + t] = p0 + p1 + p2 + p3 + p4
            s[uint64(6 + col) * tiles + t] = p1 - p2 + _F2 * (p3 - p4)
            s[uint64(12 + col) * tiles + t] = p1 + p2 + _F4 * (p3 + p4)
            s[uint64(18 + col) * tiles + t] = p1 - p2 + _F8 * (p3 - p4) + p5
    # over the tiles' columns: o[a, tile, 4 j + e], each plane's output rows in order
    for a in range(4):
        sa = uint64(6 * a) * tiles
        oa = uint64(4 * a) * tiles
        for t in range(tiles):
            q0 = s[sa + t]
            q1 = s[sa + tiles + t]
            q2 = s[sa + uint64(2) * tiles + t]
            q3 = s[sa + uint64(3) * tiles + t]
            q4 = s[sa + uint64(4) * tiles + t]
            q5 = s[sa + uint64(5) * tiles + t]
            f = oa + uint64(4) * t
            o[f] = q0 + q1 + q2 + q3 + q4
            o[f + uint64(1)] = q1 - q2 + _F2 * (q3 - q4)
            o[f + uint64(2)] = q1 + q2 + _F4 * (q3 + q4)
            o[f + uint64(3)] = q1 - q2 + _F8 * (q3 - q4) + q5


@njit(cache=True, nogil=True)
def input_planes(x, v, dims, first, last):  # pragma: no cover - compiled
    """The input transform of planes [first, last) (= image * C + channel): a share of
    ``threads.run_shares``, the whole layer on one thread."""
    tx, ty = dims[7], dims[6]
    tiles_total = dims[0] * ty * tx
    rows = np.empty(6 * (4 * tx + 2), dtype=x.dtype)
    tmp = np.empty(6 * (4 * tx + 2), dtype=x.dtype)
    loc = np.empty(36 * ty * tx, dtype=x.dtype)
    for p in range(first, last):
        _input_plane(x, v, p, dims[1], dims[2], dims[3], dims[4], dims[5], ty, tx, tiles_total, rows, tmp, loc)


@njit(cache=True, nogil=True)
def output_planes(prod, bias, z, y, dims, act, alpha, beta, first, last):  # pragma: no cover - compiled
    """The output transform and store of output planes [first, last) in the products' order
    (``q = channel * n + image``, planes ``q`` and ``q + 1`` one after the other there), plus
    the bias and the residual ``z``, through the activation, into ``y``: chunks of
    ``winograd_rows.chunk_plan`` (a band of a large plane's tile rows, or several small planes)."""
    n, m_count, oh, ow, ty, tx = dims[0], dims[8], dims[9], dims[10], dims[6], dims[7]
    per_plane = ty * tx
    ks = uint64(m_count * n * per_plane)
    planes, band = chunk_plan(ty, tx)
    most = max(planes * per_plane, band * tx)
    s = np.empty(24 * most, dtype=prod.dtype)
    o = np.empty(16 * most, dtype=prod.dtype)
    for q0 in range(first, last, planes):
        count = min(planes, last - q0)
        for i0 in range(0, ty, band):
            rows = min(band, ty - i0)
            tiles = uint64(count * rows * tx)
            _output_stages(prod, ks, uint64(q0 * per_plane + i0 * tx), tiles, s, o)
            store_chunk(o, tiles, rows, i0, 4, ty, tx, q0, count, n, m_count, y, z, bias, oh, ow, act, alpha, beta)


def tile_counts(out_sp: tuple[int, int] | list[int], tile: int = 4) -> tuple[int, int]:
    """Output tiles (``tile`` x ``tile``) down and across."""
    return -(-int(out_sp[0]) // tile), -(-int(out_sp[1]) // tile)


def _f23_kernels() -> tuple[Any, Any]:
    from . import kernels_winograd_f23 as f23

    return f23.input_planes, f23.output_planes


#: output tile size -> (transformed elements per tile, the transform kernels over a range of
#: planes: input, output), F(4x4, 3x3) here, F(2x2, 3x3) in kernels_winograd_f23
VARIANTS: dict[int, tuple[int, Any]] = {
    4: (36, lambda: (input_planes, output_planes)),
    2: (16, _f23_kernels),
}


class WinogradCall(PreparedConvCall):
    """One float32 3x3 stride-1 layer for one input shape: ``act(conv(x, W) + bias + z)`` by
    F(4x4, 3x3) (``tile`` 4: ``u`` is the weight as ``(36, M, C)``,
    ``ops/_winograd_f43.f43_weights``) or F(2x2, 3x3) (``tile`` 2: ``(16, M, C)``,
    ``ops/conv.winograd_weights``) with compiled transforms and BLAS GEMMs (module
    docstring). Same interface as ``kernels_conv_gemm.GridConvCall``."""

    __slots__ = ("_count", "_dims", "_elements", "_gemm", "_in", "_in_split", "_kernels", "_out", "_out_split",
                 "_product", "_tail", "_u", "bias", "dtype", "out_shape", "prod_size", "shape", "v_size")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, u: np.ndarray, bias: np.ndarray,
                 begin: tuple[int, ...] | list[int], out_sp: tuple[int, ...] | list[int], act: int, alpha: float,
                 beta: float, nthreads: int, tile: int = 4) -> None:
        n, c, h, w = (int(d) for d in shape)
        m = int(u.shape[1])
        oh, ow = int(out_sp[0]), int(out_sp[1])
        ty, tx = tile_counts((oh, ow), tile)
        self._elements, kernels = VARIANTS[tile]
        self._kernels = kernels()
        self.shape, self.dtype = tuple(shape), dtype
        self.out_shape = (n, m, oh, ow)
        self._u = u
        self.bias = bias
        self._dims = np.array([n, c, h, w, int(begin[0]), int(begin[1]), ty, tx, m, oh, ow], dtype=np.int64)
        tiles = n * ty * tx
        self.v_size = self._elements * c * tiles
        self.prod_size = self._elements * m * tiles
        self._tail = (act, dtype.type(alpha), dtype.type(beta))
        work = self.v_size + self.prod_size
        self._count = share_count(nthreads, work, n * min(c, m))
        self._gemm = gemm_count(nthreads, self._elements * m * c * tiles)
        self._in: Any = None
        self._out: Any = None
        self._in_split: Any = None
        self._out_split: Any = None
        self._product: Any = None

    def __call__(self, x: np.ndarray, z: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
        dt = self.dtype
        c, m, k = self.shape[1], self.out_shape[1], self._elements
        n = self.shape[0]
        tiles = self.v_size // (k * c)
        v = scratch("winograd.v", self.v_size, dt)
        input_planes, output_planes = self._kernels
        args = (x.reshape(-1), v, self._dims)
        fn = self._in
        if fn is None:
            fn = self._in = direct.overload(input_planes, (*args, 0, n * c))
            self._in_split = Split(input_planes, fn, args, n * c, self._count)
        if self._count > 1:
            self._in_split(*args)
        else:  # one thread: the kernel called directly (a tiny layer's call is a few us)
            fn(*args, 0, n * c)
        prod = scratch("winograd.prod", self.prod_size, dt).reshape(k, m, tiles)
        operands = (self._u, v.reshape(k, c, tiles), prod)
        product = self._product
        if product is None:
            product = self._product = SplitMatmul(*operands, self._gemm)
        product(*operands)
        y = np.empty(self.out_shape, dtype=dt) if out is None else out
        stored = (prod.reshape(-1), self.bias, _NO_Z[dt] if z is None else z.reshape(-1), y.reshape(-1),
                  self._dims, *self._tail)
        fn = self._out
        if fn is None:
            fn = self._out = direct.overload(output_planes, (*stored, 0, n * m))
            self._out_split = Split(output_planes, fn, stored, n * m, self._count)
        if self._count > 1:
            self._out_split(*stored)
        else:  # one thread: the kernel called directly (a tiny layer's call is a few us)
            fn(*stored, 0, n * m)
        return y
