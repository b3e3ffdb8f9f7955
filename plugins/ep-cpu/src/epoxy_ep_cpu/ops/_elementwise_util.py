"""Helpers shared by the elementwise, logical and activation families.

- :func:`legacy_align` implements the opset 1/6 ``broadcast``/``axis`` attributes of binary ops.
- :func:`float_unary` wraps a float function so that float16 and the ml_dtypes floats
  (bfloat16...) are computed in float32 and cast back.
- :func:`erf` is a vectorized error function (numpy has none): float64 accurate to about
  1e-15, float32 (and narrower floats) by a fast path within one float32 ulp.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec

from .. import jit

#: Float dtypes numpy computes natively and accurately (wider ones are kept as they are).
_NATIVE_WIDE = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.longdouble))


def arr(value: Any) -> np.ndarray:
    """Numpy scalars (from ufuncs on 0-d arrays) become 0-d arrays."""
    return value if isinstance(value, np.ndarray) else np.asarray(value)


def is_narrow_float(dtype: np.dtype) -> bool:
    """float16 and the ml_dtypes floats (bfloat16, float8...): compute these in float32."""
    return _is_narrow_float(np.dtype(dtype))


@cache
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

    The result is cast back to the input dtype; numpy scalars are wrapped as arrays. No
    ``np.errstate`` here: steps run under the run's one (``epoxy.kit.float_errors``).
    """

    def run(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        dtype = x.dtype
        if is_narrow_float(dtype):
            return arr(np.asarray(fn(x.astype(np.float32))).astype(dtype))
        out = arr(fn(x))
        return out if out.dtype == dtype else out.astype(dtype)

    return run


def with_small_jit(name: str, kernel: Callable[[np.ndarray], np.ndarray]) -> Callable[[NodeSpec], Any]:
    """A kernel factory: ``kernel``, with the jit tier's compiled loop ``name`` (see
    ``jit/kernels_special.py``) taking the small float32/float64 arrays when the provider
    building the kernel runs that tier."""

    def factory(node: NodeSpec) -> Callable[[np.ndarray], np.ndarray]:
        compiled = jit.kernels("special")
        if compiled is None:
            return kernel
        small = compiled.small(name)

        def run(x: np.ndarray) -> np.ndarray:
            y = small(x)
            return y if y is not None else kernel(x)

        return run

    return factory


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


#: erf(x) = tanh(x * G(x*x)) on |x| <= _F32_CLAMP, G(s) = 2/sqrt(pi) + s * H(s) with H a degree-9
#: polynomial fitted (weighted minimax, this project's own fit) to (atanh(erf(x)) / x - G(0)) / s.
#: Beyond the clamp float32 erf is 1.
_F32_CLAMP = 4.0
_G0 = 2.0 / math.sqrt(math.pi)
_F32_H = tuple(
    np.float32(c)
    for c in (
        0.10277224431200922, -0.00020685101889658208, -0.0005950787058025239, 6.918093006804859e-05,
        1.374429248131684e-06, -1.2983371555188434e-06, 1.571828203320906e-07, -8.52682126131463e-09,
        1.800364043666974e-10,
    )
)
#: elements per block of the float32 path: its temporaries stay in the L2 cache
_F32_BLOCK = 1 << 16


def _erf_f32_block(x: np.ndarray, out: np.ndarray, p: np.ndarray, s: np.ndarray, p64: np.ndarray) -> None:
    np.clip(x, -_F32_CLAMP, _F32_CLAMP, out=p)  # NaN stays NaN, +-inf become +-clamp
    np.multiply(p, p, out=s)
    h = _F32_H
    np.multiply(s, h[-1], out=out)
    for c in h[-2:0:-1]:
        out += c
        out *= s
    out += h[0]
    out *= s
    out *= p  # x * s * H(s): at most ~half of x * G(s) where erf is not yet ~1; float32 will do
    # the leading term, the sum and tanh in float64: in float32 they would add ~2 ulp
    np.multiply(p, _G0, out=p64, dtype=np.float64)
    np.add(p64, out, out=p64)
    np.tanh(p64, out=p64)
    np.copyto(out, p64, casting="same_kind")


def erf_f32(x: np.ndarray) -> np.ndarray:
    """Error function of a float32 array as float32, max abs error below 1e-7 (at most one
    float32 ulp from the correctly rounded value; ~1 ns per element)."""
    x = np.asarray(x, dtype=np.float32)
    if not x.flags.c_contiguous:
        x = x.copy(order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
    out = np.empty(x.shape, dtype=np.float32)
    n = x.size
    if n == 0:
        return out
    flat_x, flat_out = x.reshape(-1), out.reshape(-1)
    b = min(n, _F32_BLOCK)
    p, s, p64 = np.empty(b, np.float32), np.empty(b, np.float32), np.empty(b, np.float64)
    with np.errstate(all="ignore"):
        for i in range(0, n, b):
            j = min(n, i + b)
            m = j - i
            _erf_f32_block(flat_x[i:j], flat_out[i:j], p[:m], s[:m], p64[:m])
    return out


def erf(x: np.ndarray) -> np.ndarray:
    """Error function of a float array.

    float64 (and wider) input: computed in float64 by series / continued fraction, relative
    error about 1e-15, returned as float64. float32 and narrower floats: :func:`erf_f32`,
    returned as float32.
    """
    x = np.asarray(x)
    if x.ndim == 0:  # numpy's arithmetic on 0-d arrays returns scalars, which ``out=`` refuses
        return erf(x.reshape(1)).reshape(())
    if x.dtype.kind == "f" and x.dtype.itemsize <= 4 or is_narrow_float(x.dtype):
        return erf_f32(x)
    tol = 1e-17
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
