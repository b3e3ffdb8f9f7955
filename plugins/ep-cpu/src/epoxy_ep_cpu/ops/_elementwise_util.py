"""Helpers shared by the elementwise, logical and activation families.

- :func:`legacy_align` implements the opset 1/6 ``broadcast``/``axis`` attributes of binary ops.
- :func:`float_unary` wraps a float function so that float16 and the ml_dtypes floats
  (bfloat16...) are computed in float32 and cast back.
- :func:`erf` is a vectorized error function accurate to about 1e-15 (numpy has none).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec

#: Float dtypes numpy computes natively and accurately (wider ones are kept as they are).
_NATIVE_WIDE = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.longdouble))


def arr(value: Any) -> np.ndarray:
    """Numpy scalars (from ufuncs on 0-d arrays) become 0-d arrays."""
    return value if isinstance(value, np.ndarray) else np.asarray(value)


def is_narrow_float(dtype: np.dtype) -> bool:
    """float16 and the ml_dtypes floats (bfloat16, float8...): compute these in float32."""
    return _is_narrow_float(np.dtype(dtype))


@lru_cache(maxsize=None)
def _is_narrow_float(dtype: np.dtype) -> bool:
    if dtype in _NATIVE_WIDE:
        return False
    if dtype == np.float16:
        return True
    # ml_dtypes floats are numpy "void"-kind user dtypes with a finfo entry
    if dtype.kind == "V":
        try:
            import ml_dtypes

            ml_dtypes.finfo(dtype)
            return True
        except Exception:  # noqa: BLE001 - not an ml_dtypes float
            return False
    return False


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype to compute float math in: float32 for narrow floats, else the dtype."""
    return np.dtype(np.float32) if is_narrow_float(dtype) else dtype


def float_unary(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """Run ``fn`` (float math on an array) with narrow floats widened to float32.

    The result is cast back to the input dtype; numpy scalars are wrapped as arrays.
    """

    def run(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        dtype = x.dtype
        if is_narrow_float(dtype):
            with np.errstate(all="ignore"):
                return arr(np.asarray(fn(x.astype(np.float32))).astype(dtype))
        with np.errstate(all="ignore"):
            out = fn(x)
        out = arr(out)
        return out if out.dtype == dtype else out.astype(dtype)

    return run


def scalar(value: float, dtype: np.dtype) -> Any:
    """A Python float attribute as a numpy scalar of ``dtype`` (no promotion when mixed)."""
    return np.asarray(value).astype(dtype)[()]


# ---------------------------------------------------------------------- legacy broadcast


def legacy_align(node: NodeSpec) -> Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None:
    """For opset < 7 binary ops: a function reshaping B to broadcast against A, or None.

    With ``broadcast=1`` B is a 1-element tensor (the output keeps A's shape) or its shape
    matches A's dims starting at ``axis``; without ``axis`` suffix matching applies, which
    numpy broadcasting already does.
    """
    if not node.attr("broadcast", 0):
        return None
    axis = node.attr("axis", None)

    def align(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if b.ndim == 0 or b.ndim == a.ndim:
            return a, b
        if b.size == 1:
            return a, b.reshape(())
        if axis is None:
            return a, b
        ax = axis + a.ndim if axis < 0 else axis
        tail = a.ndim - ax - b.ndim
        if tail < 0:
            raise ValueError(f"{node.op_type}: cannot broadcast B{b.shape} into A{a.shape} at axis {axis}")
        return a, b.reshape((1,) * ax + b.shape + (1,) * tail)

    return align


def binary_with_legacy(node: NodeSpec, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    """Wrap a binary kernel with the opset 1/6 broadcast/axis handling when needed."""
    align = legacy_align(node) if node.opset < 7 else None
    if align is None:
        return fn

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = align(a, b)
        return fn(a, b)

    return run


# ---------------------------------------------------------------------- erf

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)
_SERIES_LIMIT = 2.0  # |x| below: positive power series; above: erfc continued fraction
_CF_DEPTH = 50
_ONE_BEYOND = 6.5  # erf(6.5) == 1.0 in float64


def _series_terms(u_max: float, tol: float) -> int:
    """Terms of sum_n u^n / (2n+1)!! needed so the tail is below ``tol`` (the sum is >= 1)."""
    term, n = 1.0, 0
    while True:
        n += 1
        term *= u_max / (2 * n + 1)
        ratio = u_max / (2 * n + 3)
        if ratio < 1 and term / (1 - ratio) < tol:
            return n


def _erf_series(a: np.ndarray, tol: float) -> np.ndarray:
    """erf(a) = 2/sqrt(pi) * exp(-a^2) * a * sum_n (2a^2)^n / (2n+1)!!  (all terms positive).

    Evaluated by Horner's rule in u = 2a^2 with as many terms as the largest ``a`` needs.
    """
    u = 2.0 * a * a
    n_terms = _series_terms(float(u.max()), tol) if u.size else 0
    coef = [1.0]
    for n in range(1, n_terms + 1):
        coef.append(coef[-1] / (2 * n + 1))
    p = np.full_like(a, coef[-1])
    for c in reversed(coef[:-1]):
        p *= u
        p += c
    p *= a
    u *= -0.5
    np.exp(u, out=u)
    p *= u
    p *= _TWO_OVER_SQRT_PI
    return p


def _erfc_cf(a: np.ndarray) -> np.ndarray:
    """erfc(a) for a >= 2 by the Laplace continued fraction, evaluated bottom-up."""
    f = a.copy()
    for k in range(_CF_DEPTH, 0, -1):
        f = a + (0.5 * k) / f
    return _INV_SQRT_PI * np.exp(-a * a) / f


def erf(x: np.ndarray) -> np.ndarray:
    """Error function of a float array, computed in float64, returned as float64.

    Relative error about 1e-15 for float64 input; inputs of narrower floats only need (and
    get) about 1e-10, which saves series terms.
    """
    x = np.asarray(x)
    tol = 1e-17 if x.dtype == np.float64 or x.dtype.itemsize > 8 else 1e-10
    x64 = x.astype(np.float64)
    a = np.abs(x64)
    with np.errstate(all="ignore"):
        small = a < _SERIES_LIMIT
        if small.all():
            out = _erf_series(a, tol)
        else:
            out = np.ones_like(a)
            mid = (a >= _SERIES_LIMIT) & (a < _ONE_BEYOND)
            if small.any():
                out[small] = _erf_series(a[small], tol)
            if mid.any():
                out[mid] = 1.0 - _erfc_cf(a[mid])
            out[np.isnan(a)] = np.nan
    return np.copysign(out, x64)
