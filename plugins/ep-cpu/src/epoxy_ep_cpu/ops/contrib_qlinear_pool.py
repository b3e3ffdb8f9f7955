"""com.microsoft QLinearAveragePool, as onnxruntime's QOperator quantization writes it for
AveragePool: ``X, x_scale, x_zero_point, y_scale, y_zero_point`` (8-bit, NCHW or, with
``channels_last``, NHWC).

onnxruntime's arithmetic, reproduced so the codes match exactly: each input code is
dequantized in float32 (``x_scale * (x - zp)``), a window is summed in float32 in row-major
window order, divided by its element count (the whole kernel with ``count_include_pad``,
else the positions inside the unpadded input), then ``rint(avg / y_scale + y_zp)`` saturates.
The zero point is added *before* rounding, which decides ties differently from
QuantizeLinear (``rint(v) + zp``).
"""

from __future__ import annotations

import math

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._contrib_util import bad_attribute
from ._conv_util import kernel_offsets, pad_spatial
from .pool import _PoolAttrs, _window_counts

DOMAIN = "com.microsoft"


def _scalar(v: np.ndarray | None, dtype: np.dtype) -> np.ndarray:
    return np.zeros((), dtype) if v is None else np.asarray(v, dtype=dtype).reshape(-1)[0]


def requantize_f32(y: np.ndarray, y_scale: np.ndarray, y_zero_point: np.ndarray | None, dtype: np.dtype) -> np.ndarray:
    """onnxruntime's ``quantize_value``: ``sat(nearbyint(y / scale + zp))`` in float32."""
    zp = np.float32(_scalar(y_zero_point, dtype))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = np.rint(y.astype(np.float32) / np.float32(_scalar(y_scale, np.dtype(np.float32))) + zp)
    info = np.iinfo(dtype)
    return np.clip(np.nan_to_num(q.astype(np.float64), nan=0.0), info.min, info.max).astype(dtype)


@KERNELS.register("QLinearAveragePool", 1, domain=DOMAIN)
def qlinear_average_pool(node: NodeSpec):
    a = _PoolAttrs(node)
    channels_last = int(node.attr("channels_last", 0))
    if channels_last not in (0, 1):
        raise bad_attribute(node, "channels_last", channels_last, "0 or 1")
    include_pad = int(node.attr("count_include_pad", 0))
    if include_pad not in (0, 1):
        raise bad_attribute(node, "count_include_pad", include_pad, "0 or 1")
    if any(d != 1 for d in a.dilations):
        raise bad_attribute(node, "dilations", a.dilations, "all 1 (average pooling has no dilation)")
    if any(k <= 0 for k in a.kernel) or any(s <= 0 for s in a.strides):
        raise bad_attribute(node, "kernel_shape/strides", (a.kernel, a.strides), "positive values")

    def run(x, x_scale, x_zero_point, y_scale, y_zero_point=None):
        if x.dtype not in (np.uint8, np.int8):
            raise Unsupported(f"QLinearAveragePool on {x.dtype}")
        xc = np.moveaxis(x, -1, 1) if channels_last else x
        out_sp, begin, end, extra = a.geometry(xc)
        n, c = xc.shape[:2]
        if any(o == 0 for o in out_sp) or n == 0 or c == 0:
            y = np.empty((n, c) + tuple(out_sp), x.dtype)
            return np.ascontiguousarray(np.moveaxis(y, 1, -1)) if channels_last else y
        zp = np.int32(_scalar(x_zero_point, x.dtype))
        deq = (xc.astype(np.int32) - zp).astype(np.float32) * np.float32(_scalar(x_scale, np.dtype(np.float32)))
        xp = pad_spatial(deq, begin, [e + ex for e, ex in zip(end, extra)], 0.0)
        acc = np.zeros((n, c) + tuple(out_sp), np.float32)
        lead = (slice(None), slice(None))
        for _, sl in kernel_offsets(a.kernel, a.strides, a.dilations, out_sp):
            acc += xp[lead + sl]  # row-major window order, padding adds exact zeros
        if include_pad:
            count = np.float32(math.prod(a.kernel))
        else:
            count = np.ones((), np.int64)
            for i, size in enumerate(xc.shape[2:]):
                ci = _window_counts(size, out_sp[i], a.kernel[i], a.strides[i], 1, begin[i], 0, size)
                count = np.multiply.outer(count, ci) if count.ndim else ci
            count = count.astype(np.float32)
        y = requantize_f32(acc / count, y_scale, y_zero_point, x.dtype)
        return np.ascontiguousarray(np.moveaxis(y, 1, -1)) if channels_last else y

    return run
