"""onnxruntime contrib (``com.microsoft``) quantized ops, as its quantization tools emit them.

Integer products accumulate exactly (float64 BLAS: every 8-bit product and realistic sums
are exact integers). Requantization follows onnxruntime's arithmetic: the float32 value
``acc * scale`` (or the table entry ``f(dequant(x))``) rounded half to even, plus the zero
point, saturated to the output type. Element-wise ops (QLinearSigmoid, QLinearLeakyRelu,
QLinearConcat's requantized inputs) go through a 256-entry table like onnxruntime's.

- DynamicQuantizeMatMul(A, B, b_scale, b_zero_point?, bias?): A quantized to uint8 as
  DynamicQuantizeLinear does, integer GEMM, ``* a_scale * b_scale + bias``.
- MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zero_point?, b_zero_point?, bias?).
- QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?): alpha, transA, transB;
  C is int32 in the accumulator's scale; float output when y_scale is absent.
- QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat,
  QLinearGlobalAveragePool (``channels_last``).
- QLinearWhere(condition, X, x_scale, x_zp, Y, y_scale, y_zp, z_scale, z_zp): each branch
  requantized to Z's parameters through the identity table (copied when they already match).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from epoxy.contract import NodeSpec

from .. import jit
from ..registry import KERNELS
from ._int_matmul import weights_product
from ._util import normalize_axis

DOMAIN = "com.microsoft"
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _f32(v: np.ndarray | float) -> np.ndarray:
    return np.asarray(v, dtype=np.float32)


_U8 = np.dtype(np.uint8)


def _zp(v: np.ndarray | None, like: np.dtype = _U8) -> np.ndarray:
    """A zero point input, or 0 of ``like`` when it is omitted."""
    return np.zeros((), dtype=like) if v is None else np.asarray(v)


def _saturate(q: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(q, info.min, info.max).astype(dtype)


def _requantize(value: np.ndarray, zero_point: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round a float32 value half to even, add the zero point, saturate to ``dtype``."""
    with np.errstate(invalid="ignore"):
        q = np.rint(value.astype(np.float32)).astype(np.float64) + zero_point.astype(np.float64)
    return _saturate(np.nan_to_num(q, nan=0.0), dtype)


def _quantize(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """QuantizeLinear in float32: ``sat(rint(x / scale) + zp)``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return _requantize(x.astype(np.float32) / _f32(scale), zero_point, dtype)


def per_column(v: np.ndarray | None) -> np.ndarray:
    """A per-tensor or per-column (last axis) parameter, broadcastable against ``(.., N)``."""
    if v is None:
        return np.zeros((), dtype=np.float64)
    v = np.asarray(v)
    return v.reshape(()) if v.size == 1 else v.reshape(-1)


def int_matmul(a: np.ndarray, b: np.ndarray, a_zp: np.ndarray | None, b_zp: np.ndarray | None) -> np.ndarray:
    """Exact integer product of zero-point-shifted codes (float64 holds every 8-bit sum)."""
    af = a.astype(_F64) - per_column(a_zp).astype(_F64)
    bf = b.astype(_F64) - per_column(b_zp).astype(_F64)
    return np.asarray(np.matmul(af, bf))


def dynamic_quantize_u8(x: np.ndarray) -> tuple[np.ndarray, np.float32, np.uint8]:
    """DynamicQuantizeLinear: uint8 codes, scale and zero point of a float tensor."""
    xf = x.astype(np.float32)
    lo = min(0.0, float(np.min(xf))) if xf.size else 0.0
    hi = max(0.0, float(np.max(xf))) if xf.size else 0.0
    scale = np.float32((np.float32(hi) - np.float32(lo)) / np.float32(255.0))
    if scale == 0 or not np.isfinite(scale):
        return np.zeros(x.shape, dtype=np.uint8), np.float32(scale), np.uint8(0)
    zp = np.uint8(np.clip(np.rint(np.float32(0.0) - np.float32(lo) / scale), 0, 255))
    q = np.clip(np.rint(xf / scale) + np.float32(zp), 0, 255).astype(np.uint8)
    return q, scale, zp


@KERNELS.register("DynamicQuantizeMatMul", 1, domain=DOMAIN)
def dynamic_quantize_matmul(node: NodeSpec):
    product = weights_product(node, 1, 3, int_matmul)  # weights packed once

    def run(a, b, b_scale, b_zero_point=None, bias=None):
        qa, a_scale, a_zp = dynamic_quantize_u8(a)
        acc = product(qa, b, np.asarray(a_zp), b_zero_point)
        scale = _f32(a_scale) * per_column(b_scale).astype(np.float32)
        y = acc.astype(np.float32) * scale
        if bias is not None:
            y = y + bias.astype(np.float32)
        return np.asarray(y, dtype=np.float32)

    return run


def _one_pass_tail(acc: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, out_dtype: np.dtype) -> bool:
    """Whether the compiled tail computes this product's float output: an int32 product of
    rank >= 1, float32 output, scale and bias of one value or one per column."""
    n = acc.shape[-1] if acc.ndim else 0
    return (acc.dtype == np.int32 and acc.ndim >= 1 and n > 0 and out_dtype == np.float32
            and scale.size in (1, n) and scale.ndim <= 1
            and (bias is None or (bias.dtype == np.float32 and bias.ndim <= 1 and bias.size in (1, n))))


@KERNELS.register("MatMulIntegerToFloat", 1, domain=DOMAIN)
def matmul_integer_to_float(node: NodeSpec):
    product = weights_product(node, 1, 5, int_matmul)
    compiled = jit.kernels("quantize")
    nthreads = jit.thread_count() if compiled is not None else 1

    def run(a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
        out_dtype = np.asarray(a_scale).dtype
        acc = product(a, b, a_zero_point, b_zero_point)
        scale = per_column(a_scale).astype(np.float32) * per_column(b_scale).astype(np.float32)
        if compiled is not None and _one_pass_tail(acc, scale, bias, out_dtype):
            return compiled.run_scale_columns(acc, scale, bias, nthreads)  # the lines below in one pass
        y = acc.astype(np.float32) * scale
        if bias is not None:
            y = y + bias.astype(np.float32)
        return np.asarray(y).astype(out_dtype)

    return run


@KERNELS.register("QGemm", 1, domain=DOMAIN)
def qgemm(node: NodeSpec):
    alpha = float(node.attr("alpha", 1.0))
    trans_a = bool(node.attr("transA", 0))
    trans_b = bool(node.attr("transB", 0))

    def run(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c=None, y_scale=None, y_zero_point=None):
        af = a.astype(_F64) - np.asarray(a_zero_point).astype(_F64).reshape(())
        bzp = np.asarray(b_zero_point).astype(_F64)
        bf = b.astype(_F64)
        if trans_b:  # per-column parameters follow N, the rows of B^T
            bf = (bf - (bzp.reshape(-1, 1) if bzp.size > 1 else bzp.reshape(()))).T
        else:
            bf = bf - (bzp.reshape(-1) if bzp.size > 1 else bzp.reshape(()))
        if trans_a:
            af = af.T
        acc = af @ bf
        if c is not None:
            acc = acc + c.astype(_F64)
        scale = np.float32(alpha) * _f32(a_scale).reshape(()) * per_column(b_scale).astype(np.float32)
        if y_scale is None:
            return np.asarray(acc.astype(np.float32) * scale, dtype=np.float32)
        out_dtype = np.asarray(y_zero_point).dtype if y_zero_point is not None else a.dtype
        return _requantize(acc.astype(np.float32) * (scale / _f32(y_scale).reshape(())),
                           _zp(y_zero_point, out_dtype).reshape(()), out_dtype)

    return run


def _dequantize(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None) -> np.ndarray:
    return (x.astype(np.float32) - _zp(zero_point, x.dtype).astype(np.float32)) * _f32(scale)


@KERNELS.register("QLinearAdd", 1, domain=DOMAIN)
def qlinear_add(node: NodeSpec):
    def run(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
        cs = _f32(c_scale)
        ra = _f32(a_scale) / cs
        rb = _f32(b_scale) / cs
        va = (a.astype(np.float32) - _zp(a_zero_point, a.dtype).astype(np.float32)) * ra
        vb = (b.astype(np.float32) - _zp(b_zero_point, b.dtype).astype(np.float32)) * rb
        return _requantize(va + vb, _zp(c_zero_point, a.dtype), a.dtype)

    return run


@KERNELS.register("QLinearMul", 1, domain=DOMAIN)
def qlinear_mul(node: NodeSpec):
    def run(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
        ratio = _f32(a_scale) * _f32(b_scale) / _f32(c_scale)
        va = a.astype(np.float32) - _zp(a_zero_point, a.dtype).astype(np.float32)
        vb = b.astype(np.float32) - _zp(b_zero_point, b.dtype).astype(np.float32)
        return _requantize(va * vb * ratio, _zp(c_zero_point, a.dtype), a.dtype)

    return run


def _table_op(f: Callable[[np.ndarray], np.ndarray]):
    """Kernel ``(x, x_scale, x_zp?, y_scale, y_zp?)`` applying ``f`` through a 256-entry table."""

    def run(x, x_scale, x_zero_point, y_scale, y_zero_point=None):
        info = np.iinfo(x.dtype)
        codes = np.arange(info.min, info.max + 1).astype(x.dtype)
        with np.errstate(over="ignore"):
            table = _quantize(f(_dequantize(codes, x_scale, x_zero_point)), y_scale,
                              _zp(y_zero_point, x.dtype), x.dtype)
        return table[x.astype(np.int64) - info.min]

    return run


@KERNELS.register("QLinearSigmoid", 1, domain=DOMAIN)
def qlinear_sigmoid(node: NodeSpec):
    def sigmoid(v: np.ndarray) -> np.ndarray:
        return (np.float32(1.0) / (np.float32(1.0) + np.exp(-v))).astype(np.float32)

    return _table_op(sigmoid)


@KERNELS.register("QLinearLeakyRelu", 1, domain=DOMAIN)
def qlinear_leaky_relu(node: NodeSpec):
    alpha = np.float32(node.attr("alpha", 0.01))

    def leaky(v: np.ndarray) -> np.ndarray:
        return np.where(v >= 0, v, v * alpha).astype(np.float32)

    return _table_op(leaky)


@KERNELS.register("QLinearConcat", 1, domain=DOMAIN)
def qlinear_concat(node: NodeSpec):
    axis_attr = int(node.attr("axis", 0))

    def run(y_scale, y_zero_point, *tuples):
        if len(tuples) % 3 or not tuples:
            raise ValueError("QLinearConcat takes (X, X_scale, X_zero_point) triples after Y_scale, Y_zero_point")
        out_dtype = np.asarray(y_zero_point).dtype
        ys, yzp = _f32(y_scale).reshape(()), np.asarray(y_zero_point).reshape(())
        parts = []
        for i in range(0, len(tuples), 3):
            x, xs, xzp = tuples[i], tuples[i + 1], tuples[i + 2]
            if _f32(xs).reshape(()) == ys and np.asarray(xzp).reshape(()) == yzp and x.dtype == out_dtype:
                parts.append(x)
            else:
                parts.append(_table_op(lambda v: v)(x, xs, xzp, ys, yzp).astype(out_dtype))
        axis = normalize_axis(axis_attr, parts[0].ndim)
        return np.concatenate(parts, axis=axis)

    return run


@KERNELS.register("QLinearGlobalAveragePool", 1, domain=DOMAIN)
def qlinear_global_average_pool(node: NodeSpec):
    channels_last = bool(node.attr("channels_last", 0))

    def run(x, x_scale, x_zero_point, y_scale, y_zero_point):
        spatial = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
        count = int(np.prod([x.shape[a] for a in spatial], dtype=np.int64))
        acc = x.astype(np.int64).sum(axis=spatial, keepdims=True)
        acc = acc - np.int64(np.asarray(x_zero_point).reshape(())) * count
        scale = _f32(x_scale).reshape(()) / (_f32(y_scale).reshape(()) * np.float32(count))
        return _requantize(acc.astype(np.float32) * scale, np.asarray(y_zero_point).reshape(()), x.dtype)

    return run


def _requantize_to(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, out_scale: np.ndarray,
                   out_zero_point: np.ndarray) -> np.ndarray:
    """Codes of ``x`` re-expressed in the output's parameters (the identity table), or ``x``
    itself when the parameters already agree."""
    out_dtype = np.asarray(out_zero_point).dtype
    if (_f32(scale).reshape(()) == _f32(out_scale).reshape(()) and x.dtype == out_dtype
            and np.asarray(zero_point).reshape(()) == np.asarray(out_zero_point).reshape(())):
        return x
    return _table_op(lambda v: v)(x, scale, zero_point, out_scale, out_zero_point).astype(out_dtype)


@KERNELS.register("QLinearWhere", 1, domain=DOMAIN)
def qlinear_where(node: NodeSpec):
    def run(condition, x, x_scale, x_zero_point, y, y_scale, y_zero_point, z_scale, z_zero_point):
        zzp = np.asarray(z_zero_point).reshape(())
        xq = _requantize_to(x, x_scale, x_zero_point, z_scale, zzp)
        yq = _requantize_to(y, y_scale, y_zero_point, z_scale, zzp)
        return np.where(np.asarray(condition, dtype=bool), xq, yq).astype(zzp.dtype, copy=False)

    return run
