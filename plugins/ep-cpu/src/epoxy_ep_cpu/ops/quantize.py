"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear.

Granularity is read from the scale's shape: a scalar (per-tensor), a 1-D tensor along
``axis`` (per-axis) or, with ``block_size`` > 0, a tensor of the input's rank whose ``axis``
dimension is ``ceil(D / block_size)`` (blocked). Integer targets round half to even and
saturate to the type's range; float8/float4/float6 targets go through ``ml_dtypes`` casts
(clamped to the finite range when saturating).

float32 with 8/16-bit integer codes (every activation Q/DQ of a static QDQ model) takes a
fast path: one float32 temporary updated in place. It is exact, not approximate: ``x / scale``
is the spec's float32 division (not a multiply by ``1/scale``, which differs by an ulp at
times and so flips halves), ``rint`` rounds half to even, and every integer the path holds
(``|code| <= 65535``) is exact in float32, so adding the zero point and clipping in float32
give the integers the float64 path gives.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import helper

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from .. import jit
from ..registry import KERNELS
from ._flags import flag
from ._util import normalize_axis

_QUANT_VERSIONS = (10, 13, 19, 21, 23, 24, 25, 28)

#: float targets whose cast has no non-saturating (inf/NaN) encoding to fall back to
_ALWAYS_SATURATE = {
    np.dtype(ml_dtypes.float4_e2m1fn),
    np.dtype(ml_dtypes.float6_e2m3fn),
    np.dtype(ml_dtypes.float6_e3m2fn),
}
_FLOAT_COMPUTE = {np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64), np.dtype(ml_dtypes.bfloat16)}
_F32 = np.dtype(np.float32)
#: integer codes whose range (and any difference of two codes) is exact in float32
FAST_CODES = frozenset(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16))
#: per-tensor codes the jit tier writes in one pass (``jit/kernels_quantize.run_codes``)
_COMPILED_CODES = frozenset(np.dtype(t) for t in (np.int8, np.uint8))


def _onnx_dtype(code: int) -> np.dtype:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(int(code)))
    except Exception as exc:  # noqa: BLE001 - unknown enum value
        raise Unsupported(f"unsupported data type {code}") from exc


def _is_int_dtype(dt: np.dtype) -> bool:
    return dt.kind in "iu" or dt in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4),
                                     np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.uint2))


def int_range(dt: np.dtype) -> tuple[int, int]:
    info = ml_dtypes.iinfo(dt) if dt.kind not in "iu" else np.iinfo(dt)
    return int(info.min), int(info.max)


def expand_param(param: np.ndarray, x_shape: tuple[int, ...], axis_attr: int, block_size: int) -> np.ndarray:
    """Broadcastable view of a scale / zero point against ``x`` for its granularity."""
    rank = len(x_shape)
    if param.ndim == 0 or (param.size == 1 and block_size <= 0):
        return param.reshape(())  # per-tensor: the axis is irrelevant
    axis = normalize_axis(axis_attr, rank)
    if rank == 1 and not 0 <= axis < rank:
        axis = 0  # a 1-D input can only be quantized along its one axis
    if not 0 <= axis < rank:
        raise ValueError(f"axis {axis_attr} out of range for rank {rank}")
    if block_size > 0:
        if param.ndim != rank:
            raise ValueError(f"blocked quantization needs a scale of rank {rank}, got shape {param.shape}")
        dim = x_shape[axis]
        if param.shape[axis] != -(-dim // block_size):
            raise ValueError(f"scale dim {param.shape[axis]} does not match ceil({dim}/{block_size}) on axis {axis}")
        # block of each position along the axis (never repeats a block past the axis: a
        # block_size far beyond it would ask for that many copies)
        return np.take(param, np.arange(dim) // block_size, axis=axis)
    if param.ndim == 1 and rank > 0 and param.shape[0] == x_shape[axis]:
        shape = [1] * rank
        shape[axis] = param.shape[0]
        return param.reshape(shape)
    if param.ndim == rank:  # already full-rank (broadcastable) parameters
        return param
    raise ValueError(f"scale of shape {param.shape} does not fit input of shape {x_shape} on axis {axis}")


def quantize_f32(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, out_dt: np.dtype) -> np.ndarray:
    """``saturate(rint(x / scale) + zero_point)`` for float32 ``scale`` (broadcastable) and an
    8/16-bit ``out_dt``; NaN quantizes to 0 (the float64 path's answer; the spec is silent)."""
    q = np.divide(x.astype(_F32, copy=False), scale, dtype=_F32)
    np.rint(q, out=q)
    if zero_point is not None:
        q += zero_point.astype(_F32)
    lo, hi = int_range(out_dt)
    saturate_into(q, lo, hi, 0)
    return q.astype(out_dt)


def saturate_into(q: np.ndarray, lo: np.ndarray | float, hi: np.ndarray | float, nan: np.ndarray | float) -> None:
    """Clip ``q`` to ``[lo, hi]`` (broadcastable bounds) and set its NaNs to ``nan``, in place.

    Why the range check first: two reductions cost a third of ``np.clip`` plus the NaN scan, and
    activations quantized with their calibrated range are inside it on most runs (a NaN fails
    the check: comparisons with NaN are false)."""
    if q.size == 0:
        return
    if q.min() >= np.max(lo) and q.max() <= np.min(hi):
        return
    np.clip(q, lo, hi, out=q)
    nan_to(q, nan)


def nan_to(q: np.ndarray, value: np.ndarray | float) -> None:
    """Set ``q``'s NaNs to ``value`` in place (a NaN cast to an integer is undefined)."""
    nan = np.isnan(q)
    if nan.any():
        np.copyto(q, np.broadcast_to(np.asarray(value, dtype=q.dtype), q.shape), where=nan)


def dequantize_f32(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None) -> np.ndarray:
    """``float32(x - zero_point) * scale`` for 8/16-bit codes and a float32 ``scale``: the
    difference is exact in float32, so this equals the int64-difference path bit for bit."""
    y = x.astype(_F32)
    if zero_point is not None:
        y -= zero_point.astype(_F32)
    y *= scale
    return y


@KERNELS.register("QuantizeLinear", _QUANT_VERSIONS)
def quantize_linear(node: NodeSpec):
    axis_attr = int(node.attr("axis", 1)) if node.opset >= 13 else 0
    block_size = int(node.attr("block_size", 0))
    saturate = flag(node, "saturate", 1)
    out_code = int(node.attr("output_dtype", 0))
    fixed_out = _onnx_dtype(out_code) if out_code else None
    precision_code = int(node.attr("precision", 0)) if node.opset >= 23 else 0
    precision = _onnx_dtype(precision_code) if precision_code else None
    if block_size < 0:
        raise Unsupported("block_size must be positive")
    compiled = jit.kernels("quantize")
    nthreads = jit.thread_count() if compiled is not None else 1

    def run(x: np.ndarray, y_scale: np.ndarray, y_zero_point: np.ndarray | None = None) -> np.ndarray:
        if fixed_out is not None:
            out_dt = fixed_out
        elif y_zero_point is not None:
            out_dt = y_zero_point.dtype
        else:
            out_dt = np.dtype(np.uint8)
        if (compiled is not None and precision is None and x.dtype == _F32 and y_scale.dtype == _F32
                and y_scale.size == 1 and out_dt in _COMPILED_CODES and x.size
                and (y_zero_point is None or y_zero_point.size == 1)):
            # a static QDQ activation's codes: quantize_f32's steps in one compiled pass
            zp = np.float32(0) if y_zero_point is None else np.float32(y_zero_point.reshape(()))
            return compiled.run_codes(x, y_scale.reshape(()), zp, out_dt, nthreads)
        if precision is not None:
            cdt = precision
        elif y_scale.dtype in _FLOAT_COMPUTE:
            cdt = y_scale.dtype
        else:
            cdt = np.dtype(np.float32)
        scale = expand_param(y_scale, x.shape, axis_attr, block_size).astype(cdt)
        if cdt == _F32 and out_dt in FAST_CODES:
            zp_fast = None if y_zero_point is None else expand_param(y_zero_point, x.shape, axis_attr, block_size)
            return quantize_f32(x, scale, zp_fast, out_dt)
        q = x.astype(cdt) / scale
        q = q.astype(np.float64) if _is_int_dtype(out_dt) else q.astype(np.float32)
        if y_zero_point is not None:
            zp = expand_param(y_zero_point, x.shape, axis_attr, block_size)
            zp = zp.astype(np.float64) if _is_int_dtype(out_dt) else zp.astype(np.float32)
        else:
            zp = None
        if _is_int_dtype(out_dt):
            q = np.rint(q)
            if zp is not None:
                q = q + zp
            lo, hi = int_range(out_dt)
            q = np.clip(q, lo, hi)
            q = np.nan_to_num(q, nan=0.0)
            return np.asarray(q.astype(np.int64).astype(out_dt))
        if zp is not None:
            q = q + zp
        if saturate or out_dt in _ALWAYS_SATURATE:
            fmax = float(ml_dtypes.finfo(out_dt).max)
            q = np.clip(q, -fmax, fmax)
        return np.asarray(q.astype(out_dt))

    return run


@KERNELS.register("DequantizeLinear", _QUANT_VERSIONS)
def dequantize_linear(node: NodeSpec):
    axis_attr = int(node.attr("axis", 1)) if node.opset >= 13 else 0
    block_size = int(node.attr("block_size", 0))
    out_code = int(node.attr("output_dtype", 0)) if node.opset >= 23 else 0
    fixed_out = _onnx_dtype(out_code) if out_code else None

    def run(x: np.ndarray, x_scale: np.ndarray, x_zero_point: np.ndarray | None = None) -> np.ndarray:
        # codes QLinearConv wrote channels last arrive as an NCHW view: the float tensor starts
        # C-ordered, or every float op after it would walk the strided layout (a residual Sum
        # of one such tensor and a C-ordered one ran 5x slower)
        x = x if x.flags.c_contiguous else np.ascontiguousarray(x)
        if fixed_out is not None:
            out_dt = fixed_out
        elif x_scale.dtype in _FLOAT_COMPUTE:
            out_dt = x_scale.dtype
        else:
            out_dt = np.dtype(np.float32)
        if out_dt == _F32 and x.dtype in FAST_CODES and x_scale.dtype == _F32:
            zp_fast = None if x_zero_point is None else expand_param(x_zero_point, x.shape, axis_attr, block_size)
            return dequantize_f32(x, expand_param(x_scale, x.shape, axis_attr, block_size), zp_fast)
        integer = _is_int_dtype(x.dtype)
        diff = x.astype(np.int64) if integer else x.astype(np.float32)
        if x_zero_point is not None:
            zp = expand_param(x_zero_point, x.shape, axis_attr, block_size)
            diff = diff - (zp.astype(np.int64) if integer else zp.astype(np.float32))
        scale = expand_param(x_scale, x.shape, axis_attr, block_size)
        if out_dt == np.dtype(np.float32) or out_dt == np.dtype(np.float64):
            y = diff.astype(out_dt) * scale.astype(out_dt)
        else:  # reduced-precision outputs: multiply in float32, round once
            y = (diff.astype(np.float32) * scale.astype(np.float32)).astype(out_dt)
        return np.asarray(y, dtype=out_dt)

    return run


@KERNELS.register("DynamicQuantizeLinear", 11)
def dynamic_quantize_linear(node: NodeSpec):
    """The spec's formulas in float32, read as the ONNX reference reads them where they stop
    being finite: the range is ``[min(0, min x), max(0, max x)]`` (NaN when x holds a NaN),
    an empty range takes scale 1/255, a zero point that comes out NaN (scale 0, NaN or inf)
    saturates to 255, and a NaN quotient quantizes to 0."""

    compiled = jit.kernels("quantize")
    nthreads = jit.thread_count() if compiled is not None else 1

    def run(x: np.ndarray):
        xf = x.astype(np.float32, copy=False)
        hi = np.maximum(np.float32(0), np.max(xf)) if xf.size else np.float32(0)
        lo = np.minimum(np.float32(0), np.min(xf)) if xf.size else np.float32(0)
        with np.errstate(all="ignore"):
            scale = np.float32(np.float32(1) if hi == lo else hi - lo) / np.float32(255)
            zp_f = np.float32(0) - lo / scale
            zp = np.float32(255) if np.isnan(zp_f) else np.rint(np.clip(zp_f, 0, 255))
            if compiled is not None and xf.size:  # the same steps in one compiled pass
                q8 = compiled.run_uint8_codes(xf, scale, zp, nthreads)
                return q8, np.asarray(scale, dtype=np.float32), np.asarray(zp, dtype=np.uint8)
            # one temporary, updated in place (this runs on every activation of a dynamic
            # int8 model): rint, + zp and clip are the spec's steps in its order
            q = np.divide(xf, scale, dtype=np.float32)
            np.rint(q, out=q)
            q += zp
            np.clip(q, 0, 255, out=q)
        if not (np.isfinite(scale) and scale > 0 and np.isfinite(hi) and np.isfinite(lo)):
            q[np.isnan(q)] = 0  # a NaN quotient (NaN or inf in x, or a zero scale) quantizes to 0
        return q.astype(np.uint8), np.asarray(scale, dtype=np.float32), np.asarray(zp, dtype=np.uint8)

    return run
