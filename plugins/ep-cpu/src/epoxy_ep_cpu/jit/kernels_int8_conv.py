"""ConvInteger / QLinearConv (2-D, group 1, constant weights) as channels-last patches and the
int8 GEMM (``kernels_int8_gemm``): the exact int32 sums of ``(x - x_zp) * (w - w_zp)``.

Why channels-last patches: the GEMM multiplies rows of K contiguous bytes (one output pixel's
receptive field) by the packed weight rows. With the image channels-last, a receptive field
is ``kh * kw`` contiguous runs of C bytes, so building the patch matrix is a copy of runs (one
compiled pass over the output pixels) rather than a byte-by-byte gather; the weights are
packed once in the same (kh, kw, C) order. Positions in the padding hold the input's zero
point, so they add ``(x_zp - x_zp) * w = 0`` to every sum, as the numpy path's zero-padded
float conv does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit, prange

from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
from . import kernels_int8_gemm as int8_gemm
from .threads import pick, serial_twin

#: input channels from which a layer takes the GEMM, or (fewer channels) the length of one
#: output pixel's receptive field, C * kh * kw codes: a 3-channel 7x7 stem (147) runs on codes
#: in 1.5 ms against the float path's 3.7 (224x224, stride 2: its patches are 7 runs of 21 bytes
#: per pixel); a 3x3 one (27) gained nothing before the 6 x 64 tiles. The same thresholds as the
#: core's QDQ rewrites
#: (``qdq_qlinear.MIN_CHANNELS``, ``MIN_FIELD``)
MIN_CHANNELS = 16
MIN_FIELD = 128
#: or that many codes with that many output channels: a 3x3 stem with 32 outputs or more (the
#: core's ``qdq_qlinear.MIN_NARROW_FIELD``, ``MIN_NARROW_OUTPUTS``, where the measurements are)
MIN_NARROW_FIELD, MIN_NARROW_OUTPUTS = 27, 32
#: multiply-adds from which a layer takes the GEMM: below, the patches, the padding and the
#: transposes cost more than they save (16 -> 32 channels 3x3 on 32x32, 5 M: 0.65 ms against
#: the float path's 0.55, before the GEMM kept channels-last codes and 1x1 layers skipped the
#: patch copy). The same threshold as the core's QDQ rewrites (``qdq_qlinear.MIN_MACS``, where
#: the whole-model measurements behind it are)
MIN_MACS = 1 << 20


@njit(parallel=True, cache=True, nogil=True)
def patches(x, fill, a, dims):  # pragma: no cover - compiled
    """Rows of ``a`` (N*OH*OW rows of ``kp`` bytes, the first kh*kw*C of them set), one per
    output pixel, from channels-last ``x`` (N, H, W, C); ``dims``: N, H, W, C, kh, kw, sh, sw,
    dh, dw, pad top, pad left, OH, OW, kp. A kernel row inside the image with dilation 1 is one
    run of kw*C contiguous bytes (a 3-channel stem's 7x7 window: 7 runs of 21 bytes, not 49 of 3)."""
    n, h, w, c, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, kp = (dims[0], dims[1], dims[2], dims[3], dims[4], dims[5],
                                                              dims[6], dims[7], dims[8], dims[9], dims[10], dims[11],
                                                              dims[12], dims[13], dims[14])
    span = kw * c
    for r in prange(n * oh):
        b = r // oh
        oy = r - b * oh
        for ox in range(ow):
            row = a[(r * ow + ox) * kp:(r * ow + ox) * kp + kh * span]
            ix0 = ox * sw - pl
            whole = dw == 1 and ix0 >= 0 and ix0 + kw <= w
            for ki in range(kh):
                iy = oy * sh + ki * dh - pt
                out = row[ki * span:(ki + 1) * span]
                if iy < 0 or iy >= h:
                    for e in range(span):
                        out[e] = fill
                elif whole:
                    start = ((b * h + iy) * w + ix0) * c
                    src = x[start:start + span]
                    for e in range(span):
                        out[e] = src[e]
                else:
                    for kj in range(kw):
                        ix = ix0 + kj * dw
                        run = out[kj * c:(kj + 1) * c]
                        if ix < 0 or ix >= w:
                            for ci in range(c):
                                run[ci] = fill
                        else:
                            src = x[((b * h + iy) * w + ix) * c:((b * h + iy) * w + ix + 1) * c]
                            for ci in range(c):
                                run[ci] = src[ci]


patches_serial = serial_twin(patches)


@njit(parallel=True, cache=True, nogil=True)
def requantize(sums, bias, scale, zero_point, lo, hi, y):  # pragma: no cover - compiled
    """QLinearConv's output, channels last, from the exact int32 ``sums`` (N*P, M) into ``y``
    (N*P, M), for weights the GEMM's own requantizing epilogue does not take (a zero point off
    their offset): per element ``clip(rint((float64(sum) + bias[m]) * scale[m]) + zero_point,
    lo, hi)``, the numpy path's float64 steps in its order (``bias`` float64, zeros for none:
    adding 0.0 changes no value). Rows in, rows out: both sides contiguous, so the loop over
    channels vectorizes."""
    total, m = y.shape
    for r in prange(total):
        for c in range(m):
            v = np.rint((np.float64(sums[r, c]) + bias[c]) * scale[c]) + zero_point
            v = lo if v < lo else v
            y[r, c] = hi if v > hi else v


requantize_serial = serial_twin(requantize)


@njit(parallel=True, cache=True, nogil=True)
def requantize_planes(acc, bias, scale, zero_point, lo, hi, y, channels):  # pragma: no cover - compiled
    """:func:`requantize` for the float path's exact sums ``acc`` (N*M, P), float32 or
    float64, into ``y`` (N*M, P): plane r is output channel ``r % channels``."""
    planes, p = acc.shape
    has_bias = bias.shape[0] > 0
    for r in prange(planes):
        c = r % channels
        s = scale[c]
        add = np.float64(bias[c]) if has_bias else 0.0
        for q in range(p):
            v = np.float64(acc[r, q])
            if has_bias:
                v += add
            v = np.rint(v * s) + zero_point
            v = lo if v < lo else v
            v = hi if v > hi else v
            y[r, q] = v


@njit(parallel=True, cache=True, nogil=True)
def scale_rows(raw, column, scale, bias, y, pixels):  # pragma: no cover - compiled
    """A float output from the GEMM's padded int32 product ``raw`` (N*P rows) and ``column``
    term (as :func:`requantize`) into ``y`` (N, M, P) float32: per element
    ``float32(sum) * scale[m] (+ bias[m])`` in float32, the values of ConvInteger -> Cast ->
    Mul [-> Add] step by step; stored in runs of 64 pixels per channel. A transpose: 64 rows
    x 16 channels at a time, whose 64 cache lines of ``raw`` stay in L1 while the 16 channels
    read them (one channel at a time over all 64 rows fetched them from L2 for every channel:
    0.38 ms for squeezenet's 169 x 1000 head, 0.20 ms blocked)."""
    n, m, _ = y.shape
    total = n * pixels
    has_bias = bias.shape[0] > 0
    for t in prange((total + 63) // 64):
        r0, r1 = t * 64, min(t * 64 + 64, total)
        b0 = r0 // pixels
        p0 = r0 - b0 * pixels
        one_image = p0 + (r1 - r0) <= pixels
        for c0 in range(0, m, 16):
            for c in range(c0, min(m, c0 + 16)):
                add = bias[c] if has_bias else np.float32(0)
                term, factor = column[c], scale[c]
                if one_image:
                    out = y[b0, c]
                    for r in range(r0, r1):
                        v = np.float32(np.int32(np.int64(raw[r, c]) + term)) * factor
                        out[p0 + r - r0] = v + add if has_bias else v
                else:
                    for r in range(r0, r1):
                        b = r // pixels
                        v = np.float32(np.int32(np.int64(raw[r, c]) + term)) * factor
                        y[b, c, r - b * pixels] = v + add if has_bias else v


scale_rows_serial = serial_twin(scale_rows)


def requantize_sums(acc: np.ndarray, bias: np.ndarray | None, scale: np.ndarray, y_zero_point: Any) -> np.ndarray:
    """QLinearConv's output from exact float sums (N, M, ...), as :func:`requantize_planes`."""
    n, m = acc.shape[:2]
    out_dtype = np.asarray(y_zero_point).dtype
    info = np.iinfo(out_dtype)
    planes = np.ascontiguousarray(acc).reshape(n * m, -1)
    y = np.empty(planes.shape, dtype=out_dtype)
    b = np.zeros(0, np.int64) if bias is None else np.ascontiguousarray(bias.reshape(-1), dtype=np.int64)
    requantize_planes(planes, b, np.ascontiguousarray(np.broadcast_to(scale.reshape(-1), (m,)), dtype=np.float64),
                      float(np.asarray(y_zero_point).reshape(())), float(info.min), float(info.max), y, m)
    return y.reshape(acc.shape)


class PackedInt8Conv:
    """A group-1 2-D integer convolution's constant weights ``(M, C, kh, kw)`` of 8-bit codes,
    packed for the GEMM in channels-last order, with their zero point (None, one, or one per
    output channel)."""

    __slots__ = ("_gemm", "m", "nthreads", "shape")

    def __init__(self, w: np.ndarray, zero_point: np.ndarray | None, nthreads: int) -> None:
        self.m = w.shape[0]
        self.shape = w.shape
        self.nthreads = nthreads
        rows = np.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(self.m, -1)  # (M, kh*kw*C)
        zp = None if zero_point is None else np.asarray(zero_point).reshape(-1)
        self._gemm = int8_gemm.PackedInt8Weights(rows.T, zp, nthreads)

    @staticmethod
    def fits(w: np.ndarray, zero_point: np.ndarray | None, group: int) -> bool:
        """2-D, group 1, 8-bit codes the GEMM takes (its K is C * kh * kw)."""
        if w.ndim != 4 or group != 1:
            return False
        rows = w.reshape(w.shape[0], -1)
        zp = None if zero_point is None else np.asarray(zero_point).reshape(-1)
        return int8_gemm.PackedInt8Weights.fits(rows.T, zp)

    def sums(self, x: np.ndarray, zero_point: np.ndarray | None, strides: Sequence[int], dilations: Sequence[int],
             begin: Sequence[int], out_sp: Sequence[int]) -> np.ndarray | None:
        """Exact int32 ``conv(x - x_zp, w - w_zp)`` (N, M, OH, OW) for 4-D ``x`` of 8-bit codes
        (pads >= 0, end pads implied by ``out_sp``); None for what the GEMM does not take (the
        caller's float path runs it): a per-channel input zero point, too small a product."""
        rows = self.rows(x, zero_point, strides, dilations, begin, out_sp)
        if rows is None:
            return None
        n, oh, ow = x.shape[0], int(out_sp[0]), int(out_sp[1])
        return np.ascontiguousarray(rows.reshape(n, oh * ow, self.m).transpose(0, 2, 1)).reshape(n, self.m, oh, ow)

    def requantization(self, bias: np.ndarray | None, scale: np.ndarray,
                       y_zero_point: np.ndarray) -> int8_gemm.Requantization:
        """The requantization terms :meth:`requantized` reads (``int8_gemm.Requantization``):
        made once per node when the scales, zero point and bias are constants."""
        return self._gemm.requantization(bias, scale, y_zero_point)

    def requantized(self, x: np.ndarray, zero_point: np.ndarray | None, strides: Sequence[int],
                    dilations: Sequence[int], begin: Sequence[int], out_sp: Sequence[int],
                    terms: int8_gemm.Requantization) -> np.ndarray | None:
        """QLinearConv's output: the sums plus the int32 bias, times the scale (float64, one or
        one per output channel), rounded, plus the output zero point, saturated to its dtype
        (``terms``, :meth:`requantization`); None as for :meth:`sums`. The result is an (N, M,
        OH, OW) view of a channels-last array: the next int8 convolution takes it channels
        last without a transpose."""
        a = self.patch_matrix(x, zero_point, strides, dilations, begin, out_sp)
        if a is None:
            return None
        n, oh, ow = x.shape[0], int(out_sp[0]), int(out_sp[1])
        y = self._gemm.requantized(a, zero_point, terms)
        if y is None:  # weights with a row term: their exact sums, then one compiled pass
            sums = self._gemm.matmul(a, zero_point)
            if sums is None:
                return None
            y = np.empty((n * oh * ow, self.m), dtype=terms.dtype)
            pick(requantize, requantize_serial, self.nthreads, y.size)(
                sums, terms.biases[:self.m], terms.scales[:self.m], *terms.scalars, y)
        return y.reshape(n, oh, ow, self.m).transpose(0, 3, 1, 2)

    def scaled(self, x: np.ndarray, zero_point: np.ndarray | None, strides: Sequence[int], dilations: Sequence[int],
               begin: Sequence[int], out_sp: Sequence[int], scale: np.ndarray,
               bias: np.ndarray | None) -> np.ndarray | None:
        """The sums as float32 times ``scale`` (one or one per output channel) plus ``bias``
        (one per output channel, or None) in one pass (:func:`scale_rows`); None as for
        :meth:`sums`."""
        parts = self._parts(x, zero_point, strides, dilations, begin, out_sp)
        if parts is None:
            return None
        raw, column = parts
        n, oh, ow = x.shape[0], int(out_sp[0]), int(out_sp[1])
        y = np.empty((n, self.m, oh * ow), dtype=np.float32)
        per_channel = np.ascontiguousarray(np.broadcast_to(scale.reshape(-1), (self.m,)), dtype=np.float32)
        b = np.zeros(0, np.float32) if bias is None else np.ascontiguousarray(bias.reshape(-1), dtype=np.float32)
        pick(scale_rows, scale_rows_serial, self.nthreads, y.size)(raw, column, per_channel, b, y, oh * ow)
        return y.reshape(n, self.m, oh, ow)

    def _parts(self, x: np.ndarray, zero_point: np.ndarray | None, strides: Sequence[int],
               dilations: Sequence[int], begin: Sequence[int], out_sp: Sequence[int]) -> tuple[Any, Any] | None:
        """The GEMM's padded product and column term (``product_parts``); weights with a row
        term get their exact sums as the product and a zero column term."""
        a = self.patch_matrix(x, zero_point, strides, dilations, begin, out_sp)
        if a is None:
            return None
        parts = self._gemm.product_parts(a, zero_point)
        if parts is not None:
            return parts  # type: ignore[no-any-return]
        sums = self._gemm.matmul(a, zero_point)
        return None if sums is None else (sums, np.zeros(self.m, np.int64))

    def rows(self, x: np.ndarray, zero_point: np.ndarray | None, strides: Sequence[int], dilations: Sequence[int],
             begin: Sequence[int], out_sp: Sequence[int]) -> np.ndarray | None:
        """The GEMM's (N*OH*OW, M) int32 rows of :meth:`sums`, or None."""
        a = self.patch_matrix(x, zero_point, strides, dilations, begin, out_sp)
        return None if a is None else self._gemm.matmul(a, zero_point)  # type: ignore[no-any-return]

    def patch_matrix(self, x: np.ndarray, zero_point: np.ndarray | None, strides: Sequence[int],
                     dilations: Sequence[int], begin: Sequence[int], out_sp: Sequence[int]) -> np.ndarray | None:
        """The (N*OH*OW, kh*kw*C) patches the GEMM multiplies, or None for a layer it does not
        take. A 1x1 stride-1 unpadded layer's patches are the channels-last image itself."""
        if x.ndim != 4 or x.dtype not in (np.dtype(np.uint8), np.dtype(np.int8)) or min(begin) < 0:
            return None
        if zero_point is not None and (np.asarray(zero_point).size != 1 or np.asarray(zero_point).dtype != x.dtype):
            return None
        n, c, h, w = x.shape
        _, _, kh, kw = self.shape
        oh, ow = int(out_sp[0]), int(out_sp[1])
        k = kh * kw * c
        few = c < MIN_CHANNELS and k < MIN_FIELD and not (k >= MIN_NARROW_FIELD and self.m >= MIN_NARROW_OUTPUTS)
        if few or n * oh * ow * k * self.m < MIN_MACS or 0 in (n, oh, ow):
            return None
        channels_last = np.ascontiguousarray(x.transpose(0, 2, 3, 1))  # free for a view requantized() wrote
        return patch_rows(channels_last, zero_point, (kh, kw), strides, dilations, begin, out_sp, self._gemm.k_pad,
                          self.nthreads)


def patch_rows(channels_last: np.ndarray, zero_point: np.ndarray | None, kernel: Sequence[int],
               strides: Sequence[int], dilations: Sequence[int], begin: Sequence[int], out_sp: Sequence[int],
               k_pad: int, nthreads: int, into: np.ndarray | None = None) -> np.ndarray:
    """The (N*OH*OW, kh*kw*C) patch rows of C-ordered channels-last codes ``(N, H, W, C)`` as
    the GEMM multiplies them (:func:`patches`; padding holds the zero point), each row in a
    buffer ``k_pad`` bytes long so the GEMM reads it in place (``into``: that buffer, flat,
    else a new one). A 1x1 stride-1 unpadded layer's patches are the image itself."""
    n, h, w, c = channels_last.shape
    kh, kw = int(kernel[0]), int(kernel[1])
    oh, ow = int(out_sp[0]), int(out_sp[1])
    if (kh, kw, oh, ow) == (1, 1, h, w) and tuple(strides) == (1, 1) and into is None:
        return channels_last.reshape(n * h * w, c)
    fill = channels_last.dtype.type(0 if zero_point is None else np.asarray(zero_point).reshape(()))
    dims = np.array((n, h, w, c, kh, kw, strides[0], strides[1], dilations[0], dilations[1], begin[0], begin[1],
                     oh, ow, k_pad), dtype=np.int64)
    a = np.empty(n * oh * ow * k_pad, dtype=channels_last.dtype) if into is None else into
    pick(patches, patches_serial, nthreads, a.size)(channels_last.reshape(-1), fill, a, dims)
    return a.reshape(n * oh * ow, k_pad)[:, :kh * kw * c]


def pack(w: Any, zero_point: Any, group: int, nthreads: int) -> PackedInt8Conv | None:
    """The weights packed when the GEMM runs here and takes them, else None."""
    if int8_gemm.support() is not None or not isinstance(w, np.ndarray):
        return None
    if not PackedInt8Conv.fits(w, zero_point, group):
        return None
    return PackedInt8Conv(w, zero_point, nthreads)
