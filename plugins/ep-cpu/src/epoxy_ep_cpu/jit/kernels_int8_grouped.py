"""Grouped 2-D QLinearConv (``group`` > 1, several input channels per group: ShuffleNet's
grouped 1x1 layers, ResNeXt/RegNet blocks) on the int8 GEMM (``kernels_int8_gemm``): one product
per group, every group in one kernel call, all writing into one channels-last output.

Why per group and not one product with block-diagonal weights: the zeros off the diagonal
would multiply G times the work (ShuffleNet's four groups: 4x). Why one call: a group's product
is small (196 x 68 x 68 in ShuffleNet), and a call from Python per group cost ~8 us, as much as
the product. A 1x1 stride-1 layer's groups are read in place, each a column slice of the
channels-last image (row stride C); other layers build each group's patches from its channel
slice, one buffer per group.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import kernels_int8_gemm as int8_gemm
from .kernels_int8_conv import MIN_CHANNELS, MIN_FIELD, MIN_MACS, patch_rows

_CODES = (np.dtype(np.uint8), np.dtype(np.int8))


class PackedGroupedInt8:
    """A grouped layer's constant weights ``(M, C/G, kh, kw)`` of 8-bit codes, packed per group
    for the GEMM in channels-last order (``int8_gemm.GroupedInt8Weights``), with their zero
    point (None, one, or one per output channel)."""

    __slots__ = ("_gemm", "group", "m", "nthreads", "shape")

    def __init__(self, w: np.ndarray, zero_point: np.ndarray | None, group: int, nthreads: int) -> None:
        self.shape, self.group, self.m, self.nthreads = w.shape, group, w.shape[0], nthreads
        mg = self.m // group
        zp = None if zero_point is None else np.asarray(zero_point).reshape(-1)
        bs, zps = [], []
        for g in range(group):
            rows = np.ascontiguousarray(w[g * mg:(g + 1) * mg].transpose(0, 2, 3, 1)).reshape(mg, -1)  # (Mg, kh*kw*Cg)
            bs.append(rows.T)
            zps.append(zp if zp is None or zp.size == 1 else zp[g * mg:(g + 1) * mg])
        self._gemm = int8_gemm.GroupedInt8Weights(bs, zps, nthreads)

    @staticmethod
    def fits(w: np.ndarray, zero_point: np.ndarray | None, group: int) -> bool:
        """2-D, grouped (not depthwise: ``kernels_int8_depthwise``), 8-bit codes with a zero
        point the requantizing epilogue takes (int8 weights centred on 0, uint8 on 128)."""
        if w.ndim != 4 or group < 2 or w.shape[0] % group or w.shape[1] < 2 or w.dtype not in _CODES:
            return False
        zp = None if zero_point is None else np.asarray(zero_point).reshape(-1)
        if zp is not None and zp.size not in (1, w.shape[0]):
            return False
        if not int8_gemm.PackedInt8Weights.fits(w.reshape(w.shape[0], -1).T, zp):
            return False
        centre = 128 if w.dtype == np.uint8 else 0
        return zp is None or bool((zp.astype(np.int64) == centre).all())

    def requantization(self, bias: np.ndarray | None, scale: np.ndarray,
                       y_zero_point: np.ndarray) -> int8_gemm.Requantization:
        """The terms :meth:`requantized` reads, each group's padded (made once per node when
        they are constants)."""
        return self._gemm.requantization(bias, scale, y_zero_point)

    def requantized(self, x: np.ndarray, zero_point: np.ndarray | None, strides: Sequence[int],
                    dilations: Sequence[int], begin: Sequence[int], out_sp: Sequence[int],
                    terms: int8_gemm.Requantization) -> np.ndarray | None:
        """QLinearConv's output codes as an (N, M, OH, OW) view of channels-last codes, or None
        for what this does not take (the caller's float path runs it): not 4-D 8-bit codes, a
        zero point not a scalar of x's dtype, negative pads, too small a layer (the group-1
        thresholds, channels counted per group)."""
        if x.ndim != 4 or x.dtype not in _CODES or min(begin) < 0:
            return None
        if zero_point is not None and (np.asarray(zero_point).size != 1 or np.asarray(zero_point).dtype != x.dtype):
            return None
        n, c, h, w = x.shape
        _, cg, kh, kw = self.shape
        oh, ow = int(out_sp[0]), int(out_sp[1])
        k, g, p = kh * kw * cg, self.group, n * oh * ow
        if c != cg * g or 0 in (n, oh, ow):
            return None
        if (cg < MIN_CHANNELS and k < MIN_FIELD) or p * k * self.m < MIN_MACS:
            return None
        channels_last = np.ascontiguousarray(x.transpose(0, 2, 3, 1))  # free for the codes QLinearConv hands on
        if (kh, kw, oh, ow) == (1, 1, h, w) and tuple(strides) == (1, 1):
            a = channels_last.reshape(p, g, cg).transpose(1, 0, 2)  # group slices of the image, in place
        else:
            k_pad = self._gemm.k_pad
            buffer = np.empty((g, p * k_pad), dtype=x.dtype)
            for index in range(g):
                part = np.ascontiguousarray(channels_last[..., index * cg:(index + 1) * cg])
                patch_rows(part, zero_point, (kh, kw), strides, dilations, begin, out_sp, k_pad, self.nthreads,
                           into=buffer[index])
            a = buffer.reshape(g, p, k_pad)[:, :, :k]
        y = self._gemm.requantized(a, zero_point, terms)
        return None if y is None else y.reshape(n, oh, ow, self.m).transpose(0, 3, 1, 2)


def pack(w: Any, zero_point: Any, group: int, nthreads: int) -> PackedGroupedInt8 | None:
    """The weights packed when the GEMM runs here and the layer is grouped, else None."""
    if int8_gemm.support() is not None or not isinstance(w, np.ndarray):
        return None
    if not PackedGroupedInt8.fits(w, zero_point, group):
        return None
    return PackedGroupedInt8(w, zero_point, group, nthreads)
