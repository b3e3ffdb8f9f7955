"""Compiled depthwise 2-D convolution on small maps, vectorized across channels.

Why: :mod:`kernels_depthwise` vectorizes along one plane, which is the right loop on large
maps; on the small maps late in a mobile network (4x4, 2x2, a 3x3 or 5x5 kernel, a batch of
them) a plane is a few dozen elements, so its setup (placing it in a padded grid, three to
seven short passes, the store) costs far more than its arithmetic. The exporter
mobilenetv3 at batch 8 spent 39 us in one 48-channel 3x3 layer on 4x4 maps (0.055 M
multiply-adds, 1.4 G a second) and ~120 us of its 342 in four such layers; onnxruntime runs
the whole model in 113 us. Here each image is copied once, transposed to channels-last with
zero padding, into a scratch grid (split by column parity for stride 2); an output row is then
accumulated tap by tap, each tap one unit-stride loop over the row's ``ow * C`` outputs against
the tap's channel weights repeated per output column (per-position loops over C alone were as
fast on the smallest layers but 1.5-2x slower on 120 channels of 5x5: too short for their
setup), and the row is stored back to the NCHW output with the bias, an optional residual of
the output's shape and the exact activations (Relu, LeakyRelu, Clip, HardSigmoid's and
HardSwish's codes) applied; without a residual the activation runs over the row before the
store, while it is contiguous (session 49). One thread (the layers this takes are below the
thread grain); one compiled specialization per dtype.
"""

from __future__ import annotations

import numpy as np
from numba import njit, uint64

from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
from .activations import activate_wide


@njit(cache=True, nogil=True, boundscheck=False, fastmath={"contract"})
def depthwise_channels(x, wrow, brow, z, y, scratch, dims, act, alpha, beta):  # pragma: no cover - compiled
    """``y = act(depthwise(x) + bias + z)``. ``x``: NCHW flat; ``wrow`` / ``brow``: the weights
    and bias as :func:`row_weights` lays them out; ``scratch``: :func:`scratch_size` elements
    (the grid of one image, then one output row's accumulators); ``dims``: N, C, H, W, oh, ow,
    kh, kw, pad top, pad left, stride, hp, wq (:func:`grid_shape`; pads >= 0, grid cells past
    the input stay zero). The grid is channels last and split by column parity for stride 2
    (column phase, row, column, channel), so for one output row and one tap the inputs of the
    whole row are one contiguous run of ``ow * C`` elements, as are the tap's weights, repeated
    per output column: the update is one long unit-stride loop."""
    n, c, h, wd, oh, ow = dims[0], dims[1], dims[2], dims[3], dims[4], dims[5]
    kh, kw, pt, pl, s, hp, wq = dims[6], dims[7], dims[8], dims[9], dims[10], dims[11], dims[12]
    grid = s * hp * wq * c
    row = uint64(ow * c)
    xt = scratch[:grid]
    acc = scratch[grid:grid + ow * c]
    rows = min(h, hp - pt)  # input rows and columns inside the grid (the others no window reads)
    cols = min(wd, s * wq - pl)
    plane = uint64(h * wd)
    out_plane = uint64(oh * ow)
    has_z = z.shape[0] > 0
    for q in range(uint64(grid)):
        xt[q] = 0.0
    for b in range(n):
        xb = uint64(b * c) * plane
        for iy in range(rows):  # NCHW -> the channels-last phase grid (the padding stays zero)
            for ix in range(cols):
                gc = ix + pl
                dst = uint64((((gc % s) * hp + iy + pt) * wq + gc // s) * c)
                src = xb + uint64(iy * wd + ix)
                for ch in range(uint64(c)):
                    xt[dst + ch] = x[src + ch * plane]
        yb = uint64(b * c) * out_plane
        for oy in range(oh):
            for q in range(row):
                acc[q] = brow[q]
            for ky in range(kh):
                gr = oy * s + ky
                for kx in range(kw):
                    xo = uint64((((kx % s) * hp + gr) * wq + kx // s) * c)
                    wo = uint64(ky * kw + kx) * row
                    for q in range(row):
                        acc[q] += wrow[wo + q] * xt[xo + q]
            yr = yb + uint64(oy * ow)
            if has_z:
                for ch in range(c):
                    at = yr + uint64(ch) * out_plane
                    for ox in range(ow):
                        v = acc[uint64(ox * c + ch)] + z[at + uint64(ox)]
                        y[at + uint64(ox)] = activate_wide(v, act, alpha, beta)
            else:
                # the activation over the row while it is contiguous (a vectorized select):
                # in the transposing store below it was a branch per element, mispredicted on
                # half of them (a ReLU'd 4x4 layer ran 2x slower than without an activation)
                _activate_row(acc, row, act, alpha, beta)
                for ch in range(c):
                    at = yr + uint64(ch) * out_plane
                    for ox in range(ow):
                        y[at + uint64(ox)] = acc[uint64(ox * c + ch)]


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


def row_weights(w: np.ndarray, bias: np.ndarray, ow: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """``(C, 1, kh, kw)`` depthwise weights and ``(C,)`` bias as the kernel reads them: per tap,
    the channel vector repeated for each of ``ow`` output columns (flat ``(kh * kw, ow * C)``),
    and the bias repeated the same way (``ow * C``)."""
    c, _, kh, kw = w.shape
    taps = np.asarray(w, dtype=dtype).reshape(c, kh * kw).T  # (kh * kw, C)
    wrow = np.ascontiguousarray(np.tile(taps[:, None, :], (1, ow, 1))).reshape(-1)
    return wrow, np.ascontiguousarray(np.tile(np.asarray(bias, dtype=dtype), ow))


def grid_shape(out_sp: tuple[int, int], kernel: tuple[int, int], stride: int) -> tuple[int, int]:
    """The grid's rows and the columns of each column phase: what the outputs' windows read."""
    wp = (out_sp[1] - 1) * stride + kernel[1]
    return (out_sp[0] - 1) * stride + kernel[0], -(-wp // stride)


def scratch_size(c: int, grid: tuple[int, int], stride: int, ow: int) -> int:
    """Elements of the kernel's scratch: the grid's phases, then one output row's accumulators."""
    return stride * grid[0] * grid[1] * c + ow * c
