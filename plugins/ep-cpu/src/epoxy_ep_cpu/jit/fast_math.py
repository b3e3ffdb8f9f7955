"""exp and erf for float32 results that LLVM can vectorize, to inline into the jit tier's loops.

Why: without Intel's SVML numba calls libm's scalar ``exp`` per element (~5-8 ns), so the
compiled Sigmoid and Softmax lost to numpy's SIMD passes above ~1k elements and the exporter
models' attention and SiLU tensors paid a scalar loop. Written as plain arithmetic, exp
vectorizes: 2**t = 2**n * 2**r with n = round(t), |r| <= 1/2, 2**r a degree-8 Taylor
polynomial of exp(r ln 2) in float64 (truncation below 3e-10 relative) and 2**n built from
its IEEE-754 bits (:func:`f64_from_bits`, an LLVM bitcast). The float64 result is within
~3e-10 relative of the true value, so rounding it to float32 gives the correctly rounded
float32 in all but rare ties (max 0.503 ulp on a 2-million-point grid over [-120, 120]).
Not for float64 results: those keep libm.

erf: for |x| < 1, x * P(x**2); beyond, erfc(|x|) = exp(-x**2) * Q(1/|x|) (Q smooth and
slowly varying; erfc taken as 0 past |x| = 14). P and Q are
Chebyshev least-squares fits made here at import, from ``math.erf``/``math.erfc`` (degrees 7
and 14 over [1, 14]: within 1e-12 and ~1e-8 relative; a degree of 15 or more is not
unrolled by LLVM, and the loop is then not vectorized: 7x slower). GELU has its own float32
formula (``gelu_f32``).

Loops using these must be compiled with ``error_model="numpy"``: numba's default Python error
model puts a zero-division branch on every ``/``, which stops vectorization (8x slower).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit, types
from numba.core.extending import intrinsic

#: exp(x) = 2 ** (x * LOG2E)
LOG2E = 1.0 / math.log(2.0)
_LN2 = math.log(2.0)
#: 2**r = sum_k (r ln 2)**k / k!, k = 0..8
_C0, _C1, _C2, _C3, _C4, _C5, _C6, _C7, _C8 = (_LN2 ** k / math.factorial(k) for k in range(9))
#: |t| clamp: 2**1000 and 2**-1000 are finite, normal float64 values that round to float32
#: infinity and zero, and n + 1023 stays a valid exponent field
_T_MAX = 1000.0


def reinterpret(result: Any) -> Callable[..., Any]:
    """An intrinsic's codegen: its argument's bits (the low ones of a wider integer) read as
    the numba type ``result`` of the same width (an LLVM bitcast)."""
    from llvmlite import ir as llvm_ir

    width = result.bitwidth

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]  # pragma: no cover
        value = args[0]
        if isinstance(value.type, llvm_ir.IntType) and value.type.width > width:
            value = builder.trunc(value, llvm_ir.IntType(width))
        return builder.bitcast(value, context.get_value_type(result))

    return codegen


@intrinsic
def f64_from_bits(typingctx, bits):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The float64 whose IEEE-754 bits are the int64 ``bits``."""
    if isinstance(bits, types.Integer) and bits.bitwidth == 64:
        return types.float64(bits), reinterpret(types.float64)
    return None


@njit(inline="always", fastmath={"contract"}, error_model="numpy")
def exp2(t):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """2 ** t for a float64 ``t``: NaN stays NaN, t beyond +-1000 is clamped there."""
    t = -_T_MAX if t < -_T_MAX else t  # written so that NaN passes both tests unchanged
    t = _T_MAX if t > _T_MAX else t
    n = np.floor(t + 0.5)
    r = t - n
    p = _C8
    p = p * r + _C7
    p = p * r + _C6
    p = p * r + _C5
    p = p * r + _C4
    p = p * r + _C3
    p = p * r + _C2
    p = p * r + _C1
    p = p * r + _C0
    return p * f64_from_bits((np.int64(n) + 1023) << 52)


@njit(inline="always", fastmath={"contract"}, error_model="numpy")
def exp(x):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """e ** x for a float64 ``x``, to be rounded to float32 (see the module docstring)."""
    return exp2(x * LOG2E)


def _chebyshev_fit(f: Callable[[float], float], lo: float, hi: float, degree: int) -> tuple[float, ...]:
    """Power-basis coefficients (lowest first) in u = (2 s - lo - hi) / (hi - lo) of the
    least-squares Chebyshev fit of ``f`` over ``[lo, hi]`` (400 Chebyshev nodes)."""
    k = np.arange(400)
    u = np.cos(np.pi * (k + 0.5) / 400)
    y = np.array([f(lo + (hi - lo) * (v + 1) / 2) for v in u])
    cheb = np.polynomial.chebyshev.chebfit(u, y, degree)
    return tuple(float(c) for c in np.polynomial.chebyshev.cheb2poly(cheb))


#: erf(x) / x in s = x**2 over [0, 1]
_P = _chebyshev_fit(lambda s: math.erf(math.sqrt(s)) / math.sqrt(s) if s > 0 else 2 / math.sqrt(math.pi), 0.0, 1.0, 7)
#: erfc(a) * exp(a**2) in t = 1/a over [1/14, 1]: erfc(14) ~ 1e-87, far below any float32
#: GELU result (0.5 x erfc(|x| / sqrt 2) underflows float32 from |x| ~ 14 on)
_A_MAX = 14.0
_Q_LO = 1.0 / _A_MAX
_Q = _chebyshev_fit(lambda t: math.erfc(1 / t) * math.exp(1 / t**2), _Q_LO, 1.0, 14)
_Q_SCALE, _Q_SHIFT = 2.0 / (1.0 - _Q_LO), (_Q_LO + 1.0) / (1.0 - _Q_LO)


@njit(inline="always", fastmath={"contract"}, error_model="numpy")
def _horner(coeffs, u):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    acc = 0.0
    for i in range(len(coeffs) - 1, -1, -1):
        acc = acc * u + coeffs[i]
    return acc


@njit(inline="always", fastmath={"contract"}, error_model="numpy")
def erfc_large(a):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """erfc(a) for a float64 ``a`` >= 1: 0 beyond 14 (+inf included), NaN stays NaN."""
    c = _A_MAX if a > _A_MAX else a
    u = _Q_SCALE / c - _Q_SHIFT
    r = exp(-(c * c)) * _horner(_Q, u)
    return 0.0 if a > _A_MAX else r


@njit(inline="always", fastmath={"contract"}, error_model="numpy")
def erf_small(x):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """erf(x) for a float64 |x| < 1."""
    return x * _horner(_P, 2.0 * x * x - 1.0)


@njit(inline="always", fastmath={"contract"}, error_model="numpy")
def erf(x):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """erf(x) for a float64 ``x``, to be rounded to float32. Both branches are computed and
    one selected, so the loop stays branch-free (vectorized)."""
    a = abs(x)
    big = 1.0 - erfc_large(a if a > 1.0 else 1.0)
    small = erf_small(x)
    return small if a < 1.0 else (big if x > 0.0 else (-big if x < 0.0 else x))
