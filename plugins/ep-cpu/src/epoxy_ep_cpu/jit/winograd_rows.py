"""Row loading, plane scatter and store shared by the compiled Winograd variants
(``kernels_winograd``'s F(4x4, 3x3) and ``kernels_winograd_f23``'s F(2x2, 3x3)): the loops
that do not depend on the tile size, in one place."""

from __future__ import annotations

from numba import njit, uint64

from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
from .activations import activate


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def load_rows(x, rows, plane, h, w, top, left, wp, first, count):  # pragma: no cover - compiled
    """Input rows ``first - top`` .. (``count`` of them) of the plane at ``plane``, zero-padded
    to ``wp`` columns with ``left`` zeros first, into ``rows`` (count x wp): a tile band of
    either variant."""
    lo = uint64(left)
    hi = uint64(min(wp, left + w))
    for r in range(count):
        src = first + r - top
        row = uint64(r) * wp
        if src < 0 or src >= h:
            for q in range(wp):
                rows[row + q] = 0.0
            continue
        for q in range(lo):
            rows[row + q] = 0.0
        off = plane + uint64(src * w) - lo
        for q in range(lo, hi):
            rows[row + q] = x[off + q]
        for q in range(hi, wp):
            rows[row + q] = 0.0


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def scatter_plane(loc, v, elements, ks, big, base):  # pragma: no cover - compiled
    """A plane's (elements, tiles) block ``loc`` into ``v``'s runs: element ``e``'s ``ks``
    tiles at ``e * big + base`` (36 or 16 contiguous runs a plane; written per tile row as
    short scattered runs they measured ~2x slower)."""
    for e in range(elements):
        dst = uint64(e) * big + base
        src = uint64(e) * ks
        for t in range(ks):
            v[dst + t] = loc[src + t]


#: tiles an output transform's stage covers at least (a band of tile rows; ``band_rows``), or
#: whole planes at once where a plane has fewer (``chunk_plan``)
BAND_TILES = 256


@njit(cache=True, nogil=True, inline="always")
def band_rows(tx):  # pragma: no cover - compiled
    """Tile rows an output transform takes at a time for ``tx`` tiles a row."""
    return max(1, BAND_TILES // tx)


@njit(cache=True, nogil=True, inline="always")
def chunk_plan(ty, tx):  # pragma: no cover - compiled
    """``(planes, band)``: an output transform's chunk is ``band`` tile rows of one plane, or,
    where a whole plane has fewer than ``BAND_TILES`` tiles, ``planes`` whole planes that lie
    one after the other in the products (``band`` = ``ty``). On the small maps of late layers
    (13x13, 14x14: 16 tiles a plane) a plane's stage loops were too short for a vector body
    and ran in their scalar remainders; a chunk of planes is one long loop."""
    band = band_rows(tx)
    if band < ty:
        return 1, band
    return max(1, BAND_TILES // (ty * tx)), ty


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def store_chunk(o, tiles, rows, i0, step, ty, tx, q0, planes, n, m_count, y, z, bias, oh, ow, act, alpha,
                beta):  # pragma: no cover - compiled
    """The output rows of a chunk (:func:`chunk_plan`) from its band buffer ``o`` of ``tiles``
    tiles: ``planes`` planes in the products' order from ``q0`` (``q = channel * n + image``),
    each its ``rows`` tile rows from ``i0``, stored through :func:`store_band` into output
    plane ``image * M + channel`` with that channel's bias."""
    has_z = z.shape[0] > 0
    per_plane = ty * tx
    for j in range(planes):
        q = q0 + j
        m = q // n
        p = (q - m * n) * m_count + m
        store_band(o, uint64(step * j * per_plane), tiles, rows, i0, step, tx, y, z, uint64(p * oh * ow), oh, ow,
                   bias[m], has_z, act, alpha, beta)


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def store_row(line, src, y, z, d, ow, bv, has_z, act, alpha, beta):  # pragma: no cover - compiled
    """One output row from the output transform's ``line`` at ``src``: plus the bias and the
    residual, through the activation, into ``y`` at ``d``."""
    for ox in range(uint64(ow)):
        val = line[src + ox] + bv
        if has_z:
            val += z[d + ox]
        y[d + ox] = activate(val, act, alpha, beta)


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def store_band(o, start, tiles, rows, i0, step, tx, y, z, plane, oh, ow, bv, has_z, act, alpha,
               beta):  # pragma: no cover - compiled
    """The output rows of a band of ``rows`` tile rows from ``i0`` (``step`` output rows and
    columns a tile) from the output transform's band buffer ``o`` (row ``a`` of every tile
    at ``start + step * a * tiles``, its tiles' columns in order), through :func:`store_row`."""
    for r in range(rows):
        for a in range(step):
            oy = step * (i0 + r) + a
            if oy >= oh:
                break
            src = uint64(start) + uint64(step * a) * tiles + uint64(step * r * tx)
            store_row(o, src, y, z, plane + uint64(oy * ow), ow, bv, has_z, act, alpha, beta)
