"""Convolutions: Conv, ConvTranspose, ConvInteger, QLinearConv, DeformConv, Col2Im.

Conv is im2col (a strided window view copied once) followed by one batched BLAS matmul per
call; groups, depthwise included, are a batch axis of that matmul. 1x1 stride-1 unpadded
convolutions skip im2col and are a plain GEMM on the input viewed as a matrix. Faster paths
(see "fast paths" below): Winograd F(4x4, 3x3) (``_winograd_f43``) and F(2x2, 3x3) for 3x3
stride-1 layers, row-shift GEMMs for layers with few output channels, and flat or
channels-last depthwise kernels; ``pick_path`` chooses per layer shape, within what the
provider's ``conv_winograd`` option allows. Constant weights (from ``NodeSpec.constants``)
are cast, laid out and Winograd-transformed once, in the factory. With the jit tier on,
``use_jit`` sends depthwise and small layers to the compiled direct kernel
(``jit/kernels_conv.py``), which also applies FusedConv's residual and activation in its pass
(``conv_kernel`` with an ``Epilogue``); these paths stay the reference and the fallback.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from .. import jit, settings
from ..registry import KERNELS
from ._attr_checks import check_at_least
from ._conv_tuning import blas_key, fastest
from ._conv_util import col2im_add, compute_dtype, pad_spatial, padded_shape, resolve_pads, windows
from ._util import buffer_guard, constant_input, output_guard, work_bytes_dtype
from ._winograd_f43 import conv_f43, f43_weights

_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _auto_pad(node: NodeSpec) -> str:
    auto_pad = node.attr("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad not in _AUTO_PADS:
        raise Unsupported(f"auto_pad {auto_pad!r}")
    return auto_pad


class _Geometry:
    """Sliding-window attributes of a node, defaults filled in per spatial rank."""

    def __init__(self, node: NodeSpec) -> None:
        self.seen: dict[tuple, tuple] = {}  # see _geometry_for
        self.auto_pad = _auto_pad(node)
        self.kernel = node.attr("kernel_shape")
        self._strides = node.attr("strides")
        self._dilations = node.attr("dilations")
        self._pads = node.attr("pads")
        # a 0 stride divides by zero, a 0 dilation or kernel reads one pixel forever
        for name, values in (("kernel_shape", self.kernel), ("strides", self._strides),
                             ("dilations", self._dilations)):
            check_at_least(node, name, tuple(values or ()), 1)
        check_at_least(node, "group", (int(node.attr("group", 1)),), 1)
        # buffers sized from pads, strides and output_shape (attributes) are refused before
        # they are allocated: at session creation where the input shape is static
        self._padded_guard = buffer_guard(node, "padded input")
        self._span_guard = buffer_guard(node, "accumulation buffer")
        self._out_guard = output_guard(node)
        xt = node.input_types[0] if node.input_types else None
        if xt is not None and xt.is_static and self._pads and self.auto_pad == "NOTSET":
            nsp = len(xt.shape) - 2  # type: ignore[arg-type]
            pads = tuple(int(p) for p in self._pads)
            if nsp > 0 and len(pads) == 2 * nsp:
                self.check_sizes(xt.shape, pads[:nsp], pads[nsp:], None, xt.dtype or np.dtype(np.float32))  # type: ignore[arg-type]

    def check_sizes(self, x_shape: Sequence[int], begin: Sequence[int], end: Sequence[int],
                    out_shape: Sequence[int] | None, dtype: np.dtype) -> None:
        """Refuse the padded input or the output when too large to allocate."""
        wide = work_bytes_dtype(dtype)
        self._padded_guard(padded_shape(x_shape, begin, end), wide)
        if out_shape is not None:
            self._out_guard(out_shape, wide)

    def check_span(self, span_shape: Sequence[int], out_shape: Sequence[int], dtype: np.dtype) -> None:
        """ConvTranspose's accumulation buffer and output, refused when too large."""
        wide = work_bytes_dtype(dtype)
        self._span_guard(span_shape, wide)
        self._out_guard(out_shape, wide)

    def lift_1d(self) -> bool:
        """See a 1-D layer as a 2-D one of height 1, so the 2-D paths (the compiled ones and
        their prepared calls) run it; False, and nothing changed, when its attributes are not
        those of a 1-D layer (the general path then reports what is wrong)."""
        one = (self.kernel, self._strides, self._dilations)
        if any(v is not None and len(v) != 1 for v in one) or (self._pads is not None and len(self._pads) != 2):
            return False
        self.kernel = [1, *self.kernel] if self.kernel is not None else None
        self._strides = [1, *self._strides] if self._strides is not None else None
        self._dilations = [1, *self._dilations] if self._dilations is not None else None
        self._pads = [0, self._pads[0], 0, self._pads[1]] if self._pads is not None else None
        return True

    def get(self, nsp: int, kernel: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        strides = tuple(self._strides) if self._strides else (1,) * nsp
        dilations = tuple(self._dilations) if self._dilations else (1,) * nsp
        pads = tuple(self._pads) if self._pads else (0,) * (2 * nsp)
        return strides, dilations, pads


def conv_cols(
    x: np.ndarray,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    begin: list[int],
    end: list[int],
    out_sp: list[int],
) -> np.ndarray:
    """im2col: ``(N, C, *kernel, *out)`` contiguous (or a view for 1x1 stride-1 convs)."""
    nsp = len(kernel)
    if all(k == 1 for k in kernel) and not any(begin) and not any(end):
        if all(s == 1 for s in strides):
            return x.reshape(x.shape[:2] + (1,) * nsp + x.shape[2:])
        sl = (slice(None), slice(None)) + tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out_sp, strides))
        return np.ascontiguousarray(x[sl]).reshape(x.shape[:2] + (1,) * nsp + tuple(out_sp))
    xp = pad_spatial(x, begin, end, 0)
    v = windows(xp, out_sp, kernel, strides, dilations)  # (N, C, *O, *K)
    perm = (0, 1) + tuple(range(2 + nsp, 2 + 2 * nsp)) + tuple(range(2, 2 + nsp))
    return np.ascontiguousarray(v.transpose(perm))


def _split_matmul() -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """numpy's matmul, or the jit tier's split one once it set OpenBLAS to one thread
    (``jit.threads.matmul``; the tier is not imported here before that)."""
    import sys

    threads = sys.modules.get("epoxy_ep_cpu.jit.threads")
    return threads.matmul if threads is not None and threads._pinned is not None else np.matmul  # type: ignore


def grouped_matmul(w: np.ndarray, cols: np.ndarray, group: int, out_sp: list[int]) -> np.ndarray:
    """``w`` (M, C/G, *K) times ``cols`` (N, C, *K, *O) per group -> (N, M, *O)."""
    n, c = cols.shape[:2]
    m = w.shape[0]
    ck = (c // group) * math.prod(w.shape[2:])
    o = math.prod(out_sp)
    cm = cols.reshape(n, group, ck, o)
    wm = w.reshape(group, m // group, ck)
    matmul = _split_matmul()
    if group == 1:
        out = matmul(wm[0], cm[:, 0])  # (N, M, O)
    else:
        # (N, G, M/G, O): groups (depthwise too) are the batch axis; one image as a plain stack
        out = matmul(wm, cm[0])[None] if n == 1 else matmul(wm, cm)
    return out.reshape((n, m) + tuple(out_sp))


def conv_nd(
    x: np.ndarray,
    w: np.ndarray,
    group: int,
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    begin: list[int],
    end: list[int],
    out_sp: list[int],
) -> np.ndarray:
    n, m = x.shape[0], w.shape[0]
    if n == 0 or m == 0 or any(o == 0 for o in out_sp) or x.shape[1] == 0:
        return np.zeros((n, m) + tuple(out_sp), dtype=x.dtype)
    kernel = tuple(w.shape[2:])
    ck = x.shape[1] * math.prod(kernel)
    row = math.prod(out_sp[1:])
    if group == 1 and len(out_sp) >= 1 and n * ck * row * out_sp[0] > _TILE_ABOVE and not all(k == 1 for k in kernel):
        return _conv_tiled(x, w, strides, dilations, begin, end, out_sp, ck, row)
    cols = conv_cols(x, kernel, strides, dilations, begin, end, out_sp)
    return grouped_matmul(w, cols, group, out_sp)


#: im2col buffers above this many elements are built and multiplied in row tiles of about
#: _TILE elements: no huge temporary, and each tile is still warm in cache for the GEMM.
_TILE_ABOVE = 1 << 22
_TILE = 1 << 20


def _conv_tiled(x, w, strides, dilations, begin, end, out_sp, ck, row):
    n, m = x.shape[0], w.shape[0]
    nsp = len(out_sp)
    kernel = tuple(w.shape[2:])
    xp = pad_spatial(x, begin, end, 0)
    v = windows(xp, out_sp, kernel, strides, dilations)  # (N, C, *O, *K)
    perm = (0, 1) + tuple(range(2 + nsp, 2 + 2 * nsp)) + tuple(range(2, 2 + nsp))
    v = v.transpose(perm)  # (N, C, *K, *O)
    y = np.empty((n, m, out_sp[0], row), dtype=x.dtype)
    wm = w.reshape(m, ck)
    rows = max(1, _TILE // (n * ck * row))
    lead = (slice(None),) * (2 + nsp)
    for r0 in range(0, out_sp[0], rows):
        r1 = min(out_sp[0], r0 + rows)
        cols = np.ascontiguousarray(v[lead + (slice(r0, r1),)]).reshape(n, ck, (r1 - r0) * row)
        np.matmul(wm, cols, out=y[:, :, r0:r1].reshape(n, m, (r1 - r0) * row))
    return y.reshape((n, m) + tuple(out_sp))


#: geometries remembered per node (by input shape), and the largest output they are kept for:
#: a shape whose buffers passed the memory checks once is not re-checked (small ones only,
#: the memory left cannot change their verdict in practice)
_GEOMETRIES_PER_NODE = 16
_REMEMBERED_MAX_ELEMENTS = 1 << 22


def _geometry_for(geo: _Geometry, x: np.ndarray, w: np.ndarray, group: int):
    """Kernel, strides, dilations, pads and output size of this call, checked; remembered per
    input shape (computing them is a fifth of a tiny layer's time)."""
    key = (x.shape, x.dtype, w.shape, group)
    found = geo.seen.get(key)
    if found is not None:
        return found
    found = _compute_geometry(geo, x, w, group)
    out_elements = math.prod(found[-1]) * w.shape[0] * x.shape[0]
    if x.size <= _REMEMBERED_MAX_ELEMENTS and out_elements <= _REMEMBERED_MAX_ELEMENTS:
        if len(geo.seen) >= _GEOMETRIES_PER_NODE:
            geo.seen.clear()
        geo.seen[key] = found
    return found


def _compute_geometry(geo: _Geometry, x: np.ndarray, w: np.ndarray, group: int):
    nsp = x.ndim - 2
    kernel = tuple(int(k) for k in w.shape[2:])
    if geo.kernel and tuple(geo.kernel) != kernel:
        raise ValueError(f"kernel_shape {tuple(geo.kernel)} does not match weight shape {w.shape}")
    if x.shape[1] != w.shape[1] * group:
        raise ValueError(f"input channels {x.shape[1]} != weight channels {w.shape[1]} x group {group}")
    strides, dilations, pads = geo.get(nsp, kernel)
    out_sp, begin, end, _ = resolve_pads(x.shape[2:], kernel, strides, dilations, pads, geo.auto_pad)
    geo.check_sizes(x.shape, begin, end, (x.shape[0], w.shape[0], *out_sp), x.dtype)
    return kernel, strides, dilations, begin, end, out_sp


def _bias_shape(m: int, nsp: int) -> tuple[int, ...]:
    return (m,) + (1,) * nsp


# --------------------------------------------------------------------------- fast paths
#
# Grouped convolutions are im2col + one batched matmul with the groups as the batch axis
# (``grouped_matmul``). Depthwise 2-D ones with many channels (deep layers, small images) are
# a multiply-add per kernel position on the channels-last image instead: every operand then
# has the channels as a unit-stride inner axis (2.5x faster at 544 channels on 7x7; slower
# than the batched matmul with few channels on large images, which keep it).
#
# Winograd F(2x2, 3x3) for 3x3 stride-1 undilated group-1 convolutions: each 4x4 input tile
# d gives a 2x2 output tile A^T [(G g G^T) * (B^T d B)] A, so the 16 elementwise products over
# all tiles are 16 GEMMs (M x C) @ (C x tiles) with 4 multiplies per output instead of 9.
# The transforms only add and subtract; the input is processed in bands of tile rows so that
# the transformed tiles stay in cache. Constant weights are transformed once.

#: Winograd pays where the GEMMs are big enough to dominate the transforms, which numpy runs
#: on one thread (measured with OpenBLAS: 1.2-1.8x on one core from 64 channels and 14x14 up,
#: break-even below; with 2 BLAS threads the GEMMs halve but the transforms do not, so it
#: takes C * M >= ~8k channel pairs to stay ahead: 1.1-1.5x there, 0.8-0.95x below)
_WINO_MIN_C = 64
_WINO_MIN_M = 32
_WINO_MIN_CM = 4096  # 1 BLAS thread: 1.25x at 64 x 64 channels on 56x56 and 64 x 96 on 28x28
_WINO_MIN_TILES = 16
_WINO_SMALL_C = 96  # with fewer input channels than this, only on large images:
_WINO_SMALL_C_TILES = 100
_WINO_PER_CALL_TILES = 196  # weights that are not constants: transformed each call
#: elements of the transformed input (16 * C * tiles) per band
_WINO_BAND = 1 << 19


def winograd_weights(w: np.ndarray) -> np.ndarray:
    """``(M, C, 3, 3)`` weights as the ``(16, M, C)`` matrices G g G^T of F(2x2, 3x3)."""
    m, c = w.shape[:2]
    dt = w.dtype
    g = np.ascontiguousarray(w.reshape(m, c, 9).transpose(2, 0, 1)).reshape(3, 3, m, c)

    def apply_g(v: np.ndarray, out: np.ndarray) -> None:
        """G (4x3) times ``v`` over its first axis, into ``out``: rows g0, (g0+g1+g2)/2,
        (g0-g1+g2)/2, g2."""
        out[0] = v[0]
        out[3] = v[2]
        np.add(v[0], v[2], out=out[1])
        out[1] *= dt.type(0.5)
        half1 = v[1] * dt.type(0.5)
        np.subtract(out[1], half1, out=out[2])
        out[1] += half1

    t = np.empty((4, 3, m, c), dtype=dt)
    apply_g(g, t)  # over kernel rows
    u = np.empty((4, 4, m, c), dtype=dt)
    apply_g(t.swapaxes(0, 1), u.swapaxes(0, 1))  # over kernel columns
    return u.reshape(16, m, c)


def _wino_input(xb: np.ndarray, ty: int, tx: int, out: np.ndarray) -> None:
    """B^T d B of every 4x4 tile (step 2) of ``xb`` (N, C, 2ty+2, 2tx+2) into ``out``
    (4, 4, N, C, ty, tx)."""
    n, c = xb.shape[:2]
    # rows: (d0 - d2, d1 + d2, d2 - d1, d1 - d3) over tile rows; the columns are split into
    # even and odd ones first, so that every column operand below is a unit-stride slice
    r = [xb[:, :, i : i + 2 * ty : 2, :] for i in range(4)]
    rows = np.empty((4, n, c, ty, 2 * tx + 2), dtype=xb.dtype)
    np.subtract(r[0], r[2], out=rows[0])
    np.add(r[1], r[2], out=rows[1])
    np.subtract(r[2], r[1], out=rows[2])
    np.subtract(r[1], r[3], out=rows[3])
    even = np.ascontiguousarray(rows[..., 0::2])  # (4, N, C, ty, tx + 1)
    odd = np.ascontiguousarray(rows[..., 1::2])
    q0, q1, q2, q3 = even[..., :tx], odd[..., :tx], even[..., 1:], odd[..., 1:]
    np.subtract(q0, q2, out=out[:, 0])
    np.add(q1, q2, out=out[:, 1])
    np.subtract(q2, q1, out=out[:, 2])
    np.subtract(q1, q3, out=out[:, 3])


def _wino_output(mt: np.ndarray, y: np.ndarray) -> None:
    """A^T m A of the (4, 4, N, M, ty, tx) products into ``y`` (N, M, 2ty, 2tx)."""
    # over a: (m0 + m1 + m2, m1 - m2 - m3)
    s = np.empty((2,) + mt.shape[1:], dtype=mt.dtype)
    np.add(mt[0], mt[1], out=s[0])
    s[0] += mt[2]
    np.subtract(mt[1], mt[2], out=s[1])
    s[1] -= mt[3]
    # over b, into even / odd output columns, interleaved by one strided copy
    n, m, ty, tx = mt.shape[2:]
    cols = np.empty((2, n, m, ty, tx, 2), dtype=mt.dtype)  # (row parity a, ..., column parity b)
    for a in range(2):
        sa = s[a]
        c0, c1 = cols[a, ..., 0], cols[a, ..., 1]
        np.add(sa[0], sa[1], out=c0)
        c0 += sa[2]
        np.subtract(sa[1], sa[2], out=c1)
        c1 -= sa[3]
    y.reshape(n, m, ty, 2, tx, 2)[...] = cols.transpose(1, 2, 3, 0, 4, 5)


def conv_winograd(
    x: np.ndarray, u: np.ndarray, begin: list[int], out_sp: list[int], bias: np.ndarray | None = None
) -> np.ndarray:
    """3x3 stride-1 convolution of ``x`` (N, C, H, W) with F(2x2, 3x3) weights ``u``, plus
    ``bias`` (M,): added to the product of tile element (1, 1), which A^T . A spreads to all
    four outputs of the tile with weight 1 (a quarter of a pass over the output)."""
    n, c, h, w = x.shape
    m = u.shape[1]
    oh, ow = out_sp
    ty, tx = (oh + 1) // 2, (ow + 1) // 2
    hp, wp = 2 * ty + 2, 2 * tx + 2
    xp = np.zeros((n, c, hp, wp), dtype=x.dtype)
    hh, ww = min(h, hp - begin[0]), min(w, wp - begin[1])
    xp[:, :, begin[0] : begin[0] + hh, begin[1] : begin[1] + ww] = x[:, :, :hh, :ww]
    y = np.empty((n, m, 2 * ty, 2 * tx), dtype=x.dtype)
    band = max(1, min(ty, _WINO_BAND // max(1, 16 * n * c * tx)))
    for t0 in range(0, ty, band):
        t1 = min(ty, t0 + band)
        nb = t1 - t0
        v = np.empty((4, 4, n, c, nb, tx), dtype=x.dtype)
        _wino_input(xp[:, :, 2 * t0 : 2 * t1 + 2], nb, tx, v)
        if n == 1:
            mt = np.matmul(u, v.reshape(16, c, nb * tx))
        else:
            mt = np.matmul(u[:, None], v.reshape(16, n, c, nb * tx))
        if bias is not None:
            mt[5] += bias.reshape(m, 1)
        _wino_output(mt.reshape(4, 4, n, m, nb, tx), y[:, :, 2 * t0 : 2 * t1])
    if 2 * ty != oh or 2 * tx != ow:
        y = np.ascontiguousarray(y[:, :, :oh, :ow])
    return y


def use_winograd(c: int, m: int, out_sp: list[int], prepacked: bool = True) -> bool:
    """Whether F(2x2, 3x3) beats im2col for this layer. Weights transformed per call (not a
    constant) must be amortized over a large image."""
    tiles = ((out_sp[0] + 1) // 2) * ((out_sp[1] + 1) // 2)
    if not prepacked and tiles < _WINO_PER_CALL_TILES:
        return False
    if c < _WINO_MIN_C or m < _WINO_MIN_M or c * m < _WINO_MIN_CM or tiles < _WINO_MIN_TILES:
        return False
    return c >= _WINO_SMALL_C or tiles >= _WINO_SMALL_C_TILES


#: depthwise convolutions with at least this many channels run channels-last
_DEPTHWISE_CL_MIN_C = 256


def conv_depthwise_cl(
    x: np.ndarray,
    wk: np.ndarray,
    kernel: tuple[int, int],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    begin: list[int],
    end: list[int],
    out_sp: list[int],
    bias: np.ndarray | None = None,
) -> np.ndarray:
    """2-D convolution with one input channel per group and one output channel per input
    channel, plus ``bias`` (C,); ``wk`` is (kh * kw, C): the weights of each kernel position.
    Pads must be >= 0."""
    n, c, h, w = x.shape
    oh, ow = out_sp
    ph, pw = h + begin[0] + end[0], w + begin[1] + end[1]
    xp = np.zeros((n, ph, pw, c), dtype=x.dtype)
    xp[:, begin[0] : begin[0] + h, begin[1] : begin[1] + w] = x.transpose(0, 2, 3, 1)
    acc = np.empty((n, oh, ow, c), dtype=x.dtype)
    tmp = np.empty_like(acc)
    sh, sw = strides
    dh, dw = dilations
    k = 0
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            v = xp[:, i * dh : i * dh + (oh - 1) * sh + 1 : sh, j * dw : j * dw + (ow - 1) * sw + 1 : sw]
            if k == 0:
                np.multiply(v, wk[0], out=acc)
            else:
                np.multiply(v, wk[k], out=tmp)
                acc += tmp
            k += 1
    if bias is not None:
        acc += bias
    return np.ascontiguousarray(acc.transpose(0, 3, 1, 2))


#: group-1 stride-1 2-D convolutions with at most this many output channels use
#: ``conv_row_shift``: with few output channels the GEMM is cheap and im2col's 9x copy is
#: a large share (1.2-1.3x at 32 channels, the DenseNet growth layers)
_ROW_SHIFT_MAX_M = 48
#: elements of the shifted image copy per band of output rows (kept in cache for the GEMMs)
_ROW_SHIFT_BAND = 1 << 22


def row_shift_weights(w: np.ndarray) -> np.ndarray:
    """``(M, C, kh, kw)`` as ``(kh, M, kw * C)``: per kernel row, columns ordered (j, c)."""
    m, c, kh, kw = w.shape
    return np.ascontiguousarray(w.transpose(2, 0, 3, 1)).reshape(kh, m, kw * c)


def conv_row_shift(
    x: np.ndarray, wr: np.ndarray, kernel: tuple[int, int], begin: list[int], end: list[int], out_sp: list[int],
    bias: np.ndarray | None = None,
) -> np.ndarray:
    """Stride-1 undilated 2-D convolution (pads >= 0) computed on the padded width grid:
    the padded image flattened per channel makes every kernel position a column offset,
    so ``kw`` shifted copies of the image stacked as (kw * C, P) give, for kernel row i, the
    GEMM operand as a strided view at offset i * Wp: ``kh`` GEMMs with K = kw * C, summed;
    the ``kw - 1`` extra columns per output row are cut off at the end."""
    n, c, h, w = x.shape
    kh, kw = kernel
    m = wr.shape[1]
    hp, wp = h + begin[0] + end[0], w + begin[1] + end[1]
    oh, ow = out_sp
    p = hp * wp
    y = np.empty((n, m, oh, ow), dtype=x.dtype)
    band = max(1, min(oh, _ROW_SHIFT_BAND // max(1, kw * c * wp) - kh + 1))
    for b in range(n):
        xp = np.zeros((c, p + kw), dtype=x.dtype)
        xp[:, :p].reshape(c, hp, wp)[:, begin[0] : begin[0] + h, begin[1] : begin[1] + w] = x[b]
        for r0 in range(0, oh, band):
            r1 = min(oh, r0 + band)
            length = (r1 - r0) * wp
            span = length + (kh - 1) * wp
            sh = np.empty((kw, c, span), dtype=x.dtype)
            for j in range(kw):
                sh[j] = xp[:, r0 * wp + j : r0 * wp + j + span]
            shm = sh.reshape(kw * c, span)
            acc = np.matmul(wr[0], shm[:, :length])
            if kh > 1:
                tmp = np.empty_like(acc)
                for i in range(1, kh):
                    np.matmul(wr[i], shm[:, i * wp : i * wp + length], out=tmp)
                    acc += tmp
            acc3 = acc.reshape(m, r1 - r0, wp)[:, :, :ow]
            if bias is not None:
                np.add(acc3, bias.reshape(m, 1, 1), out=y[b, :, r0:r1])
            else:
                y[b, :, r0:r1] = acc3
    return y


#: channels-last depthwise only on small images (stride 1): above this many output pixels
#: the flat-grid im2col below wins (1.25x at 272 channels on 14x14, 1.5x at 136 on 28x28)
_DEPTHWISE_CL_MAX_PIXELS = 64


def conv_depthwise_flat(
    x: np.ndarray, w: np.ndarray, kernel: tuple[int, int], begin: list[int], end: list[int], out_sp: list[int],
    bias: np.ndarray | None = None,
) -> np.ndarray:
    """Stride-1 undilated depthwise 2-D convolution (one input and one output channel per
    group, pads >= 0) as im2col on the padded width grid: every kernel position is a column
    offset of the flattened padded image, so the columns are ``kh * kw`` plain slice copies
    (no strided gather), multiplied by one (C, 1, K) @ (C, K, L) batched matmul; the
    ``kw - 1`` extra columns per row are cut off."""
    n, c, h, wd = x.shape
    kh, kw = kernel
    hp, wp = h + begin[0] + end[0], wd + begin[1] + end[1]
    oh, ow = out_sp
    p = hp * wp
    length = oh * wp
    wf = w.reshape(c, 1, kh * kw)
    y = np.empty((n, c, oh, ow), dtype=x.dtype)
    for b in range(n):
        xp = np.zeros((c, p + kw), dtype=x.dtype)
        xp[:, :p].reshape(c, hp, wp)[:, begin[0] : begin[0] + h, begin[1] : begin[1] + wd] = x[b]
        cols = np.empty((c, kh * kw, length), dtype=x.dtype)
        for i in range(kh):
            for j in range(kw):
                off = i * wp + j
                cols[:, i * kw + j] = xp[:, off : off + length]
        r = np.matmul(wf, cols).reshape(c, oh, wp)[:, :, :ow]
        if bias is not None:
            np.add(r, bias.reshape(c, 1, 1), out=y[b])
        else:
            y[b] = r
    return y


def pick_path(
    c: int, m: int, kernel: tuple[int, ...], out_sp: list[int], prepacked: bool, dtype: np.dtype,
    winograd: tuple[str, ...] = ("F(4,3)", "F(2,3)"),
) -> str:
    """The path for a group-1, stride-1, undilated 2-D convolution with pads >= 0 of ``c``
    input and ``m`` output channels: "row-shift", "F(4,3)", "F(2,3)" or "im2col", among the
    Winograd variants allowed by the provider's ``conv_winograd`` option. Measured per layer
    shape of the bench models with ``bench/conv_paths.py`` (1 and 2 threads)."""
    if kernel == (3, 3) and "F(4,3)" in winograd and dtype == np.float32 and use_f43(c, m, out_sp, prepacked):
        return "F(4,3)"
    if m <= _ROW_SHIFT_MAX_M and kernel != (1, 1):
        return "row-shift"
    if kernel == (3, 3) and "F(2,3)" in winograd and use_winograd(c, m, out_sp, prepacked):
        return "F(2,3)"
    return "im2col"


#: F(4x4, 3x3) from this many input channels and input x output channel pairs ...
_F43_MIN_C = 48
_F43_MIN_CM = 32 * 96
#: ... and 4x4 output tiles (fewer tiles make its 36 GEMMs too narrow); with few output
#: channels (where row-shift is the alternative) or many channel pairs it takes more tiles
_F43_MIN_TILES = 9
_F43_NARROW_MIN_TILES = 36
_F43_WIDE_CM = 256 * 512
#: on small images (fewer than _F43_NARROW_MIN_TILES tiles, e.g. 13x13 / 14x14) it needs this
#: many channel pairs: below, its single-threaded tile gathers cost more than the GEMMs save
#: once BLAS runs on 2 threads (bench/conv_paths.py --threads 2: im2col or F(2x2) win there)
_F43_SMALL_IMAGE_CM = 128 * 256


def use_f43(c: int, m: int, out_sp: list[int], prepacked: bool = True) -> bool:
    """Whether F(4x4, 3x3) beats the other paths for this float32 layer."""
    tiles = -(-out_sp[0] // 4) * -(-out_sp[1] // 4)
    if not prepacked and tiles < _WINO_PER_CALL_TILES:
        return False
    if c < _F43_MIN_C or c * m < _F43_MIN_CM or tiles < _F43_MIN_TILES:
        return False
    if m <= _ROW_SHIFT_MAX_M or c * m >= _F43_WIDE_CM:
        return tiles >= _F43_NARROW_MIN_TILES
    return tiles >= _F43_NARROW_MIN_TILES or c * m >= _F43_SMALL_IMAGE_CM


#: multiply-adds below which a non-depthwise layer runs on the compiled direct kernel: there
#: im2col + GEMM is mostly numpy's fixed per-call cost (bench/conv_paths.py --jit, 1 thread:
#: 3x3 8->8 channels on 8x8 0.59x the numpy time, the exporter stems 3->8 3x3 stride 2 on
#: 32x32 0.51x and 3->16 4x4 stride 4 0.74x, 8->16 3x3 stride 2 0.52x); above, BLAS's GEMM
#: wins (16->64 3x3 on 55x55: 2.9x slower direct; 3->24 3x3 stride 2 on 224x224: 1.6x)
_JIT_MAX_MACS = 1 << 16
#: ... and for 1x1 layers, whose numpy path is already a single GEMM: 0.72-0.83x below this
#: (8->8 channels on 16x16, 2->32, 32->2 on 1x1, 8->16 stride 2), 0.98-1.2x above
_JIT_MAX_MACS_1X1 = 1 << 14


def use_jit(c: int, m: int, group: int, kernel: tuple[int, ...], strides: tuple[int, ...], begin, end,
            out_sp: list[int], dtype: np.dtype) -> bool:
    """Whether the compiled direct kernel runs this layer (jit tier on): 2-D float layers
    with pads >= 0 of the classes where it measured faster than the numpy paths
    (``bench/conv_paths.py --jit``, every conv of the light models and of the exporter CNNs,
    1 thread):

    - depthwise (one input channel per group), any stride and dilation: 0.36-0.65x the numpy
      time on the exporter CNNs (3x3 to 7x7, 8 to 48 channels, stride 1 and 2), 0.45-0.8x on
      shufflenet's (136-544 channels, 7x7 to 56x56); ``_Jit.route`` sends the undilated ones of
      stride 1 and 2 to ``kernels_depthwise``, the others to the direct kernel;
    - other layers with few multiply-adds (``_JIT_MAX_MACS``, ``_JIT_MAX_MACS_1X1``), any
      stride: the tiny exporter CNNs' convolutions and stems. Larger ones keep the BLAS paths,
      and so do grouped convs with many channels per group (shufflenet's 1x1 groups of 6-136
      channels: 1.4-7x slower direct).
    """
    if len(kernel) != 2 or dtype not in (np.float32, np.float64) or min(begin) < 0 or min(end) < 0:
        return False
    cg = c // group
    if cg == 1 and m == group:
        return True
    macs = cg * m * math.prod(kernel) * math.prod(out_sp)
    return macs <= (_JIT_MAX_MACS_1X1 if kernel == (1, 1) else _JIT_MAX_MACS)


class _ConvWeights:
    """A Conv's weight (and bias) in the layouts the paths multiply with: built once in the
    factory when the weight is a constant, else per call."""

    __slots__ = ("_gemm_columns", "_rows", "_transforms", "_w", "_wino", "_wino43", "_zero_bias", "bias", "chosen",
                 "depthwise_cl", "kernel", "let_go_when_packed", "w_shape")

    def __init__(self, w: np.ndarray, b: np.ndarray | None, cdt: np.dtype, group: int = 1,
                 transforms: ModuleType | None = None) -> None:
        self._w: np.ndarray | None = np.ascontiguousarray(w, dtype=cdt)
        self.w_shape = tuple(int(d) for d in self._w.shape)
        #: the rows call's packed columns (``gemm_columns``), shared by every input shape
        self._gemm_columns: Any = None
        #: whether the original weight goes once packed: the layer's static shape runs on the
        #: packed copy and the session dropped its own reference (``_release_for_rows``)
        self.let_go_when_packed = False
        # the jit tier's compiled Winograd weight transforms (float32 weights), when it runs:
        # 2-4x faster and no float64 temporaries, where session creation spent most of its time
        self._transforms = transforms if self.w.dtype == np.float32 else None
        self.kernel = tuple(int(k) for k in w.shape[2:])
        self.bias = None if b is None else np.ascontiguousarray(b, dtype=cdt).reshape(-1)
        self._wino: np.ndarray | None = None
        self._wino43: np.ndarray | None = None
        self._rows: np.ndarray | None = None
        self._zero_bias: np.ndarray | None = None
        self.chosen: dict[tuple[int, ...], str] = {}  # input shape -> path timed for it
        m = w.shape[0]
        self.depthwise_cl = None  # (kh * kw, C) for the channels-last depthwise path
        if group == m and w.shape[1] == 1 and len(self.kernel) == 2 and m >= _DEPTHWISE_CL_MIN_C:
            self.depthwise_cl = np.ascontiguousarray(self._w.reshape(m, -1).T)

    @property
    def w(self) -> np.ndarray:
        """The weight in the compute dtype; rebuilt from the packed columns when it was let go
        (a path other than the rows call needs it: a copy, made once)."""
        w = self._w
        if w is None:
            columns = self._gemm_columns.unpacked()  # (K, M)
            w = self._w = np.ascontiguousarray(columns.T).reshape(self.w_shape)
        return w

    def gemm_columns(self, rows: ModuleType) -> Any:
        """The weight packed as the rows call's GEMM columns (``kernels_conv_rows.pack_weights``),
        once for the layer; the original goes then when ``let_go_when_packed``."""
        columns = self._gemm_columns
        if columns is None:
            columns = self._gemm_columns = rows.pack_weights(self.w)
            if self.let_go_when_packed:
                self._w = None
        return columns

    def winograd(self) -> np.ndarray:
        u = self._wino
        if u is None:  # a value derived from the weight only: computing it twice is harmless
            fast = self._transforms
            u = self._wino = winograd_weights(self.w) if fast is None else fast.f23_weights(self.w)
        return u

    def winograd43(self) -> np.ndarray:
        u = self._wino43
        if u is None:
            fast = self._transforms
            u = self._wino43 = f43_weights(self.w) if fast is None else fast.f43_weights(self.w)
        return u

    def rows(self) -> np.ndarray:
        r = self._rows
        if r is None:
            r = self._rows = row_shift_weights(self.w)
        return r

    def bias_or_zeros(self) -> np.ndarray:
        """The bias, or zeros (M,): the jit kernel always starts a plane from its bias."""
        if self.bias is not None:
            return self.bias
        zb = self._zero_bias
        if zb is None:
            zb = self._zero_bias = np.zeros(self.w_shape[0], dtype=self.dtype)
        return zb

    @property
    def dtype(self) -> np.dtype:
        return self._w.dtype if self._w is not None else np.dtype(np.float32)  # only float32 weights are let go

    def keep_layouts(self, paths: set[str]) -> None:
        """Drop the weight layouts no path in ``paths`` multiplies with (after timing)."""
        if "F(2,3)" not in paths:
            self._wino = None
        if "F(4,3)" not in paths:
            self._wino43 = None
        if "row-shift" not in paths:
            self._rows = None


#: the flat group-1 paths by name: (x, weights, begin, end, out_sp) -> y
_FLAT_PATHS = {
    "row-shift": lambda x, pk, begin, end, out_sp: conv_row_shift(x, pk.rows(), pk.kernel, begin, end, out_sp, pk.bias),
    "F(4,3)": lambda x, pk, begin, end, out_sp: conv_f43(x, pk.winograd43(), begin, out_sp, pk.bias),
    "F(2,3)": lambda x, pk, begin, end, out_sp: conv_winograd(x, pk.winograd(), begin, out_sp, pk.bias),
}
#: weight layouts a path multiplies with, built at session creation for constant weights
_WEIGHT_LAYOUTS = {
    "row-shift": _ConvWeights.rows,
    "F(4,3)": _ConvWeights.winograd43,
    "F(2,3)": _ConvWeights.winograd,
}


def _im2col(x: np.ndarray, pk: _ConvWeights, group: int, strides, dilations, begin, end, out_sp) -> np.ndarray:
    y = conv_nd(x, pk.w, group, strides, dilations, begin, end, out_sp)
    if pk.bias is not None:
        y += pk.bias.reshape(_bias_shape(pk.w.shape[0], len(out_sp)))
    return y


def _flat_eligible(dtype: np.dtype, group: int, nsp: int, strides, dilations, begin, end) -> bool:
    """Group-1 stride-1 undilated 2-D float convolutions with pads >= 0: the layers that
    have several paths (``pick_path`` / ``flat_candidates``)."""
    return (
        group == 1
        and nsp == 2
        and strides == (1, 1)
        and dilations == (1, 1)
        and min(begin) >= 0
        and min(end) >= 0
        and dtype in (np.float32, np.float64)
    )


def _run_path(path: str, x: np.ndarray, pk: _ConvWeights, begin, end, out_sp) -> np.ndarray:
    if path == "im2col":
        return _im2col(x, pk, 1, (1, 1), (1, 1), begin, end, out_sp)
    return _FLAT_PATHS[path](x, pk, begin, end, out_sp)


def _conv_forward(
    x: np.ndarray, pk: _ConvWeights, group: int, geo: _Geometry, prepacked: bool, winograd: tuple[str, ...],
    fast: _Jit | None = None, z: np.ndarray | None = None, epi: Epilogue | None = None,
) -> tuple[np.ndarray, bool]:
    """``(y, done)``: ``done`` when the jit kernel already applied ``epi`` (FusedConv's
    residual and activation) in its pass; else the caller applies it."""
    w = pk.w
    _, strides, dilations, begin, end, out_sp = _geometry_for(geo, x, w, group)
    n, m = x.shape[0], w.shape[0]
    nsp = len(out_sp)
    if n == 0 or m == 0 or any(o == 0 for o in out_sp) or x.shape[1] == 0:
        y = np.zeros((n, m) + tuple(out_sp), dtype=x.dtype)
        if pk.bias is not None and y.size:  # no input channels: a sum over nothing, plus the bias
            y += pk.bias.reshape(_bias_shape(m, nsp)).astype(y.dtype, copy=False)
        return y, False
    if fast is not None:
        done = fast.run(x, pk, group, strides, dilations, begin, end, out_sp, z, epi)
        if done is not None:
            return done
        if use_jit(x.shape[1], m, group, pk.kernel, strides, begin, end, out_sp, x.dtype):
            return fast.run_direct(x, pk, group, strides, dilations, begin, out_sp, z, epi)
    return _numpy_forward(x, pk, group, strides, dilations, begin, end, out_sp, prepacked, winograd), False


def _numpy_forward(
    x: np.ndarray, pk: _ConvWeights, group: int, strides, dilations, begin, end, out_sp, prepacked: bool,
    winograd: tuple[str, ...],
) -> np.ndarray:
    """The numpy paths (the reference, and the fallback of the jit tier)."""
    w = pk.w
    m = w.shape[0]
    nsp = len(out_sp)
    if (
        group == m
        and x.shape[1] == m
        and w.shape[1] == 1
        and nsp == 2
        and strides == (1, 1)
        and dilations == (1, 1)
        and min(begin) >= 0
        and min(end) >= 0
        and (pk.depthwise_cl is None or out_sp[0] * out_sp[1] > _DEPTHWISE_CL_MAX_PIXELS)
        and x.dtype in (np.float32, np.float64)
    ):
        return conv_depthwise_flat(x, w, pk.kernel, begin, end, out_sp, pk.bias)
    if pk.depthwise_cl is not None and x.shape[1] == m and min(begin) >= 0 and min(end) >= 0:
        return conv_depthwise_cl(x, pk.depthwise_cl, pk.kernel, strides, dilations, begin, end, out_sp, pk.bias)
    if _flat_eligible(x.dtype, group, nsp, strides, dilations, begin, end):
        path = pk.chosen.get(x.shape) if pk.chosen else None
        if path is None:
            path = pick_path(x.shape[1], m, pk.kernel, out_sp, prepacked, x.dtype, winograd)
        return _run_path(path, x, pk, begin, end, out_sp)
    return _im2col(x, pk, group, strides, dilations, begin, end, out_sp)


def flat_candidates(kernel: tuple[int, ...], dtype: np.dtype, winograd: tuple[str, ...]) -> list[str]:
    """Every path that can run a flat-eligible layer with this kernel, within the Winograd
    variants the provider allows."""
    paths = ["im2col"]
    if kernel != (1, 1):
        paths.append("row-shift")
    if kernel == (3, 3):
        if "F(4,3)" in winograd and dtype == np.float32:
            paths.append("F(4,3)")
        if "F(2,3)" in winograd:
            paths.append("F(2,3)")
    return paths


def _prepare_path(
    node: NodeSpec, geo: _Geometry, group: int, pk: _ConvWeights, winograd: tuple[str, ...], measure: bool,
    fast: _Jit | None = None,
) -> str | None:
    """For a static input shape, settle the layer's path now (session creation): timed
    among the candidates with ``measure``, else by ``pick_path``; the chosen path's weight
    layout is built here, unless a compiled path (``fast``) runs the shape. Other shapes
    decide at run time with ``pick_path``. Returns the compiled route that runs the static
    shape, if one does."""
    xt = node.input_types[0] if node.input_types else None
    if group != 1 or len(pk.kernel) != 2 or xt is None or not xt.is_static or len(xt.shape) != 4:
        return None
    shape = tuple(int(d) for d in xt.shape)
    try:
        strides, dilations, pads = geo.get(2, pk.kernel)
        out_sp, begin, end, _ = resolve_pads(shape[2:], pk.kernel, strides, dilations, pads, geo.auto_pad)
    except Exception:  # noqa: BLE001 - odd attributes: decided at run time
        return None
    dtype = pk.w.dtype
    if shape[1] != pk.w.shape[1] or 0 in shape or 0 in out_sp:
        return None
    if not _flat_eligible(dtype, 1, 2, strides, dilations, begin, end):  # no numpy layout to build
        return _multiplying_route(fast, shape, dtype, pk, strides, dilations, begin, end, out_sp)
    candidates = flat_candidates(pk.kernel, dtype, winograd)
    if measure and len(candidates) > 1:
        key = (shape, pk.w.shape, tuple(begin), tuple(end), dtype.str, blas_key())
        path = fastest(key, candidates, lambda p, x: _run_path(p, x, pk, begin, end, out_sp), shape, dtype)
        pk.chosen[shape] = path
        pk.keep_layouts({path})
    else:
        path = pick_path(shape[1], pk.w.shape[0], pk.kernel, out_sp, True, dtype, winograd)
        route = fast.route(shape, dtype, pk, 1, strides, dilations, begin, end, out_sp) if fast is not None else None
        if route in _COMPILED_LAYOUTS:
            _COMPILED_LAYOUTS[route](pk)  # its weight layout, now rather than at the first run
        if route:  # the jit tier's call runs this shape: no other numpy layout needed
            return _multiplying_route(fast, shape, dtype, pk, strides, dilations, begin, end, out_sp, route)
    if path in _WEIGHT_LAYOUTS:
        _WEIGHT_LAYOUTS[path](pk)
    return None


def _multiplying_route(fast: _Jit | None, shape: tuple[int, ...], dtype: np.dtype, pk: _ConvWeights, strides,
                       dilations, begin, end, out_sp, route: str | None = "") -> str | None:
    """The compiled route that multiplies a group-1 layer's input of ``shape`` (``route``
    when the caller has it): for a strided 1x1 layer ("subsampled"), its stride-1 twin's."""
    if fast is None:
        return None
    if route == "":
        route = fast.route(shape, dtype, pk, 1, strides, dilations, begin, end, out_sp)
    if route == "subsampled":
        twin = (shape[0], shape[1], *out_sp)
        return fast.route(twin, dtype, pk, 1, (1, 1), dilations, begin, end, out_sp)
    return route


@KERNELS.register("Conv", (1, 11, 22))
def conv(node: NodeSpec):
    return conv_kernel(node)


def conv_kernel(node: NodeSpec, epi: Epilogue | None = None) -> Callable[..., np.ndarray]:
    """Conv's kernel; with ``epi`` (FusedConv) it takes a residual ``z`` after the bias and
    returns ``epi``'s tail applied, in the jit kernel's own pass when it runs the layer."""
    geo = _Geometry(node)
    group = int(node.attr("group", 1))
    w_const, b_const = constant_input(node, 1), constant_input(node, 2)
    if _spatial_rank(node, geo, w_const) == 1 and geo.lift_1d():
        return _lifted_1d(_conv_2d_kernel(node, epi, geo, group, w_const if w_const is None else w_const[:, :, None, :],
                                          b_const), geo)
    return _conv_2d_kernel(node, epi, geo, group, w_const, b_const)


def _spatial_rank(node: NodeSpec, geo: _Geometry, w_const: np.ndarray | None) -> int | None:
    """The layer's number of spatial axes, when known at session creation."""
    if geo.kernel:
        return len(geo.kernel)
    if w_const is not None:
        return w_const.ndim - 2
    xt = node.input_types[0] if node.input_types else None
    return len(xt.shape) - 2 if xt is not None and xt.shape is not None else None


def _lifted_1d(run_2d: Callable[..., np.ndarray], geo: _Geometry) -> Callable[..., np.ndarray]:
    """A 1-D layer's kernel: its input, weight and residual viewed with a height axis of 1
    (no copies), the 2-D kernel run, the axis dropped again. Why: the 2-D paths have the
    compiled kernels and prepared calls; a 1-D layer (an audio encoder's stem: 16 -> 32
    channels on 40 steps) took ~35 us on the general numpy path."""

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, z: np.ndarray | None = None) -> np.ndarray:
        if x.ndim != 3 or w.ndim != 3:
            raise ValueError(f"a 1-D convolution (kernel_shape {tuple(geo.kernel or ())[1:] or '?'}) needs a 3-D "
                             f"input and weight, got input {x.shape} and weight {w.shape}")
        if z is not None and z.ndim:
            z = z.reshape(z.shape[:-1] + (1,) + z.shape[-1:])  # broadcasts against y as before
        y = run_2d(x[:, :, None, :], w[:, :, None, :], b, z)
        return y.reshape(y.shape[:-2] + y.shape[-1:])

    return run


def _conv_2d_kernel(node: NodeSpec, epi: Epilogue | None, geo: _Geometry, group: int, w_const: np.ndarray | None,
                    b_const: np.ndarray | None) -> Callable[..., np.ndarray]:
    """Conv's kernel for any rank but a lifted 1-D layer's (``conv_kernel``)."""
    current = settings.current()
    winograd = current.winograd_paths
    compiled = jit.kernels("conv")
    fast = (_Jit(compiled, jit.thread_count(), jit.kernels("pointwise"), jit.kernels("conv_gemm"), winograd,
                 jit.kernels("winograd"), jit.kernels("depthwise"), jit.kernels("conv_implicit"),
                 jit.kernels("conv_small"), jit.kernels("conv_rows"))
            if compiled is not None else None)
    prepacked = None
    has_b = len(node.inputs) > 2 and bool(node.inputs[2])
    if w_const is not None and (b_const is not None or not has_b) and w_const.dtype.kind == "f":
        cdt = compute_dtype(w_const.dtype)
        prepacked = (cdt, _ConvWeights(w_const, b_const, cdt, group, jit.kernels("winograd_weights")))
        route = _prepare_path(node, geo, group, prepacked[1], winograd, current.measure_conv_paths, fast)
        releases = _release_for_rows(prepacked[1], route)
    else:
        releases = False

    prepared = _PreparedCalls(fast, prepacked, group, geo, epi)

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, z: np.ndarray | None = None,
            out: np.ndarray | None = None) -> np.ndarray:
        call = prepared.calls.get(x.shape, _UNSEEN)
        if call is _UNSEEN and prepared.pk is not None:
            prepared.consider(x, z)  # a shape's first run: every run of it takes one path
            call = prepared.calls.get(x.shape)
        if call is not None and call is not _UNSEEN and call.accepts(x, z):
            # the planned buffer (``out=``: an arena view, perhaps a concatenation's part) when
            # it is what the call would allocate; the other paths allocate
            if out is not None and out.shape == call.out_shape and out.dtype == call.dtype and out.flags.c_contiguous:
                y = call(x, z, out)
            else:
                y = call(x, z)
            if epi is None or epi.after is None or getattr(call, "activation_done", False):
                return y
            return epi.after(y)
        dtype = x.dtype
        cdt = compute_dtype(dtype)
        if prepacked is not None and (prepacked[0] == cdt or w is None):  # None: released to the packed copy
            pk, packed = prepacked[1], True
        else:
            pk, packed = _ConvWeights(w, b, cdt, group), False
        y, done = _conv_forward(x if dtype == cdt else x.astype(cdt), pk, group, geo, packed, winograd,
                                fast if dtype == cdt else None, z, epi)
        y = y if y.dtype == dtype else y.astype(dtype)
        if epi is not None and not done:
            y = epi.tail(y, z, x, w, b)
        return y

    run.supports_out = True  # type: ignore[attr-defined]
    if releases:  # W (input 1) is never read from the plan: the layer keeps its packed copy
        run.released_inputs = frozenset({1})  # type: ignore[attr-defined]
    return run


def _release_for_rows(pk: _ConvWeights, route: str | None) -> bool:
    """Whether a layer lets its original weight go once the rows call packed it: its static
    input shape runs on that call (``route``), whose packed columns serve every later shape
    of the layer too. Why: the packed copy is as large as the weight (resnet50's 1x1 layers:
    70 MB held twice, its peak RSS 1.23x onnxruntime's). The session then drops its own
    reference (``epoxy.contract.RELEASED_INPUTS``); a path that needs the weight again
    (another input shape) rebuilds it from the packed copy."""
    if route != "rows" or pk.dtype != np.float32:
        return False
    pk.let_go_when_packed = True
    return True


#: the numpy paths the grid GEMM (``jit/kernels_conv_gemm.py``) replaces for a stride-1 layer,
#: up to this many multiply-adds (1 thread, session-level, ReLU fused; strided and dilated
#: layers always take it: 1.1-2.7x faster from 0.5 M to 118 M multiply-adds). im2col: always;
#: row-shift: 1.2-2.5x up to 9 M (8->16 channels on 8x8 97 -> 38 us, 16->32 on 16x16 batch 8
#: 818 -> 669 us), 1.5x slower at 19 M; F(2,3): 1.4-1.9x at 7-16 M (128 channels on 7x7 718
#: -> 386 us); F(4,3) keeps its layers (64 channels on 28x28, 29 M: 1.2x slower as a GEMM)
_GRID_OVER_PATH_MAX_MACS = {"im2col": math.inf, "row-shift": 1 << 23, "F(2,3)": 1 << 24}
#: output positions per map up to which the grid GEMM (compact columns there) also replaces
#: the Winograd paths, by thread count: their tile gathers and scatters are numpy passes on
#: one thread while BLAS's GEMM uses them all (bench/README, session 16, resnet50's layers:
#: 2 threads, 256 channels on 14x14 1.5 ms against 1.6-2.5 for F(4,3), 128 on 28x28 equal;
#: 1 thread, 512 on 7x7 3.9 against 4.8 for F(2,3), 14x14 equal, 28x28 F(4,3) 1.25x faster)
_GRID_OVER_WINOGRAD_MAX_POSITIONS = {1: 14 * 14, 2: 28 * 28}


def _numpy_path(shape: tuple[int, ...], dtype: np.dtype, pk: _ConvWeights, strides, dilations, begin, end, out_sp,
                winograd: tuple[str, ...]) -> str | None:
    """The numpy path of a group-1 2-D layer (timed with ``conv_algo_search=measure``, else
    ``pick_path``), or None for a layer with one path only (strided, dilated, negative pads).
    Callers check the group."""
    if not _flat_eligible(dtype, 1, 2, strides, dilations, begin, end):
        return None
    measured = pk.chosen.get(shape) if pk.chosen else None
    if measured is not None:
        return measured
    return pick_path(shape[1], pk.w.shape[0], pk.kernel, out_sp, True, dtype, winograd)


def _grid_replaces_numpy(shape: tuple[int, ...], dtype: np.dtype, pk: _ConvWeights, strides, dilations, begin, end,
                        out_sp, winograd: tuple[str, ...], nthreads: int = 1) -> bool:
    """Whether the grid GEMM runs a group-1 layer the direct kernel does not take: strided and
    dilated ones, and stride-1 ones whose numpy path (measured per layer with
    ``conv_algo_search=measure``, else ``pick_path``) it beats (``_GRID_OVER_PATH_MAX_MACS``,
    ``_GRID_OVER_WINOGRAD_MAX_POSITIONS`` for ``nthreads``; a measured choice other than
    im2col is kept)."""
    path = _numpy_path(shape, dtype, pk, strides, dilations, begin, end, out_sp, winograd)
    if path is None:
        return True
    if pk.chosen.get(shape) is not None:
        return path == "im2col"  # a measured choice other than im2col is kept
    macs = shape[0] * shape[1] * pk.w.shape[0] * math.prod(pk.kernel) * math.prod(out_sp)
    if macs <= _GRID_OVER_PATH_MAX_MACS.get(path, 0):
        return True
    positions = _GRID_OVER_WINOGRAD_MAX_POSITIONS[min(max(nthreads, 1), 2)]
    return path in ("F(2,3)", "F(4,3)") and math.prod(out_sp) <= positions


#: F(4x4, 3x3) with compiled transforms (``jit/kernels_winograd.py``) against the grid GEMM,
#: the jit tier's other path for 3x3 layers, in channel pairs x output positions (C * M * n *
#: oh * ow) by thread count (bench/conv_paths.py --winograd, each call after a BLAS matmul;
#: bench/README, session 17). One thread: F(4,3) from ~0.8 M (16 -> 16 channels on 56x56 0.33
#: against 0.38 ms, 32 -> 32 on 28x28 even, 128 -> 32 on 56x56 1.9 against 4.8, 64 -> 64 on
#: 56x56 1.5 against 3.3; 32 -> 32 on 14x14 loses, 0.084 against 0.074). Two threads, where the
#: grid GEMM's BLAS call uses both and the transforms one: from ~10 M (64 -> 64 on 56x56 1.41
#: against 1.62, 256 -> 256 on 14x14 1.20 against 1.42, 128 -> 128 on 28x28 1.21 against 1.33;
#: 160 -> 320 on 13x13, 8.7 M, loses 1.24 against 0.98, 96 -> 96 on 28x28 even). Never on
#: fewer than 16 tiles (7x7 and 12x12 maps: 512 channels on 7x7 2.2 against 4.0, 2 threads)
_F43_JIT_MIN_TILES = 16
_F43_JIT_MIN_PAIR_POSITIONS = {1: 3 << 18, 2: 10 << 20}
#: input channels below which neither compiled Winograd variant runs a layer, whatever its
#: batch: the count above grows with the batch, but the transforms' cost per channel pair
#: does not shrink. An RGB stem (3 -> 16 on 32x32, 1 thread) took 39 us an image on F(4,3) at
#: batch 16 against 14.5 on the grid GEMM; 8 -> 16 and 16 -> 16 were even (session 26)
_WINOGRAD_JIT_MIN_C = 8
#: and on two threads, where its transforms run on one thread and its 36 GEMMs of ``tiles``
#: columns split poorly: never on fewer than 25 tiles an image (maps up to 16x16), nor on
#: fewer than 100 (up to 36x36) below 32 M channel pairs x positions; F(2,3) takes those
#: (session 24, 2 threads, each call after a 2-thread BLAS matmul, median of 40 interleaved,
#: F(4,3) / F(2,3) ms: 256 -> 256 on 14x14 1.56 / 1.29, 384 -> 384 on 13x13 3.07 / 2.49, 512
#: -> 512 on 14x14 5.29 / 4.43, 128 -> 128 on 28x28 1.57 / 1.38; kept: 256 -> 256 on 28x28
#: 3.29 / 3.69, 512 -> 512 on 28x28 10.4 / 12.4, 64 -> 64 on 56x56 1.58 / 1.72)
_F43_JIT_MIN_TILES_THREADS = 25
_F43_JIT_NARROW_TILES_THREADS = 100
_F43_JIT_NARROW_MIN_PAIRS_THREADS = 32 << 20


def _two_thread_rule() -> bool:
    """Whether the two-thread figures above apply: they were measured on AVX-512 CPUs. On an
    AVX2 one (OpenBLAS's Haswell kernels) the grid GEMM gains less from its second thread and
    F(4,3) keeps its one-thread rule: 2 threads, us, F(4,3) / the grid GEMM, 16 -> 64 on 55x55
    (squeezenet) 661-773 / 1369-1401, 128 -> 128 on 28x28 1335-1352 / 1840 (bench/README,
    session 43)."""
    from ..jit.llvm_module import avx512

    return avx512()


def use_f43_jit(n: int, c: int, m: int, out_sp: Sequence[int], nthreads: int) -> bool:
    """Whether the compiled F(4x4, 3x3) runs a float32 3x3 stride-1 layer of ``n`` images
    rather than the grid GEMM (the figures above)."""
    oh, ow = int(out_sp[0]), int(out_sp[1])
    tiles = -(-oh // 4) * -(-ow // 4)
    pairs = c * m * n * oh * ow
    if n * tiles < _F43_JIT_MIN_TILES or c < _WINOGRAD_JIT_MIN_C:
        return False
    if nthreads > 1 and not _two_thread_rule():
        nthreads = 1
    if nthreads > 1 and (tiles < _F43_JIT_MIN_TILES_THREADS or (
            tiles < _F43_JIT_NARROW_TILES_THREADS and pairs < _F43_JIT_NARROW_MIN_PAIRS_THREADS)):
        return False
    return pairs >= _F43_JIT_MIN_PAIR_POSITIONS[min(max(nthreads, 1), 2)]


#: F(2x2, 3x3) with compiled transforms (``kernels_winograd`` with tile 2) on the maps the
#: compiled F(4,3) leaves: on one thread where F(4,3) has too few tiles (7x7 and 12x12 maps:
#: 4-9 tiles) from 2^17 channel pairs x positions (224 -> 224 on 7x7 0.58-0.69 against the
#: grid GEMM's 0.64-0.71 ms, 192 -> 320 0.51-0.75 against 0.72-0.82, 512 -> 512 on 12x12 4.6-5.6
#: against 6.9-7.4, 128 -> 32 on 7x7 0.090 against 0.106), but on 16 F(2,3) tiles (7x7) not
#: past 2^17 channel pairs, where its 16-column GEMMs lose (512 -> 512 on 7x7: 3.7 against
#: 3.3); on two threads from 10x10 maps and 4 M (512 -> 512 on 12x12 2.73 against 3.72, 160 ->
#: 320 on 13x13 0.87 against 0.96; on 7x7 maps even with the GEMM: left to it). bench/README,
#: session 17
_F23_JIT_MIN_PAIR_POSITIONS = {1: 1 << 17, 2: 4 << 20}
_F23_JIT_MIN_POSITIONS_THREADS = 100
_F23_JIT_NARROW_TILES = 36
_F23_JIT_NARROW_MAX_PAIRS = 1 << 17


def use_f23_jit(n: int, c: int, m: int, out_sp: Sequence[int], nthreads: int, f43_allowed: bool = True) -> bool:
    """Whether the compiled F(2x2, 3x3) runs a float32 3x3 stride-1 layer the compiled F(4,3)
    does not take (``use_f43_jit`` said no; with ``f43_allowed`` False, conv_winograd=f23, it
    may take F(4,3)'s layers too)."""
    oh, ow = int(out_sp[0]), int(out_sp[1])
    positions = n * oh * ow
    pairs = c * m * positions
    if c < _WINOGRAD_JIT_MIN_C:
        return False
    if nthreads > 1:
        return positions >= _F23_JIT_MIN_POSITIONS_THREADS and pairs >= _F23_JIT_MIN_PAIR_POSITIONS[2]
    few_tiles = n * -(-oh // 4) * -(-ow // 4) < _F43_JIT_MIN_TILES
    narrow = n * -(-oh // 2) * -(-ow // 2) < _F23_JIT_NARROW_TILES and c * m > _F23_JIT_NARROW_MAX_PAIRS
    return (few_tiles or not f43_allowed) and pairs >= _F23_JIT_MIN_PAIR_POSITIONS[1] and not narrow


#: the implicit GEMM (``jit/kernels_conv_implicit.py``) against the compiled Winograd variants
#: for a 3x3 stride-1 layer it takes: with few output channels the Winograd GEMMs are skinny
#: and its transforms dominate, and on small maps it has few tiles (bench/README, session 28,
#: 1 thread, implicit / Winograd: 8 -> 16 channels on 32x32 batch 8 0.53, 16 -> 32 on 16x16
#: batch 8 0.59, 128 -> 32 on 14x14 0.83, 64 -> 64 on 8x8 batch 8 0.83, on 7x7 0.81, on 14x14
#: 0.97; Winograd kept: 64 -> 64 on 28x28 1.41, 96 -> 96 on 14x14 1.25, 128 -> 128 on 7x7 1.08)
_IMPLICIT_OVER_WINOGRAD_MAX_M = 32
_IMPLICIT_OVER_WINOGRAD_SMALL_MAP = (64, 16 * 16)
#: ... and the few-output-channel rule only up to this many input channels: densenet121's
#: 128 -> 32 layers on 56x56 and 28x28 ran F(4x4, 3x3) faster (1 thread, alone: 1782 vs 2011 us,
#: 477 vs 524; the model 0.989 at 1 thread, 0.976 at 2; bench/README.md, session 40)
_IMPLICIT_OVER_WINOGRAD_MAX_C = 64


#: strided unpadded 1x1 layers the rows route would take run as their stride-1 twin on the
#: subsampled input instead (``jit/kernels_conv_subsampled.py``); the small-layer kernel keeps
#: the exporter CNNs' strided 1x1 layers
SUBSAMPLE_STRIDED_1X1 = True

#: most input channels of a layer (an RGB stem) that takes the implicit GEMM's ``fgemm_rows``
#: before the rows route: a 7x7 stride-2 RGB stem alone 1582 vs 1611 us, after a 64 MB touch
#: 1737 vs 2114 (1 thread); models new / old, 1 / 2 threads: densenet121 0.961 / 0.957,
#: inception_v1 0.989 / 0.985, inception_v2 0.991 / 0.992, resnet50 0.995 / 0.978. Deeper
#: layers stay on the rows route: every layer both take, moved, made inception_v2 1.07x slower
#: (bench/README.md, session 38)
STEM_MAX_CHANNELS = 4


def implicit_over_winograd(c: int, m: int, out_sp: Sequence[int]) -> bool:
    """Whether the implicit GEMM rather than a compiled Winograd variant runs a float32 3x3
    stride-1 layer of ``c`` -> ``m`` channels (when the implicit GEMM takes it at all)."""
    most_m, most_positions = _IMPLICIT_OVER_WINOGRAD_SMALL_MAP
    few_outputs = m <= _IMPLICIT_OVER_WINOGRAD_MAX_M and c <= _IMPLICIT_OVER_WINOGRAD_MAX_C
    return few_outputs or (m <= most_m and int(out_sp[0]) * int(out_sp[1]) <= most_positions)


#: compiled routes -> the weight layout their call multiplies with (built at session creation)
_COMPILED_LAYOUTS = {"winograd": _ConvWeights.winograd43, "winograd23": _ConvWeights.winograd}


#: input shapes per layer with a prepared jit call (a model with dynamic axes sees a few)
_PREPARED_PER_NODE = 16
#: a shape no run has decided for yet (None: decided, the general path runs it)
_UNSEEN = object()


class _PreparedCalls:
    """A layer's prepared jit calls by input shape (``_Jit.route``: ``PointwiseCall`` for 1x1
    layers, ``GridConvCall`` for group-1 ones, ``Conv2dCall`` for the depthwise and grouped
    layers of the direct kernel): for a constant weight, a shape's first run prepares one
    and every run of that shape goes through it, skipping the geometry, path and epilogue
    decisions (~12 us of Python on a tiny layer, ~35 us on the numpy GEMM path). The
    activations the kernels cannot apply run after them."""

    __slots__ = ("calls", "epi", "fast", "geo", "group", "pk")

    def __init__(self, fast: _Jit | None, prepacked: tuple[np.dtype, _ConvWeights] | None, group: int,
                 geo: _Geometry, epi: Epilogue | None) -> None:
        self.calls: dict[tuple[int, ...], Any] = {}
        self.fast, self.group, self.geo, self.epi = fast, group, geo, epi
        self.pk = prepacked[1] if prepacked is not None and fast is not None else None

    def consider(self, x: np.ndarray, z: np.ndarray | None) -> None:
        """Prepare a call for ``x``'s shape when the compiled kernel runs it whole (the
        epilogue included) and the constant weight's dtype is ``x``'s."""
        pk, fast = self.pk, self.fast
        if pk is None or fast is None or x.dtype != pk.dtype or x.ndim != 4 or not x.flags.c_contiguous:
            return
        _, strides, dilations, begin, end, out_sp = _geometry_for(self.geo, x, pk.w, self.group)
        n, m = x.shape[0], pk.w_shape[0]
        epi = self.epi
        if len(self.calls) >= _PREPARED_PER_NODE:
            self.calls.clear()
        if n == 0 or m == 0 or 0 in out_sp or x.shape[1] == 0 or (
                z is not None and (epi is None or z.shape != (n, m, *out_sp))):
            self.calls[x.shape] = None  # the general path runs this shape (a broadcast residual: it adds it)
            return
        self.calls[x.shape] = fast.call(x.shape, x.dtype, pk, self.group, strides, dilations, begin, end, out_sp,
                                        epi)


# --------------------------------------------------------------------------- jit tier


@dataclass(frozen=True)
class Epilogue:
    """FusedConv's ``act(y + z)``: ``code`` (with ``alpha``, ``beta``) is the activation as the
    jit kernel applies it in its pass (``activations.ACT_*``; None: one it does not have,
    then ``after`` runs on its output); ``tail(y, z, x, w, b)`` is the numpy path's whole tail."""

    code: int | None
    alpha: float
    beta: float
    after: Callable[[np.ndarray], np.ndarray] | None
    tail: Callable[..., np.ndarray]
    #: ``(code, alpha, beta)`` of an activation only the small kernels' stores apply (the
    #: small-layer conv, the small-map depthwise kernels: ``STORE_ACTIVATIONS``), else None
    store: tuple[int, float, float] | None = None


#: FusedConv activations the jit kernel applies in its pass -> (code, parameter defaults):
#: exact elementwise ops, so they agree with the standalone kernels bit for bit
JIT_ACTIVATIONS: dict[str, tuple[int, tuple[float, float]]] = {
    "": (0, (0.0, 0.0)),
    "Relu": (1, (0.0, 0.0)),
    "LeakyRelu": (2, (0.01, 0.0)),
    "Clip": (3, (-math.inf, math.inf)),
}
#: FusedConv activations the small kernels' stores also apply (``kernels_conv_small``; HardSwish in
#: ``kernels_depthwise``' small-map kernels too: ``activations.activate_wide``; their layers are
#: small enough that a second pass costs more than the branch): name -> (code, parameter
#: defaults), the same bits as the pass after the kernel
STORE_ACTIVATIONS: dict[str, tuple[int, tuple[float, float]]] = {
    "HardSigmoid": (4, (0.2, 0.5)),
    "HardSwish": (5, (6.0, 0.5)),
}
# The others (SiLU, ...), and these on the other kernels, run right after the kernel, in place on its
# fresh output (``Epilogue.after``). Each code in the store pass is a branch of every kernel's
# inner loop: an ``exp`` there (SiLU) kept LLVM from vectorizing the store for every activation
# (the serving CNN's 3 -> 16 Relu layer 20 -> 39 us), and HardSigmoid/HardSwish's arithmetic
# slowed squeezenet's Relu layers (9.5 -> 10.95 ms, 1 thread, alternated processes)


def _grid_width(kernel: tuple[int, ...], dilations, strides, out_sp) -> int:
    """The width of a 2-D layer's phase grid (``jit/kernels_conv._geometry``'s ``wq``)."""
    return int(out_sp[1]) + (kernel[1] - 1) * dilations[1] // strides[1]


class _Jit:
    """The compiled direct kernel (``jit/kernels_conv.py``), the pointwise, grid GEMM, implicit
    GEMM, small-layer and position-row calls (``jit/kernels_pointwise.py``,
    ``jit/kernels_conv_gemm.py``, ``jit/kernels_conv_implicit.py``, ``jit/kernels_conv_small.py``,
    ``jit/kernels_conv_rows.py``) of a provider running the jit tier, and the Winograd variants
    its options allow."""

    __slots__ = ("depthwise", "f23", "f43", "grid", "implicit", "module", "nthreads", "pointwise", "rows", "small",
                 "subsampled", "winograd")

    def __init__(self, module: ModuleType, nthreads: int, pointwise: ModuleType | None = None,
                 grid: ModuleType | None = None, winograd: tuple[str, ...] = (),
                 compiled_winograd: ModuleType | None = None, depthwise: ModuleType | None = None,
                 implicit: ModuleType | None = None, small: ModuleType | None = None,
                 rows: ModuleType | None = None) -> None:
        self.module, self.nthreads, self.pointwise, self.grid = module, nthreads, pointwise, grid
        self.depthwise, self.implicit, self.small, self.rows = depthwise, implicit, small, rows
        self.winograd = winograd
        self.subsampled = jit.kernels("conv_subsampled")  # strided 1x1 layers on their stride-1 twin
        # kernels_winograd runs both variants (F(2,3) with tile 2), each where the option allows it
        self.f43 = compiled_winograd if "F(4,3)" in winograd else None
        self.f23 = compiled_winograd if "F(2,3)" in winograd else None

    def route(self, shape: tuple[int, ...], dtype: np.dtype, pk: _ConvWeights, group: int, strides, dilations,
              begin, end, out_sp, prepared: bool = True) -> str | None:
        """Which compiled path runs a 2-D layer of this input shape: "pointwise" (1x1 GEMM),
        "grid" (grid im2col + GEMM) or "implicit" (the implicit GEMM on the grid, float32 on
        AVX-512: ``kernels_conv_implicit.gains``), "winograd" / "winograd23" (F(4x4, 3x3) / F(2x2, 3x3)
        with compiled transforms: ``use_f43_jit``, ``use_f23_jit``, and the layers whose numpy
        path would be F(4,3)), "depthwise" (stride-1 and -2 depthwise layers: ``kernels_depthwise``),
        "direct" (the direct kernel), "small" (``kernels_conv_small``) and "rows" (output positions
        as the GEMM's rows, ``kernels_conv_rows``: ``_rows_takes``), both only for a ``prepared``
        call, their weights packed once, "subsampled" (a strided 1x1 layer: its stride-1 twin's
        route on the subsampled input, ``kernels_conv_subsampled``, prepared calls only), or
        None (the numpy paths)."""
        c, m = shape[1], pk.w.shape[0]
        if self.depthwise is not None and self.depthwise.fits(c, m, group, pk.kernel, strides, dilations, begin, end):
            return "depthwise"
        # an RGB stem on fgemm_rows before the rows route (STEM_MAX_CHANNELS)
        if (prepared and group == 1 and shape[1] <= STEM_MAX_CHANNELS
                and self._implicit_rows_takes(shape, dtype, pk, strides, dilations, begin, end, out_sp)):
            return "implicit"
        if prepared and group == 1 and self._rows_takes(shape, dtype, pk, strides, dilations, begin, end, out_sp):
            if (SUBSAMPLE_STRIDED_1X1 and self.subsampled is not None
                    and self.subsampled.subsamples(pk.kernel, strides, begin, end)):
                return "subsampled"  # the stride-1 twin's route on the subsampled input
            return "rows"
        if (prepared and group == 1 and self._small_takes(shape, dtype, pk, strides, dilations, begin, end, out_sp)
                and self.route(shape, dtype, pk, group, strides, dilations, begin, end, out_sp,
                               prepared=False) != "winograd"):
            # the small-layer kernel, but not on the layers F(4,3) runs: its multiply-adds are 2.25x
            # fewer, and 64 -> 64 on 28x28 took 585 us on the small kernel against 331 (session 35)
            return "small"
        direct = use_jit(c, m, group, pk.kernel, strides, begin, end, out_sp, dtype)
        if self.pointwise is not None and self.pointwise.is_pointwise(pk.kernel, strides, begin, end, group, c):
            return "pointwise"
        wino = (not direct and pk.kernel == (3, 3) and dtype == np.float32
                and _flat_eligible(dtype, group, 2, strides, dilations, begin, end))  # group 1, stride 1, pads >= 0
        f43 = wino and self.f43 is not None
        measured = pk.chosen.get(shape)  # a measured numpy path other than these is kept
        if (wino and measured is None and implicit_over_winograd(c, m, out_sp)
                and self._implicit_takes(shape, dtype, pk, strides, dilations, out_sp)):
            return "implicit"
        if f43 and measured in (None, "F(4,3)") and use_f43_jit(shape[0], c, m, out_sp, self.nthreads):
            return "winograd"
        if (wino and self.f23 is not None and measured in (None, "F(2,3)")
                and use_f23_jit(shape[0], c, m, out_sp, self.nthreads, self.f43 is not None)):
            return "winograd23"
        if self.grid is not None and group == 1 and min(begin) >= 0 and min(end) >= 0 and len(pk.kernel) == 2:
            kh, kw = pk.kernel
            wq = out_sp[1] + (kw - 1) * dilations[1] // strides[1]
            if self.grid.GridConvCall.fits(shape, pk.w.shape, wq, out_sp) and (
                    direct or _grid_replaces_numpy(shape, dtype, pk, strides, dilations, begin, end, out_sp,
                                                   self.winograd, self.nthreads)):
                if direct and shape[0] == 1 and self.module.block_layout(pk.w.shape, strides, dilations, out_sp,
                                                                         group)[4]:
                    # one image whose update loops run on whole vectors: the direct kernel, 0.77-0.86x
                    # the grid GEMM's time on the exporter CNNs' stems and 8x8 layers (bench/README,
                    # session 17); other tiny layers and batches: the GEMM, equal to 2-3x faster
                    return "direct"
                if self._implicit_takes(shape, dtype, pk, strides, dilations, out_sp):
                    return "implicit"
                return "grid"
        if f43 and _numpy_path(shape, dtype, pk, strides, dilations, begin, end, out_sp, self.winograd) == "F(4,3)":
            return "winograd"  # the numpy F(4,3)'s layers the grid GEMM does not take
        return "direct" if direct else None

    def _implicit_rows_takes(self, shape: tuple[int, ...], dtype: np.dtype, pk: _ConvWeights, strides, dilations,
                             begin, end, out_sp) -> bool:
        """Whether the implicit GEMM takes a layer and would run it on ``fgemm_rows``."""
        if (self.implicit is None or len(pk.kernel) != 2 or min(begin) < 0 or min(end) < 0
                or pk.chosen.get(shape) is not None):
            return False
        return (self._implicit_takes(shape, dtype, pk, strides, dilations, out_sp)
                and self.implicit.ImplicitConvCall.rows_outer(shape, pk.w.shape, strides, dilations, begin, out_sp))

    def _rows_takes(self, shape: tuple[int, ...], dtype: np.dtype, pk: _ConvWeights, strides, dilations, begin, end,
                    out_sp) -> bool:
        """Whether ``kernels_conv_rows`` takes a group-1 2-D layer (pads >= 0, ``gains``, no path
        measured for it): not the pointwise layers of big maps (their own path), nor the stride-1
        3x3 layers of maps big enough for the Winograd variants the options allow
        (``MAX_WINOGRAD_POSITIONS``, ``THREADS_SHALLOW_*``)."""
        rows = self.rows
        if rows is None or len(pk.kernel) != 2 or min(begin) < 0 or min(end) < 0 or pk.chosen.get(shape) is not None:
            return False  # (a path conv_algo_search=measure timed fastest is kept)
        unit = tuple(strides) == (1, 1) and tuple(dilations) == (1, 1)
        if unit and pk.kernel == (1, 1) and int(out_sp[0]) * int(out_sp[1]) > rows.POINTWISE_MAX_POSITIONS:
            return False
        most = rows.MAX_WINOGRAD_POSITIONS
        if self.nthreads > 1 and int(shape[1]) <= rows.THREADS_SHALLOW_CHANNELS:
            most = rows.THREADS_SHALLOW_MAX_POSITIONS
        if unit and pk.kernel == (3, 3) and self.winograd and int(out_sp[0]) * int(out_sp[1]) > most:
            return False
        return bool(rows.RowsConvCall.takes(shape, pk.w.shape, dtype, out_sp))

    def _small_takes(self, shape: tuple[int, ...], dtype: np.dtype, pk: _ConvWeights, strides, dilations, begin, end,
                     out_sp) -> bool:
        """Whether the small-layer kernel takes a group-1 layer: 2-D, pads >= 0, its module
        loaded, ``kernels_conv_small.gains``."""
        if self.small is None or len(pk.kernel) != 2 or min(begin) < 0 or min(end) < 0:
            return False
        return self._grid_call_takes(self.small.SmallConvCall, shape, dtype, pk, strides, dilations, out_sp)

    def _implicit_takes(self, shape: tuple[int, ...], dtype: np.dtype, pk: _ConvWeights, strides, dilations,
                        out_sp) -> bool:
        """Whether the implicit GEMM takes a group-1 2-D layer (its module loaded, ``gains``)."""
        if self.implicit is None:
            return False
        return self._grid_call_takes(self.implicit.ImplicitConvCall, shape, dtype, pk, strides, dilations, out_sp)

    def _grid_call_takes(self, call: Any, shape: tuple[int, ...], dtype: np.dtype, pk: _ConvWeights, strides,
                         dilations, out_sp) -> bool:
        """``call.takes`` (a call class on the phase grid) for this layer on this provider's threads."""
        return bool(call.takes(shape, pk.w.shape, dtype, _grid_width(pk.kernel, dilations, strides, out_sp), out_sp,
                               self.nthreads))

    def call(self, shape: tuple[int, ...], dtype: np.dtype, pk: _ConvWeights, group: int, strides, dilations,
             begin, end, out_sp, epi: Epilogue | None, route: str | None = "") -> Any:
        """The prepared call running this input shape on its compiled path (``route``, when
        the caller already has it), or None."""
        if route == "":
            route = self.route(shape, dtype, pk, group, strides, dilations, begin, end, out_sp)
        if route is None:
            return None
        code, alpha, beta = (epi.code or 0, epi.alpha, epi.beta) if epi is not None else (0, 0.0, 0.0)
        bias = pk.bias_or_zeros()
        if route == "pointwise":
            return self.pointwise.PointwiseCall(shape, dtype, pk.w, bias, code, alpha, beta, self.nthreads, group)
        if route == "subsampled":
            twin = (shape[0], shape[1], *out_sp)
            inner = self.call(twin, dtype, pk, group, (1, 1), dilations, begin, end, out_sp, epi)
            return None if inner is None else self.subsampled.SubsampledCall(shape, inner, tuple(strides))
        if route == "winograd":
            return self.f43.WinogradCall(shape, dtype, pk.winograd43(), bias, begin, out_sp, code, alpha, beta,
                                         self.nthreads)
        if route == "winograd23":
            return self.f23.WinogradCall(shape, dtype, pk.winograd(), bias, begin, out_sp, code, alpha, beta,
                                         self.nthreads, tile=2)
        if route == "depthwise":
            store = epi.store if epi is not None and epi.code is None else None
            return self.depthwise.DepthwiseCall(shape, dtype, pk.w, bias, begin, out_sp, code, alpha, beta,
                                                self.nthreads, int(strides[0]), store)
        if route == "small":
            if epi is not None and epi.code is None and epi.store is not None:
                code, alpha, beta = epi.store  # the store applies it (``activation_done``)
            return self.small.SmallConvCall(shape, dtype, pk.w, bias, strides, dilations, begin, out_sp, code, alpha,
                                            beta, self.nthreads)
        if route == "rows":
            return self.rows.RowsConvCall(shape, dtype, None, bias, strides, dilations, begin, out_sp, code, alpha,
                                          beta, self.nthreads, packed=pk.gemm_columns(self.rows), w_shape=pk.w_shape)
        if route == "implicit":
            return self.implicit.ImplicitConvCall(shape, dtype, pk.w, bias, strides, dilations, begin, out_sp, code,
                                                  alpha, beta, self.nthreads)
        if route == "grid":
            return self.grid.GridConvCall(shape, dtype, pk.w, bias, strides, dilations, begin, out_sp, code, alpha,
                                          beta, self.nthreads)
        return self.module.Conv2dCall(shape, dtype, pk.w, bias, strides, dilations, begin, out_sp, group, code,
                                      alpha, beta, self.nthreads)

    def run(self, x, pk: _ConvWeights, group, strides, dilations, begin, end, out_sp, z,
            epi) -> tuple[np.ndarray, bool] | None:
        """``(y, done)`` from the compiled path for this call (weights fed at run time, or a
        shape not prepared), or None when the numpy paths run it."""
        if x.ndim != 4 or x.dtype != pk.w.dtype:
            return None
        route = self.route(x.shape, x.dtype, pk, group, strides, dilations, begin, end, out_sp, prepared=False)
        if route not in ("pointwise", "grid", "implicit", "winograd", "winograd23", "depthwise"):
            return None  # the direct kernel's own cached entry (``run_direct``) or the numpy paths
        fuse = epi is not None and (z is None or (z.shape == (x.shape[0], pk.w.shape[0], *out_sp)
                                                  and z.dtype == x.dtype))
        call = self.call(x.shape, x.dtype, pk, group, strides, dilations, begin, end, out_sp, epi if fuse else None,
                         route)
        y = call(np.ascontiguousarray(x), np.ascontiguousarray(z) if fuse and z is not None else None)
        if fuse and epi is not None and epi.code is None and epi.after is not None:
            y = epi.after(y)
        return y, fuse

    def run_direct(self, x, pk: _ConvWeights, group, strides, dilations, begin, out_sp, z,
                   epi) -> tuple[np.ndarray, bool]:
        fuse = epi is not None and (z is None or (z.shape == (x.shape[0], pk.w.shape[0], *out_sp)
                                                  and z.dtype == x.dtype))
        code, alpha, beta = (epi.code, epi.alpha, epi.beta) if fuse and epi is not None else (0, 0.0, 0.0)
        y = self.module.run_conv2d(x, pk.w, pk.bias_or_zeros(), z if fuse else None, strides, dilations, begin,
                                   out_sp, group, code or 0, alpha, beta, self.nthreads)
        if fuse and epi is not None and code is None and epi.after is not None:
            y = epi.after(y)
        return y, fuse


# --------------------------------------------------------------------------- ConvInteger


def _zp_per_channel(zp: np.ndarray | None, nsp: int) -> np.ndarray | float:
    if zp is None:
        return 0.0
    zp = np.asarray(zp, dtype=np.float64)
    if zp.size == 1:
        return float(zp.reshape(()))
    return zp.reshape((-1,) + (1,) * (nsp + 1))


def _code_bound(dtype: np.dtype) -> int:
    """Largest ``|code - zero point|`` of a code type (wide for any non-8-bit type)."""
    return 255 if np.dtype(dtype) in (np.dtype(np.uint8), np.dtype(np.int8)) else 1 << 62


def _integer_conv(geo: _Geometry, group: int, x, w, x_zp, w_zp) -> np.ndarray:
    """The exact sums as float64. They are computed in float32 (BLAS sgemm, twice dgemm's
    speed) when no partial sum can pass 2**24, where float32 stops holding every integer:
    ``K * max|x - x_zp| * max|w - w_zp|``, K the sums' length (e.g. 3x3 over 28 channels of
    8-bit codes); float64 keeps the sums of realistic sizes exact otherwise."""
    k = math.prod(w.shape[1:])
    exact_f32 = k * _code_bound(x.dtype) * _code_bound(w.dtype) <= 1 << 24
    ftype = np.float32 if exact_f32 else np.float64
    xf = x.astype(ftype)
    if x_zp is not None:
        xf -= np.asarray(x_zp, dtype=ftype).reshape(())
    wf = w.astype(ftype)
    nsp = x.ndim - 2
    if w_zp is not None:
        wf -= np.asarray(_zp_per_channel(w_zp, nsp), dtype=ftype)
    _, strides, dilations, begin, end, out_sp = _geometry_for(geo, xf, wf, group)
    return conv_nd(xf, wf, group, strides, dilations, begin, end, out_sp).astype(np.float64, copy=False)


def _int8_weights(node: NodeSpec, w_index: int, zp_index: int, group: int, kernels: str = "int8_conv") -> Any:
    """The constant weights packed for the jit tier's int8 GEMM (``jit/kernels_int8_conv.py``;
    ``kernels="int8_depthwise"``: its depthwise kernel; ``"int8_grouped"``: one GEMM per group),
    or None: jit off, no AVX512-VNNI here (the GEMM), fed weights or a layer it does not take."""
    module = jit.kernels(kernels)
    if module is None:
        return None
    w = constant_input(node, w_index)
    has_zp = zp_index < len(node.inputs) and bool(node.inputs[zp_index])
    zp = constant_input(node, zp_index) if has_zp else None
    if w is None or (has_zp and zp is None):
        return None
    return module.pack(w, zp, group, jit.thread_count())


def _int8_sums(packed: Any, geo: _Geometry, group: int, x: np.ndarray, w: np.ndarray,
               x_zp: np.ndarray | None) -> np.ndarray | None:
    """The exact int32 sums from the int8 GEMM, or None (the float path runs)."""
    if packed is None or x.ndim != 4:
        return None
    _, strides, dilations, begin, _, out_sp = _geometry_for(geo, x, w, group)
    return packed.sums(x, x_zp, strides, dilations, begin, out_sp)  # type: ignore[no-any-return]


@KERNELS.register("ConvInteger", 10)
def conv_integer(node: NodeSpec):
    geo = _Geometry(node)
    group = int(node.attr("group", 1))
    packed = _int8_weights(node, 1, 3, group)

    def run(x, w, x_zero_point=None, w_zero_point=None):
        sums = _int8_sums(packed, geo, group, x, w, x_zero_point)
        if sums is not None:
            return sums
        acc = _integer_conv(geo, group, x, w, x_zero_point, w_zero_point)
        return np.rint(acc).astype(np.int64).astype(np.int32)

    return run


def _saturate(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(y, info.min, info.max).astype(dtype)


def _requant_scale(x_scale: Any, w_scale: Any, y_scale: Any, nsp: int) -> np.ndarray:
    """QLinearConv's ``x_scale * w_scale / y_scale`` in float32, as float64 (one, or per output
    channel shaped for an ``nsp``-D output); inf/NaN for a zero ``y_scale``."""
    xs = np.float32(np.asarray(x_scale).reshape(()))
    ws = np.asarray(w_scale, dtype=np.float32)
    ws = ws.reshape(()) if ws.size == 1 else ws.reshape(_bias_shape(-1, nsp))
    ys = np.float32(np.asarray(y_scale).reshape(()))
    with np.errstate(all="ignore"):  # a zero y_scale: the float path saturates it
        return (xs * ws / ys).astype(np.float64)


def _constant_requantization(node: NodeSpec, packed: Any) -> Any:
    """The int8 GEMM's requantization terms made once, when the node's scales, output zero
    point and bias are constants (a QDQ model's layers): per call they cost more than a small
    layer's product (building and padding five arrays)."""
    if packed is None:
        return None
    xs, ws, ys, yz = (constant_input(node, i) for i in (1, 4, 6, 7))
    has_bias = len(node.inputs) > 8 and bool(node.inputs[8])
    bias = constant_input(node, 8) if has_bias else None
    if xs is None or ws is None or ys is None or yz is None or (has_bias and bias is None):
        return None
    scale = _requant_scale(xs, ws, ys, 2)
    if not np.isfinite(scale).all():
        return None
    return packed.requantization(bias, scale, yz)


@KERNELS.register("QLinearConv", 10)
def qlinear_conv(node: NodeSpec):
    geo = _Geometry(node)
    group = int(node.attr("group", 1))
    packed = (_int8_weights(node, 3, 5, group) or _int8_weights(node, 3, 5, group, "int8_depthwise")
              or _int8_weights(node, 3, 5, group, "int8_grouped"))
    compiled = jit.kernels("int8_conv")
    constant_terms = _constant_requantization(node, packed)

    def run(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, b=None):
        nsp = x.ndim - 2
        if constant_terms is not None and x.ndim == 4:
            _, strides, dilations, begin, _, out_sp = _geometry_for(geo, x, w, group)
            done = packed.requantized(x, x_zero_point, strides, dilations, begin, out_sp, constant_terms)
            if done is not None:
                return done
        scale = _requant_scale(x_scale, w_scale, y_scale, nsp)
        if packed is not None and constant_terms is None and x.ndim == 4 and np.isfinite(scale).all():
            # the int8 GEMM's exact sums and one compiled pass of the steps below, in their order
            _, strides, dilations, begin, _, out_sp = _geometry_for(geo, x, w, group)
            zp = y_zero_point if y_zero_point is not None else np.uint8(0)
            done = packed.requantized(x, x_zero_point, strides, dilations, begin, out_sp,
                                      packed.requantization(b, scale, zp))
            if done is not None:
                return done
        acc = _integer_conv(geo, group, x, w, x_zero_point, w_zero_point)
        if compiled is not None and acc.ndim >= 3 and acc.size and np.isfinite(scale).all():
            zp = y_zero_point if y_zero_point is not None else np.uint8(0)
            return compiled.requantize_sums(acc, b, scale, zp)  # the steps below in one pass
        if b is not None:
            acc += b.astype(np.float64).reshape(_bias_shape(-1, nsp))
        y = np.rint(acc * scale)
        out_dtype = np.dtype(y_zero_point.dtype) if y_zero_point is not None else np.dtype(np.uint8)
        if y_zero_point is not None:
            y += float(np.asarray(y_zero_point).reshape(()))
        return _saturate(y, out_dtype)

    return run


# --------------------------------------------------------------------------- ConvTranspose


@KERNELS.register("ConvTranspose", (1, 11, 22))
def conv_transpose(node: NodeSpec):
    geo = _Geometry(node)
    group = int(node.attr("group", 1))
    output_padding_attr = node.attr("output_padding")
    output_shape_attr = node.attr("output_shape")
    check_at_least(node, "output_padding", tuple(output_padding_attr or ()), 0)

    def layout(x_shape: Sequence[int], w_shape: Sequence[int], dtype: np.dtype):
        """(kernel, strides, dilations, begin, out_sp, m) for these input shapes; the
        accumulation buffer and the output are refused first when too large."""
        nsp = len(x_shape) - 2
        n, in_sp = x_shape[0], tuple(x_shape[2:])
        kernel = tuple(int(k) for k in w_shape[2:])
        m = w_shape[1] * group
        strides, dilations, pads = geo.get(nsp, kernel)
        opad = tuple(output_padding_attr) if output_padding_attr else (0,) * nsp
        full = [s * (i - 1) + op + (k - 1) * d + 1 for s, i, op, k, d in zip(strides, in_sp, opad, kernel, dilations)]
        if output_shape_attr or geo.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            if output_shape_attr:
                out_sp = [int(v) for v in tuple(output_shape_attr)[-nsp:]]
            else:
                out_sp = [i * s for i, s in zip(in_sp, strides)]
            total = [f - o for f, o in zip(full, out_sp)]
            if geo.auto_pad == "SAME_UPPER":
                begin = [t // 2 for t in total]
            else:
                begin = [t - t // 2 for t in total]
        else:
            if geo.auto_pad == "VALID":
                pads = (0,) * (2 * nsp)
            begin = list(pads[:nsp])
            out_sp = [f - pads[i] - pads[i + nsp] for i, f in enumerate(full)]
        out_sp = [max(0, o) for o in out_sp]
        # col2im accumulates over the full span (and the output), both sized from attributes
        span = [max(f, b + o) - min(0, b) for f, b, o in zip(full, begin, out_sp)]
        geo.check_span((n, m, *span), (n, m, *out_sp), dtype)
        return kernel, strides, dilations, begin, out_sp, m

    xt, wt = (node.input_types[i] if len(node.input_types) > i else None for i in (0, 1))
    if xt is not None and wt is not None and xt.is_static and wt.is_static and len(xt.shape) == len(wt.shape) > 2:  # type: ignore[arg-type]
        layout(xt.shape, wt.shape, compute_dtype(xt.dtype or np.dtype(np.float32)))  # type: ignore[arg-type]

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        dtype = x.dtype
        cdt = compute_dtype(dtype)
        x, w = x.astype(cdt, copy=False), w.astype(cdt, copy=False)
        nsp = x.ndim - 2
        n, c = x.shape[:2]
        in_sp = x.shape[2:]
        mg = w.shape[1]
        kernel, strides, dilations, begin, out_sp, m = layout(x.shape, w.shape, cdt)
        itot = math.prod(in_sp)
        ktot = math.prod(kernel)
        cg = c // group
        if n == 0 or itot == 0 or cg == 0 or m == 0:
            y = np.zeros((n, m) + tuple(out_sp), dtype=cdt)
        else:
            wm = w.reshape(group, cg, mg * ktot).transpose(0, 2, 1)  # (G, Mg*K, Cg)
            xm = x.reshape(n, group, cg, itot)
            cols = np.matmul(wm[0], xm[:, 0]) if group == 1 else np.matmul(wm, xm)
            cols = cols.reshape((n, m) + kernel + tuple(in_sp))
            y = col2im_add(cols, (n, m), kernel, in_sp, strides, dilations, out_sp, begin)
        if b is not None and y.size:
            y += b.astype(cdt, copy=False).reshape(_bias_shape(m, nsp))
        return y if y.dtype == dtype else y.astype(dtype)

    return run


# --------------------------------------------------------------------------- Col2Im


@KERNELS.register("Col2Im", 18)
def col2im(node: NodeSpec):
    strides_attr = node.attr("strides")
    dilations_attr = node.attr("dilations")
    pads_attr = node.attr("pads")
    guard = output_guard(node)

    def run(x: np.ndarray, image_shape: np.ndarray, block_shape: np.ndarray) -> np.ndarray:
        image = [int(v) for v in np.asarray(image_shape).reshape(-1)]
        block = tuple(int(v) for v in np.asarray(block_shape).reshape(-1))
        nsp = len(image)
        strides = tuple(strides_attr) if strides_attr else (1,) * nsp
        dilations = tuple(dilations_attr) if dilations_attr else (1,) * nsp
        pads = tuple(pads_attr) if pads_attr else (0,) * (2 * nsp)
        ktot = math.prod(block)
        n = x.shape[0]
        c = x.shape[1] // ktot if ktot else 0
        blocks, begin, _, _ = resolve_pads(image, block, strides, dilations, pads, "NOTSET")
        if math.prod(blocks) != x.shape[2]:
            raise ValueError(f"Col2Im: {x.shape[2]} blocks given, geometry gives {blocks}")
        cols = x.reshape((n, c) + block + tuple(blocks))
        guard((n, c, *image), np.dtype(np.float64))  # accumulated in float64
        return col2im_add(cols, (n, c), block, blocks, strides, dilations, image, begin).astype(x.dtype, copy=False)

    return run


# --------------------------------------------------------------------------- DeformConv


@KERNELS.register("DeformConv", (19, 22))
def deform_conv(node: NodeSpec):
    geo = _Geometry(node)
    group = int(node.attr("group", 1))
    offset_group = int(node.attr("offset_group", 1))

    def run(x, w, offset, b=None, mask=None):
        dtype = x.dtype
        cdt = compute_dtype(dtype)
        x, w, offset = (v.astype(cdt, copy=False) for v in (x, w, offset))
        nsp = x.ndim - 2
        n, c = x.shape[:2]
        sp = x.shape[2:]
        kernel = tuple(int(k) for k in w.shape[2:])
        strides, dilations, pads = geo.get(nsp, kernel)
        out_sp, begin, end, _ = resolve_pads(sp, kernel, strides, dilations, pads, geo.auto_pad)
        m = w.shape[0]
        # the sampled columns hold every kernel position of every output position
        geo.check_sizes(x.shape, begin, end, (n, c * math.prod(kernel), *out_sp), cdt)
        ktot, otot, stot = math.prod(kernel), math.prod(out_sp), math.prod(sp)
        og = offset_group
        if n == 0 or m == 0 or otot == 0 or c == 0:
            y = np.zeros((n, m) + tuple(out_sp), dtype=cdt)
            if b is not None and y.size:  # no input channels: a sum over nothing, plus the bias
                y += b.reshape(_bias_shape(m, nsp))
            return y.astype(dtype, copy=False)
        off = offset.reshape((n, og, ktot, nsp, otot))
        # base sampling positions per kernel element and output position, per dim
        grids = np.meshgrid(*(np.arange(o) for o in out_sp), indexing="ij")
        kgrid = np.meshgrid(*(np.arange(k) for k in kernel), indexing="ij")
        pos = []
        for i in range(nsp):
            base = (grids[i].reshape(1, otot) * strides[i] - begin[i]) + (kgrid[i].reshape(ktot, 1) * dilations[i])
            pos.append(base.astype(cdt) + off[:, :, :, i, :])  # (N, og, K, O)
        floors = [np.floor(p) for p in pos]
        fracs = [p - f for p, f in zip(pos, floors)]
        floors_i = [f.astype(np.int64) for f in floors]
        cog = c // og
        xg = x.reshape(n, og, cog, stot)
        dim_strides = [math.prod(sp[i + 1 :]) for i in range(nsp)]
        sampled = np.zeros((n, og, cog, ktot * otot), dtype=cdt)
        for corner in range(1 << nsp):
            weight = None
            valid = None
            flat = None
            for i in range(nsp):
                bit = (corner >> (nsp - 1 - i)) & 1
                idx = floors_i[i] + bit
                wi = fracs[i] if bit else 1 - fracs[i]
                ok = (idx >= 0) & (idx < sp[i])
                term = np.clip(idx, 0, sp[i] - 1) * dim_strides[i]
                weight = wi if weight is None else weight * wi
                valid = ok if valid is None else valid & ok
                flat = term if flat is None else flat + term
            weight = np.where(valid, weight, 0).reshape(n, og, 1, ktot * otot)
            vals = np.take_along_axis(xg, flat.reshape(n, og, 1, ktot * otot), axis=3)
            sampled += vals * weight
        sampled = sampled.reshape(n, og, cog, ktot, otot)
        if mask is not None:
            sampled *= mask.astype(cdt, copy=False).reshape(n, og, 1, ktot, otot)
        cols = sampled.reshape((n, c) + kernel + tuple(out_sp))
        y = grouped_matmul(w, cols, group, out_sp)
        if b is not None:
            y += b.astype(cdt, copy=False).reshape(_bias_shape(m, nsp))
        return y.astype(dtype, copy=False)

    return run
