"""Cast, CastLike and BitCast (all ONNX element types; exotic floats through ml_dtypes)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from onnx import helper

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._flags import flag
from ._shape_util import contig, schema_versions

_F8 = {
    np.dtype(ml_dtypes.float8_e4m3fn),
    np.dtype(ml_dtypes.float8_e4m3fnuz),
    np.dtype(ml_dtypes.float8_e5m2),
    np.dtype(ml_dtypes.float8_e5m2fnuz),
}
_E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
_OBJ = np.dtype(object)
_PLAIN_SOURCE = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64))
_PLAIN = _PLAIN_SOURCE | {np.dtype(np.float32), np.dtype(np.float64)}


def _onnx_dtype(elem_type: int) -> np.dtype:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(int(elem_type)))
    except Exception as exc:  # noqa: BLE001
        raise Unsupported(f"Cast to element type {elem_type}: {exc}") from exc


def _is_exotic(dt: np.dtype) -> bool:
    """ml_dtypes types (numpy kind 'V' or unusual): convert through float32 when in doubt."""
    return dt.type.__module__.startswith("ml_dtypes")


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """float -> float8e8m0 (a power of two 2**(e-127), bits = e; 0xFF is NaN)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    exp = ((bits >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int32)
    mant = bits & np.uint32(0x7FFFFF)
    special = exp == 0xFF
    if round_mode == "up":
        inc = mant != 0
    elif round_mode == "down":
        inc = np.zeros(exp.shape, dtype=bool)
    elif round_mode == "nearest":
        half = (mant & np.uint32(0x400000)) != 0
        below_half = (mant & np.uint32(0x3FFFFF)) != 0
        # at or above the linear midpoint rounds up; an exact tie at the subnormal range stays
        inc = half & ((exp > 0) | below_half)
    else:
        raise Unsupported(f"Cast round_mode {round_mode!r}")
    e = exp + inc.astype(np.int32)
    if saturate:
        e = np.minimum(e, 0xFE)
        out = np.where(special, np.where(mant != 0, 0xFF, 0xFE), e)
    else:
        out = np.where(special, 0xFF, e)  # overflow (e == 0xFF) becomes NaN
    return out.astype(np.uint8).view(_E8M0)


def _parse_strings(x: np.ndarray, target: np.dtype) -> np.ndarray:
    flat = [s.decode() if isinstance(s, bytes) else str(s) for s in x.reshape(-1)]
    strs = np.array(flat, dtype=object).reshape(x.shape)
    if target.kind in "iu":
        try:
            return strs.astype(np.int64).astype(target) if target != np.dtype(np.uint64) else strs.astype(np.uint64)
        except (ValueError, OverflowError):
            pass
    if target == np.dtype(bool):
        try:
            return strs.astype(np.float64).astype(bool)
        except ValueError:
            return np.array([s.strip().lower() in ("true", "1") for s in flat], dtype=bool).reshape(x.shape)
    return strs.astype(np.float64)


def _to_strings(x: np.ndarray) -> np.ndarray:
    if _is_exotic(x.dtype):
        x = x.astype(np.int64 if "int" in x.dtype.name else np.float32)
    return x.astype(str).astype(object)


def cast_array(x: np.ndarray, target: np.dtype, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """Convert ``x`` to ``target`` following the ONNX Cast rules."""
    x = np.asarray(x)
    if x.dtype == target:
        return x.copy()
    if target == _OBJ:
        return _to_strings(x)
    if x.dtype == _OBJ or x.dtype.kind in "SU":
        x = _parse_strings(x.astype(object), target)
        if x.dtype == target:
            return x
    if target in _F8:
        if saturate:
            wide = x.astype(np.float64) if x.dtype.kind not in "f" or x.dtype != np.float64 else x
            info = ml_dtypes.finfo(target)
            with np.errstate(invalid="ignore"):
                wide = np.clip(wide, float(info.min), float(info.max))
            return wide.astype(target)
        if x.dtype.kind in "iub":
            x = x.astype(np.float64)
        return x.astype(target)
    if target == _E8M0:
        return _to_e8m0(x, saturate, round_mode)
    if x.dtype == _E8M0 and target != np.dtype(np.float32):
        x = x.astype(np.float32)
    with np.errstate(all="ignore"):
        try:
            return x.astype(target)
        except (TypeError, ValueError):
            # some exotic pairs have no direct ufunc cast: go through float32 / int64
            mid = np.float32 if "float" in target.name or "float" in x.dtype.name else np.int64
            return x.astype(mid).astype(target)


def _round_mode(node: NodeSpec) -> str:
    rm = node.attr("round_mode", "up")
    return rm.decode() if isinstance(rm, bytes) else str(rm)


@KERNELS.register("Cast", schema_versions("Cast"))
def cast(node: NodeSpec):
    to = node.attr("to")
    if isinstance(to, (bytes, str)):  # opset 1 used a type name string
        name = to.decode() if isinstance(to, bytes) else to
        from onnx import TensorProto

        to = getattr(TensorProto, name.upper())
    target = _onnx_dtype(int(to))
    saturate = flag(node, "saturate", 1)
    round_mode = _round_mode(node)

    if target not in _PLAIN:
        def run(x: np.ndarray) -> np.ndarray:
            return cast_array(x, target, saturate, round_mode)

        return run

    def run_plain(x: np.ndarray) -> np.ndarray:
        # bool/integer to bool/integer/float32/float64 (shape arithmetic, masks): a plain astype
        # cannot warn or fail there, so cast_array's checks and errstate are skipped
        if type(x) is np.ndarray and x.dtype in _PLAIN_SOURCE:
            return x.astype(target)
        return cast_array(x, target, saturate, round_mode)

    return run_plain


@KERNELS.register("CastLike", schema_versions("CastLike"))
def cast_like(node: NodeSpec):
    saturate = flag(node, "saturate", 1)
    round_mode = _round_mode(node)

    def run(x: np.ndarray, like: np.ndarray) -> np.ndarray:
        return cast_array(x, np.asarray(like).dtype, saturate, round_mode)

    return run


_SUB_BYTE = {"int4": 4, "uint4": 4, "float4_e2m1fn": 4, "int2": 2, "uint2": 2, "float6_e2m3fn": 6, "float6_e3m2fn": 6}


def _bit_width(dt: np.dtype) -> int:
    """Bits of one element (sub-byte ml_dtypes types live in the low bits of a byte)."""
    return _SUB_BYTE.get(dt.name, dt.itemsize * 8)


@KERNELS.register("BitCast", schema_versions("BitCast"))
def bitcast(node: NodeSpec):
    target = _onnx_dtype(int(node.attr("to")))
    if target == _OBJ:
        raise Unsupported("BitCast to string")

    def run(x: np.ndarray) -> Any:
        x = np.asarray(x)
        if x.dtype == _OBJ:
            raise TypeError("BitCast of a string tensor")
        if _bit_width(x.dtype) != _bit_width(target):
            raise TypeError(f"BitCast {x.dtype} -> {target}: bit widths differ")
        return contig(x).view(target).copy()

    return run
