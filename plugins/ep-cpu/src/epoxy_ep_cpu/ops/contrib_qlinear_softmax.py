"""com.microsoft QLinearSoftmax (``X, x_scale, x_zero_point, y_scale, y_zero_point``;
``axis``, ``opset``), as onnxruntime's QOperator quantization writes it for Softmax.

onnxruntime does not dequantize: softmax is shift invariant, so it reads ``exp`` of each
code's distance ``d = max - x`` from its row's maximum out of a float32 table
``float32(exp((255 - d - 255 + shift) * x_scale))`` (computed in double; ``shift =
max(0, ln(FLT_MAX / D) - 5) / x_scale`` keeps the sum of D entries finite), sums a row in
float32 in order, and quantizes ``rint(e * floor(1 / y_scale) / sum) + y_zp``, the output
scale replaced by the integer ``floor(1 / y_scale)`` (exact for the 1/256 the tools use).
The same arithmetic is done here, so the codes match exactly (both saturate).

``opset`` < 13 is the old coerced-2-D softmax over all axes from ``axis`` on; 13 and later
is softmax along ``axis`` alone. ``axis`` defaults to -1 for both, as onnxruntime's schema
fills it in (not Softmax-1's default of 1).
"""

from __future__ import annotations

import math

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._contrib_util import bad_attribute
from ._util import normalize_axis

DOMAIN = "com.microsoft"
_FLT_MAX = np.float32(np.finfo(np.float32).max)


def exp_table(x_scale: float, reduce_len: int) -> np.ndarray:
    """float32 ``exp`` of the 256 code distances ``d`` (index ``255 - d``), pre-shifted so
    that ``reduce_len`` of the largest still sum to a finite float32."""
    xs = float(np.float32(x_scale))
    headroom = math.log(float(_FLT_MAX / np.float32(reduce_len)))
    shift = max(0.0, headroom - 5.0) / xs
    i = np.arange(256, dtype=np.float64)
    return np.exp((i - 255.0 + shift) * xs).astype(np.float32)


def _softmax_rows(x2: np.ndarray, x_scale: float, y_scale: float, y_zp: int, dtype: np.dtype) -> np.ndarray:
    """Quantized softmax of each row of ``x2`` [N, D]."""
    d = x2.shape[1]
    table = exp_table(x_scale, d)
    codes = x2.astype(np.int32)
    dist = codes.max(axis=1, keepdims=True) - codes  # 0..255
    e = table[255 - dist]
    total = np.cumsum(e, axis=1, dtype=np.float32)[:, -1:]  # sequential float32 sum
    inv = np.float32(math.floor(np.float32(1.0) / np.float32(y_scale)))
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.rint((e * inv) / total).astype(np.float64) + y_zp
    info = np.iinfo(dtype)
    return np.clip(np.nan_to_num(q, nan=0.0), info.min, info.max).astype(dtype)


@KERNELS.register("QLinearSoftmax", 1, domain=DOMAIN)
def qlinear_softmax(node: NodeSpec):
    opset = node.attr("opset")
    if opset is None or int(opset) <= 0:
        raise bad_attribute(node, "opset", opset, "the Softmax opset the node replaces (a positive int)")
    coerced = int(opset) < 13
    axis_attr = int(node.attr("axis", -1))

    def run(x, x_scale, x_zero_point, y_scale, y_zero_point=None):
        if x.dtype not in (np.uint8, np.int8):
            raise Unsupported(f"QLinearSoftmax on {x.dtype}")
        if x.size == 0:
            return np.empty(x.shape, x.dtype)
        axis = normalize_axis(axis_attr, x.ndim)
        if not 0 <= axis < x.ndim:
            raise ValueError(f"QLinearSoftmax node {node.name!r}: axis {axis_attr} out of range for rank {x.ndim}")
        xs = float(np.asarray(x_scale, np.float32).reshape(-1)[0])
        ys = float(np.asarray(y_scale, np.float32).reshape(-1)[0])
        yzp = 0 if y_zero_point is None else int(np.asarray(y_zero_point).reshape(-1)[0])
        if coerced:
            rows = x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1)
            return _softmax_rows(rows, xs, ys, yzp, x.dtype).reshape(x.shape)
        moved = np.moveaxis(x, axis, -1)
        y = _softmax_rows(moved.reshape(-1, x.shape[axis]), xs, ys, yzp, x.dtype).reshape(moved.shape)
        return np.ascontiguousarray(np.moveaxis(y, -1, axis))

    return run
