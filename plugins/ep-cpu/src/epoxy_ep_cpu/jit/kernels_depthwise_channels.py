"""Compiled depthwise 2-D convolution on small maps, vectorized across channels.

Why: :mod:`kernels_depthwise` vectorizes along one plane, which is the right loop on large
maps; on the small maps late in a mobile network (4x4, 2x2, a 3x3 or 5x5 kernel, a batch of
them) a plane is a few dozen elements, so its setup (placing it in a padded grid, three to
seven short passes, the store) costs far more than its arithmetic. The exporter
mobilenetv3 at batch 8 spent 39 us in one 48-channel 3x3 layer on 4x4 maps (0.055 M
multiply-adds, 1.4 G a second) and ~120 us of its 342 in four such layers; onnxruntime runs
the whole model in 113 us. Here each image is copied once into a channels-last scratch grid
with zero padding, through register transposes (:mod:`lane_transpose`); an output row is
then computed in register tiles of up to eight positions and one vector of channels over all
the taps (:mod:`depthwise_taps`; session 50: the tap-by-tap pass over the row's ``ow * C``
sums in memory before ran at a fifth of the multiply-add rate), the residual (a tensor of
the output's shape) added and the exact activation (Relu, LeakyRelu, Clip, HardSigmoid's and
HardSwish's codes) applied over the row while it is contiguous, one loop per code (session
49), and the row transposed back into the NCHW output. Stride 2 reads every other grid
column. A batch splits over its images on the threads (each share its own scratch slot); one
image runs on one thread. One compiled specialization per dtype.
"""

from __future__ import annotations

import numpy as np
from numba import njit, uint64

from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
from .activations import activate_wide
from .depthwise_taps import TILE, VECTOR_BYTES, tap_tile
from .lane_transpose import transpose_block


@njit(cache=True, nogil=True, boundscheck=False)
def depthwise_channels(x, wt, bias, z, y, scratch, dims, toff, act, alpha, beta, first, last):  # pragma: no cover
    """``y = act(depthwise(x) + bias + z)`` for images [first, last). ``x``: NCHW flat; ``wt``:
    the weights as :func:`tap_weights` lays them out, ``bias``: (C,); ``scratch``: one slot of
    :func:`scratch_size` elements per share (the padded grid of one image, channels last, then
    two output rows' worth); ``dims``: N, C, H, W, oh, ow, kh, kw, pad top, pad left, stride,
    hp, wp (:func:`grid_shape`; pads >= 0, grid cells past the input stay zero), the number of
    shares the images are split in (``threads.Shares``' contiguous bounds); ``toff``:
    :func:`tap_offsets`. For one output row and one tap the inputs of consecutive output
    columns lie ``stride * C`` apart in the grid: a register tile
    (:func:`depthwise_taps.tap_tile`) takes up to ``TILE`` of them times one vector of
    channels over all the taps; the moves into and out of channels-last order are register
    transposes (:func:`lane_transpose.transpose_block`)."""
    n, c, h, wd, oh, ow = dims[0], dims[1], dims[2], dims[3], dims[4], dims[5]
    kh, kw, pt, pl, s, hp, wp, shares = dims[6], dims[7], dims[8], dims[9], dims[10], dims[11], dims[12], dims[13]
    grid = hp * wp * c
    row = ow * c
    # this share's slot: shares are [i * n // shares, (i + 1) * n // shares) (native_pool.bounds_for)
    at = ((first * shares + n - 1) // n) * (grid + 2 * row)
    xt = scratch[at:at + grid]
    acc = scratch[at + grid:at + grid + row]
    zt = scratch[at + grid + row:at + grid + 2 * row]  # the residual's row, channels last
    rows = min(h, hp - pt)  # input rows and columns inside the grid (the others no window reads)
    cols = min(wd, wp - pl)
    plane = h * wd
    out_plane = oh * ow
    has_z = z.shape[0] > 0
    taps = kh * kw
    lanes = VECTOR_BYTES // x.itemsize  # a vector of channels (depthwise_taps.lanes_of)
    _zero_border(xt, hp, wp, c, pt, pl, rows, cols)
    for b in range(first, last):
        xb = b * c * plane
        for iy in range(rows):  # NCHW -> the channels-last grid (the padding stays zero)
            for ix in range(0, cols, lanes):
                for cb in range(0, c, lanes):
                    transpose_block(x, xb + cb * plane + iy * wd + ix, plane, min(lanes, c - cb),
                                    xt, ((iy + pt) * wp + ix + pl) * c + cb, c, min(lanes, cols - ix))
        yb = b * c * out_plane
        for oy in range(oh):
            xrow = oy * s * wp * c
            for ox in range(0, ow, TILE):
                for cb in range(0, c, lanes):
                    tap_tile(xt, wt, bias, acc, toff, taps, xrow + ox * s * c + cb, cb, ox * c + cb, c, s * c,
                             min(lanes, c - cb), min(TILE, ow - ox))
            yr = yb + oy * ow
            if has_z:
                for ox in range(0, ow, lanes):
                    for cb in range(0, c, lanes):
                        transpose_block(z, yr + cb * out_plane + ox, out_plane, min(lanes, c - cb),
                                        zt, ox * c + cb, c, min(lanes, ow - ox))
                for q in range(uint64(row)):
                    acc[q] = acc[q] + zt[q]
            _activate_row(acc, row, act, alpha, beta)
            for ox in range(0, ow, lanes):  # channels last -> the NCHW output row
                for cb in range(0, c, lanes):
                    transpose_block(acc, ox * c + cb, c, min(lanes, ow - ox),
                                    y, yr + cb * out_plane + ox, out_plane, min(lanes, c - cb))


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _zero_border(xt, hp, wp, c, pt, pl, rows, cols):  # pragma: no cover - compiled
    """Zero the grid cells no image fills (the padding around rows [pt, pt + rows) and
    columns [pl, pl + cols)): the images' copies overwrite the rest."""
    line = uint64(wp * c)
    for q in range(uint64(pt) * line):
        xt[q] = 0.0
    for q in range(uint64(pt + rows) * line, uint64(hp) * line):
        xt[q] = 0.0
    for iy in range(pt, pt + rows):
        at = uint64(iy) * line
        for q in range(uint64(pl * c)):
            xt[at + q] = 0.0
        for q in range(uint64((pl + cols) * c), line):
            xt[at + q] = 0.0


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _activate_loop(acc, n, act, alpha, beta):  # pragma: no cover - compiled
    for q in range(n):
        acc[q] = activate_wide(acc[q], act, alpha, beta)


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _activate_row(acc, row, act, alpha, beta):  # pragma: no cover - compiled
    """``acc[:row]`` through ``activate_wide`` in place, one loop per code: inlined with a
    constant code, each loop's branches fold into a select LLVM vectorizes (the same bits, the
    same function on the same values)."""
    n = uint64(row)
    if act == 1:
        _activate_loop(acc, n, 1, alpha, beta)
    elif act == 2:
        _activate_loop(acc, n, 2, alpha, beta)
    elif act == 3:
        _activate_loop(acc, n, 3, alpha, beta)
    elif act == 4:
        _activate_loop(acc, n, 4, alpha, beta)
    elif act == 5:
        _activate_loop(acc, n, 5, alpha, beta)
    elif act != 0:
        _activate_loop(acc, n, act, alpha, beta)


def tap_weights(w: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``(C, 1, kh, kw)`` depthwise weights as the kernel reads them: per tap (row by row,
    column by column), the channels' weights (flat ``(kh * kw, C)``)."""
    c, _, kh, kw = w.shape
    return np.ascontiguousarray(np.asarray(w, dtype=dtype).reshape(c, kh * kw).T).reshape(-1)


def tap_offsets(kernel: tuple[int, int], grid: tuple[int, int], c: int) -> np.ndarray:
    """Per tap (row by row, column by column), where its input for output (0, 0) lies in the
    channels-last grid (:func:`grid_shape`'s rows and columns, ``c`` channels)."""
    return np.array([(ky * grid[1] + kx) * c for ky in range(kernel[0]) for kx in range(kernel[1])], dtype=np.int64)


def grid_shape(out_sp: tuple[int, int], kernel: tuple[int, int], stride: int) -> tuple[int, int]:
    """The grid's rows and columns: what the outputs' windows read."""
    return (out_sp[0] - 1) * stride + kernel[0], (out_sp[1] - 1) * stride + kernel[1]


def scratch_size(c: int, grid: tuple[int, int], ow: int) -> int:
    """Elements of the kernel's scratch: the grid, then one output row's sums and residual."""
    return grid[0] * grid[1] * c + 2 * ow * c
