"""Winograd F(2x2, 3x3)'s tile transforms, compiled: the small-map twin of ``kernels_winograd``.

Why: on 7x7 maps F(4x4, 3x3) has 4 tiles, so its 36 GEMMs are 4 columns wide and run at a
fraction of BLAS's speed (512 -> 512 channels: 4.2 ms on one thread), while the grid GEMM does
all 9 multiplies per output (2.6-3.2 ms). F(2x2, 3x3) does 4 of them on 16 tiles: its 16 GEMMs
took 1.8 ms, and its transforms (4x4 tiles at step 2, additions only) are small next to them.
Same layouts and conventions as ``kernels_winograd`` (which holds the call class): ``v`` is
(16, C, n * tiles), ``prod`` (16, M, n * tiles), element ``4 k + l`` of a tile is row ``k``,
column ``l`` of ``B^T d B``; the weights are ``ops/conv.winograd_weights``'s (16, M, C).
"""

from __future__ import annotations

import numpy as np
from numba import njit, uint64

from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
from .winograd_rows import chunk_plan, load_rows, scatter_plane, store_chunk


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _input_plane(x, v, p, c_count, h, w, top, left, ty, tx, tiles_total, rows, tmp, loc):  # pragma: no cover
    """B^T d B of every 4x4 tile (step 2) of input plane ``p`` into ``v`` (16, C, n * tiles),
    through the plane's own (16, tiles) block ``loc``; ``rows``/``tmp``: 4 * (2 tx + 2)."""
    b = p // c_count
    c = p - b * c_count
    wp = uint64(2 * tx + 2)
    plane = uint64(p * h * w)
    ks = uint64(ty * tx)
    base = uint64(c * tiles_total + b * ty * tx)
    txu = uint64(tx)
    for i in range(ty):
        load_rows(x, rows, plane, h, w, top, left, wp, 2 * i, 4)
        for q in range(wp):  # over the tile's rows: (d0 - d2, d1 + d2, d2 - d1, d1 - d3)
            z0 = rows[q]
            z1 = rows[wp + q]
            z2 = rows[2 * wp + q]
            z3 = rows[3 * wp + q]
            tmp[q] = z0 - z2
            tmp[wp + q] = z1 + z2
            tmp[2 * wp + q] = z2 - z1
            tmp[3 * wp + q] = z1 - z3
        t0 = uint64(i * tx)
        for k in range(4):  # over the tile's columns
            tr = uint64(k) * wp
            o = uint64(4 * k) * ks + t0
            for j in range(txu):
                q = tr + uint64(2) * j
                z0 = tmp[q]
                z1 = tmp[q + uint64(1)]
                z2 = tmp[q + uint64(2)]
                z3 = tmp[q + uint64(3)]
                loc[o + j] = z0 - z2
                loc[o + ks + j] = z1 + z2
                loc[o + uint64(2) * ks + j] = z2 - z1
                loc[o + uint64(3) * ks + j] = z1 - z3
    scatter_plane(loc, v, 16, ks, uint64(c_count * tiles_total), base)


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _output_stages(prod, ks, base, tiles, s, o):  # pragma: no cover - compiled
    """A^T P A of ``tiles`` tiles that lie one after the other in ``prod`` (16, M, n * tiles)
    from tile ``base``: a chunk of ``winograd_rows.chunk_plan``, as
    ``kernels_winograd._output_stages``, into ``o`` (row ``a`` of tile ``t`` at ``2 * (a *
    tiles + t)``). ``s``: 8 * tiles scratch."""
    for col in range(4):  # over the tiles' rows: (p0 + p1 + p2, p1 - p2 - p3)
        src = uint64(col) * ks + base
        for t in range(tiles):
            p0 = prod[src + t]
            p1 = prod[src + uint64(4) * ks + t]
            p2 = prod[src + uint64(8) * ks + t]
            p3 = prod[src + uint64(12) * ks + t]
            s[uint64(col) * tiles + t] = p0 + p1 + p2
            s[uint64(4 + col) * tiles + t] = p1 - p2 - p3
    for a in range(2):  # over the tiles' columns: o[a, tile, 2 j + e]
        sa = uint64(4 * a) * tiles
        oa = uint64(2 * a) * tiles
        for t in range(tiles):
            q0 = s[sa + t]
            q1 = s[sa + tiles + t]
            q2 = s[sa + uint64(2) * tiles + t]
            q3 = s[sa + uint64(3) * tiles + t]
            o[oa + uint64(2) * t] = q0 + q1 + q2
            o[oa + uint64(2) * t + uint64(1)] = q1 - q2 - q3


@njit(cache=True, nogil=True)
def input_planes(x, v, dims, first, last):  # pragma: no cover - compiled
    """The input transform of planes [first, last) (= image * C + channel): a share of
    ``threads.run_shares``, the whole layer on one thread."""
    tx, ty = dims[7], dims[6]
    tiles_total = dims[0] * ty * tx
    rows = np.empty(4 * (2 * tx + 2), dtype=x.dtype)
    tmp = np.empty(4 * (2 * tx + 2), dtype=x.dtype)
    loc = np.empty(16 * ty * tx, dtype=x.dtype)
    for p in range(first, last):
        _input_plane(x, v, p, dims[1], dims[2], dims[3], dims[4], dims[5], ty, tx, tiles_total, rows, tmp, loc)


@njit(cache=True, nogil=True)
def output_planes(prod, bias, z, y, dims, act, alpha, beta, first, last):  # pragma: no cover - compiled
    """The output transform and store of output planes [first, last) in the products' order
    (``q = channel * n + image``), as ``kernels_winograd.output_planes``."""
    n, m_count, oh, ow, ty, tx = dims[0], dims[8], dims[9], dims[10], dims[6], dims[7]
    per_plane = ty * tx
    ks = uint64(m_count * n * per_plane)
    planes, band = chunk_plan(ty, tx)
    most = max(planes * per_plane, band * tx)
    s = np.empty(8 * most, dtype=prod.dtype)
    o = np.empty(4 * most, dtype=prod.dtype)
    for q0 in range(first, last, planes):
        count = min(planes, last - q0)
        for i0 in range(0, ty, band):
            rows = min(band, ty - i0)
            tiles = uint64(count * rows * tx)
            _output_stages(prod, ks, uint64(q0 * per_plane + i0 * tx), tiles, s, o)
            store_chunk(o, tiles, rows, i0, 2, ty, tx, q0, count, n, m_count, y, z, bias, oh, ow, act, alpha, beta)
