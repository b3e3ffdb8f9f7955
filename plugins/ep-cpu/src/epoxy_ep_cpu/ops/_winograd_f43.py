"""Winograd F(4x4, 3x3): 3x3 stride-1 convolutions with 36 multiplies per 4x4 output tile.

Direct convolution spends 9 multiply-adds per output and input channel, F(2x2, 3x3) 4,
F(4x4, 3x3) 2.25. Each 6x6 input tile ``d`` (step 4) gives the 4x4 output tile
``A^T [(G g G^T) * (B^T d B)] A``; over all tiles the 36 elementwise products are 36 GEMMs
``(M x C) @ (C x tiles)``, the bulk of the work, which BLAS runs near its peak.

The two transforms are linear maps of a whole tile, so each is one GEMM too: the input
tiles, gathered as a (36, C * tiles) matrix, are multiplied by the Kronecker product
``B^T (x) B^T`` (36 x 36), and the products by ``A^T (x) A^T`` (16 x 36). That costs
36 (resp. 16) multiply-adds per transformed element, but runs in BLAS instead of a dozen
numpy passes per tile row, and is a small share next to the main GEMMs once M and C are
64 or more. The image is processed in bands of tile rows so that the gathered tiles stay
in cache.

The transform matrices are those of Lavin & Gray (2015), interpolation points 0, +-1, +-2
and infinity. Rounding error grows with the tile size: about 1e-5 relative in float32 on
random data (F(2x2, 3x3): 1e-6), well inside float32 model tolerances; float64 inputs keep
the direct paths (``use_f43`` says no).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

_BT = np.array(
    [
        [4, 0, -5, 0, 1, 0],
        [0, -4, -4, 1, 1, 0],
        [0, 4, -4, -1, 1, 0],
        [0, -2, -1, 2, 1, 0],
        [0, 2, -1, -2, 1, 0],
        [0, 4, 0, -5, 0, 1],
    ],
    dtype=np.float64,
)
_G = np.array(
    [
        [1 / 4, 0, 0],
        [-1 / 6, -1 / 6, -1 / 6],
        [-1 / 6, 1 / 6, -1 / 6],
        [1 / 24, 1 / 12, 1 / 6],
        [1 / 24, -1 / 12, 1 / 6],
        [0, 0, 1],
    ],
    dtype=np.float64,
)
_AT = np.array(
    [
        [1, 1, 1, 1, 1, 0],
        [0, 1, -1, 2, -2, 0],
        [0, 1, 1, 4, 4, 0],
        [0, 1, -1, 8, -8, 1],
    ],
    dtype=np.float64,
)
#: tile transforms as single matrices over the flattened (row, column) tile index
_KRON_B = np.kron(_BT, _BT).astype(np.float32)  # (36, 36)
_KRON_A = np.kron(_AT, _AT).astype(np.float32)  # (16, 36)
#: the weight transform G g G^T as one matrix over the flattened 3x3 kernel
_KRON_G = np.kron(_G, _G)  # (36, 9), float64: weights are transformed once, exactly enough
#: column 1 of A^T is all ones, so a bias added to product (1, 1) reaches all 16 outputs
_BIAS_POSITION = 1 * 6 + 1

#: tiles per band: at least this many (the main GEMMs lose efficiency below ~200 columns)
_MIN_BAND_TILES = 256
#: and up to this many gathered elements (36 * C * tiles) when that allows more
_BAND_ELEMENTS = 1 << 20


def f43_weights(w: np.ndarray) -> np.ndarray:
    """``(M, C, 3, 3)`` float32 weights as the ``(36, M, C)`` matrices ``G g G^T`` (one
    float64 GEMM: 16 ms for 512 x 512 channels, 4x faster than the einsum)."""
    m, c = w.shape[:2]
    u = _KRON_G @ w.reshape(m * c, 9).T.astype(np.float64)
    return np.ascontiguousarray(u.reshape(36, m, c), dtype=np.float32)


def _band_rows(c: int, tiles_x: int, tiles_y: int) -> int:
    by_size = _BAND_ELEMENTS // max(1, 36 * c * tiles_x)
    by_gemm = -(-_MIN_BAND_TILES // tiles_x)
    return max(1, min(tiles_y, max(by_size, by_gemm)))


def conv_f43(
    x: np.ndarray, u: np.ndarray, begin: list[int], out_sp: list[int], bias: np.ndarray | None = None
) -> np.ndarray:
    """3x3 stride-1 undilated convolution of float32 ``x`` (N, C, H, W) with F(4x4, 3x3)
    weights ``u`` (36, M, C), top/left padding ``begin``, plus ``bias`` (M,)."""
    n, c, h, w = x.shape
    m = u.shape[1]
    oh, ow = out_sp
    ty, tx = -(-oh // 4), -(-ow // 4)
    hp, wp = 4 * ty + 2, 4 * tx + 2
    xp = np.zeros((n, c, hp, wp), dtype=np.float32)
    hh, ww = min(h, hp - begin[0]), min(w, wp - begin[1])
    xp[:, :, begin[0] : begin[0] + hh, begin[1] : begin[1] + ww] = x[:, :, :hh, :ww]
    y = np.empty((n, m, 4 * ty, 4 * tx), dtype=np.float32)
    band = _band_rows(c, tx, ty)
    s_c, s_h, s_w = xp.strides[1:]
    col_bias = None if bias is None else bias.reshape(m, 1)
    for b in range(n):
        y_tiles = y[b].reshape(m, ty, 4, tx, 4)
        for t0 in range(0, ty, band):
            nb = min(ty, t0 + band) - t0
            tiles = nb * tx
            window = as_strided(xp[b, :, 4 * t0 :], (6, 6, c, nb, tx), (s_h, s_w, s_c, 4 * s_h, 4 * s_w))
            d = np.empty((36, c * tiles), dtype=np.float32)
            d.reshape(6, 6, c, nb, tx)[...] = window
            v = np.matmul(_KRON_B, d)
            prod = np.matmul(u, v.reshape(36, c, tiles))
            if col_bias is not None:
                prod[_BIAS_POSITION] += col_bias
            out = np.matmul(_KRON_A, prod.reshape(36, m * tiles))
            y_tiles[:, t0 : t0 + nb] = out.reshape(4, 4, m, nb, tx).transpose(2, 3, 0, 4, 1)
    if 4 * ty != oh or 4 * tx != ow:
        y = np.ascontiguousarray(y[:, :, :oh, :ow])
    return y
