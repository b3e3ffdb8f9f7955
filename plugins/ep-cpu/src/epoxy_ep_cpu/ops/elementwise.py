"""Elementwise arithmetic and math: binary arithmetic, unary math, variadic ops, Clip, IsInf/IsNaN.

Broadcasting follows ONNX (numpy-style from opset 7; the opset 1/6 ``broadcast``/``axis``
attributes are honoured). Output dtypes are the input dtype; float16 and bfloat16 math is
computed in float32 and cast back where rounding matters.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce

import numpy as np

from epoxy.contract import NodeSpec

from ..registry import KERNELS
from ._elementwise_util import (
    arr,
    binary_with_legacy,
    compute_dtype,
    erf,
    float_unary,
    is_narrow_float,
    with_small_jit,
)
from ._flags import flag
from ._out import binary_ufunc_kernel

_ARITH_VERSIONS = (1, 6, 7, 13, 14)


#: ufuncs whose integer array loops wrap without a floating-point error to silence
_QUIET_ON_INT_ARRAYS = (np.add, np.subtract, np.multiply)
#: float dtypes whose array ops run without their own errstate (the run's one applies)
_QUIET_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _same_dtype(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Binary op whose output has the dtype of its first input. Arrays of one dtype skip
    ``np.errstate``, which costs more than the op on tiny tensors: integer add/sub/mul wrap
    without a floating-point error, and float ops run inside the run's one errstate
    (``epoxy.kit.float_errors``)."""
    quiet = fn in _QUIET_ON_INT_ARRAYS

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if (type(a) is np.ndarray and type(b) is np.ndarray and a.dtype is b.dtype
                and (a.dtype in _QUIET_FLOATS or quiet and a.dtype.kind in "iu")):
            out = fn(a, b)
            return out if type(out) is np.ndarray else np.asarray(out)
        with np.errstate(all="ignore"):
            out = arr(fn(a, b))
        return out if out.dtype == a.dtype else out.astype(a.dtype)

    return run


# ---------------------------------------------------------------------- Add Sub Mul Div


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero (as C), division by zero gives 0."""
    q = np.floor_divide(a, b)
    if a.dtype.kind == "i" or b.dtype.kind == "i":
        # floor and trunc differ where the remainder is nonzero and the signs differ
        fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        q = q + fix.astype(q.dtype)
    return q


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        return _int_div(a, b)
    return np.true_divide(a, b)


_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _div}


#: float ufuncs with an in-place path into planned buffers (opset >= 7 broadcasting)
_INTO = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.true_divide}


def _arith_factory(op: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]):
    def factory(node: NodeSpec):
        run = binary_with_legacy(node, _same_dtype(fn))
        if node.opset >= 7 and len(node.inputs) == 2:
            return binary_ufunc_kernel(run, _INTO[op])
        return run

    return factory


for _op, _fn in _BINARY.items():
    KERNELS.register(_op, _ARITH_VERSIONS)(_arith_factory(_op, _fn))


# ---------------------------------------------------------------------- Pow


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x ** y with the output dtype of the base, whatever the exponent's dtype."""
    with np.errstate(all="ignore"):
        if a.dtype.kind in "iu":
            if b.dtype.kind in "iu":
                if b.dtype.kind == "i" and b.size and (b < 0).any():
                    # numpy refuses negative integer powers: compute in float64, truncate
                    out = np.power(a.astype(np.float64), b.astype(np.float64))
                    out = np.where(np.isfinite(out), out, 0)
                else:
                    out = np.power(a, b)
            else:
                out = np.power(a.astype(np.float64), b.astype(np.float64))
                out = np.where(np.isfinite(out), out, 0)
            return arr(out).astype(a.dtype)
        if a.dtype.kind == "b":
            raise TypeError("Pow: bool base is not supported")
        cdt = compute_dtype(a.dtype)
        if cdt != a.dtype or is_narrow_float(b.dtype):
            out = np.power(a.astype(np.float32), b.astype(np.float32))
        elif b.dtype.kind in "iu" or b.dtype != a.dtype:
            out = np.power(a, b.astype(np.float64) if b.dtype.kind in "iuf" else b)
        else:
            out = np.power(a, b)
        out = arr(out)
        return out if out.dtype == a.dtype else out.astype(a.dtype)


@KERNELS.register("Pow", (1, 7, 12, 13, 15))
def pow_(node: NodeSpec):
    return binary_with_legacy(node, _pow)


# ---------------------------------------------------------------------- Mod


@KERNELS.register("Mod", (10, 13, 28))
def mod(node: NodeSpec):
    fmod = flag(node, "fmod", 0)
    ufunc = np.fmod if fmod else np.remainder

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            if is_narrow_float(a.dtype):
                out = ufunc(a.astype(np.float32), b.astype(np.float32))
            else:
                out = ufunc(a, b)
        out = arr(out)
        return out if out.dtype == a.dtype else out.astype(a.dtype)

    return run


# ---------------------------------------------------------------------- unary


def _exact_unary(ufunc: np.ufunc) -> Callable[[np.ndarray], np.ndarray]:
    """Unary ufuncs exact in any dtype (Abs, Neg, Sign): run directly."""

    def run(x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            out = arr(ufunc(x))
        return out if out.dtype == x.dtype else out.astype(x.dtype)

    return run


def _unary(kernel: Callable[[np.ndarray], np.ndarray]):
    def factory(node: NodeSpec):
        return kernel

    return factory


def _abs(x: np.ndarray) -> np.ndarray:
    return x.copy() if x.dtype.kind in "ub" else np.abs(x)


def _neg(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "u":
        return (np.zeros((), x.dtype) - x).astype(x.dtype)
    return np.negative(x)


def _sign(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "u":
        return (x != 0).astype(x.dtype)
    if x.dtype.kind == "b":
        return x.copy()
    return np.sign(x)


def _reciprocal(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "iu":
        with np.errstate(all="ignore"):
            return _int_div(np.ones((), x.dtype), x)
    return np.reciprocal(x)


_UNARY: dict[str, tuple[tuple[int, ...], Callable[[np.ndarray], np.ndarray]]] = {
    "Abs": ((1, 6, 13), _exact_unary(_abs)),
    "Neg": ((1, 6, 13), _exact_unary(_neg)),
    "Sign": ((9, 13), _exact_unary(_sign)),
    "Reciprocal": ((1, 6, 13), float_unary(_reciprocal)),
    "Sqrt": ((1, 6, 13), float_unary(np.sqrt)),
    "Exp": ((1, 6, 13), float_unary(np.exp)),
    "Log": ((1, 6, 13), float_unary(np.log)),
    "Ceil": ((1, 6, 13), float_unary(np.ceil)),
    "Floor": ((1, 6, 13), float_unary(np.floor)),
    "Round": ((11, 22), float_unary(np.rint)),  # rint rounds half to even
    "Erf": ((9, 13), float_unary(erf)),
    "Sin": ((7, 22), float_unary(np.sin)),
    "Cos": ((7, 22), float_unary(np.cos)),
    "Tan": ((7, 22), float_unary(np.tan)),
    "Asin": ((7, 22), float_unary(np.arcsin)),
    "Acos": ((7, 22), float_unary(np.arccos)),
    "Atan": ((7, 22), float_unary(np.arctan)),
    "Sinh": ((9, 22), float_unary(np.sinh)),
    "Cosh": ((9, 22), float_unary(np.cosh)),
    "Asinh": ((9, 22), float_unary(np.arcsinh)),
    "Acosh": ((9, 22), float_unary(np.arccosh)),
    "Atanh": ((9, 22), float_unary(np.arctanh)),
}

for _op, (_versions, _kernel) in _UNARY.items():
    KERNELS.register(_op, _versions)(_unary(_kernel) if _op != "Erf" else with_small_jit("erf", _kernel))


# ---------------------------------------------------------------------- variadic


def _variadic(op: str):
    def factory(node: NodeSpec):
        def run(*args: np.ndarray) -> np.ndarray:
            xs = [np.asarray(a) for a in args if a is not None]
            if not xs:
                raise ValueError(f"{op}: needs at least one input")
            dtype = xs[0].dtype
            with np.errstate(all="ignore"):
                if op in ("Max", "Min"):
                    ufunc = np.maximum if op == "Max" else np.minimum
                    if len(xs) == 1:
                        return xs[0].copy()
                    out = reduce(ufunc, xs)
                else:
                    cdt = compute_dtype(dtype)
                    if len(xs) == 1:
                        out = xs[0].copy()
                    else:
                        out = reduce(np.add, [x.astype(cdt, copy=False) for x in xs])
                    if op == "Mean":
                        if dtype.kind in "iu":
                            out = _int_div(out, np.asarray(len(xs), out.dtype))
                        else:
                            out = out / out.dtype.type(len(xs))
            out = arr(out)
            return out if out.dtype == dtype else out.astype(dtype)

        return run

    return factory


KERNELS.register("Max", (1, 6, 8, 12, 13))(_variadic("Max"))
KERNELS.register("Min", (1, 6, 8, 12, 13))(_variadic("Min"))
KERNELS.register("Sum", (1, 6, 8, 13))(_variadic("Sum"))
KERNELS.register("Mean", (1, 6, 8, 13))(_variadic("Mean"))


# ---------------------------------------------------------------------- Clip


def _clip(x: np.ndarray, lo: object, hi: object) -> np.ndarray:
    out = x
    with np.errstate(all="ignore"):
        if lo is not None:
            out = np.maximum(out, lo)
        if hi is not None:
            out = np.minimum(out, hi)
    out = arr(out)
    if out is x:
        out = x.copy()
    return out if out.dtype == x.dtype else out.astype(x.dtype)


def _bound(value: object, dtype: np.dtype) -> object:
    """A min/max bound as a 0-d array of the input dtype, or None when absent."""
    if value is None:
        return None
    v = np.asarray(value)
    if v.size == 0:
        return None
    if v.size != 1:
        raise ValueError(f"Clip: min/max must be scalars, got shape {v.shape}")
    with np.errstate(all="ignore"):  # float32 limits overflow to +-inf in float16: no bound
        return v.reshape(()).astype(dtype)


@KERNELS.register("Clip", (1, 6))
def clip_attr(node: NodeSpec):
    # the attributes default to numeric_limits<float>::lowest()/max() (so +-inf clip to them)
    flt_max = float(np.finfo(np.float32).max)
    lo_attr = float(node.attr("min", -flt_max))
    hi_attr = float(node.attr("max", flt_max))

    def run(x: np.ndarray) -> np.ndarray:
        return _clip(x, _bound(lo_attr, x.dtype), _bound(hi_attr, x.dtype))

    return run


@KERNELS.register("Clip", (11, 12, 13))
def clip(node: NodeSpec):
    def run(x: np.ndarray, lo: np.ndarray | None = None, hi: np.ndarray | None = None) -> np.ndarray:
        return _clip(x, _bound(lo, x.dtype), _bound(hi, x.dtype))

    return run


# ---------------------------------------------------------------------- IsInf IsNaN


def _as_float(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if is_narrow_float(x.dtype) else x


@KERNELS.register("IsInf", (10, 20))
def isinf(node: NodeSpec):
    neg = flag(node, "detect_negative", 1)
    pos = flag(node, "detect_positive", 1)

    def run(x: np.ndarray) -> np.ndarray:
        xf = _as_float(x)
        if xf.dtype.kind in "iub":
            return np.zeros(x.shape, dtype=bool)
        if neg and pos:
            return arr(np.isinf(xf))
        if pos:
            return arr(np.isposinf(xf))
        if neg:
            return arr(np.isneginf(xf))
        return np.zeros(x.shape, dtype=bool)

    return run


@KERNELS.register("IsNaN", (9, 13, 20))
def isnan(node: NodeSpec):
    def run(x: np.ndarray) -> np.ndarray:
        xf = _as_float(x)
        if xf.dtype.kind in "iub":
            return np.zeros(x.shape, dtype=bool)
        return arr(np.isnan(xf))

    return run
