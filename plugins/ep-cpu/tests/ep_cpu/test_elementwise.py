"""Elementwise arithmetic and math kernels of the cpu provider."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _elementwise_oracle import BF16, RNG, _elem, check, make_model, reference, run  # noqa: E402,F401

# ---------------------------------------------------------------------- binary arithmetic


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8])
def test_binary_broadcast(op, dtype):
    a = (RNG.standard_normal((2, 3, 4)) * 10).astype(dtype)
    b = (RNG.standard_normal((3, 1)) * 10 + 20).astype(dtype)
    if np.dtype(dtype).kind in "iu":
        b[b == 0] = 1
    got = run(op, [a, b])
    assert got.dtype == np.dtype(dtype) and got.shape == (2, 3, 4)
    if np.dtype(dtype).kind in "f":
        check(op, [a, b], rtol=1e-3 if dtype == np.float16 else 1e-6)


def test_int_div_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 0, 5], np.int32)
    b = np.array([2, 2, -2, -2, 3, 5], np.int32)
    np.testing.assert_array_equal(run("Div", [a, b]), np.array([3, -3, -3, 3, 0, 1], np.int32))
    a64 = np.array([2**62 + 1, -(2**62) - 1], np.int64)
    b64 = np.array([3, 3], np.int64)
    np.testing.assert_array_equal(run("Div", [a64, b64]), np.array([(2**62 + 1) // 3, -((2**62 + 1) // 3)], np.int64))


def test_legacy_broadcast_axis():
    a = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = RNG.standard_normal((3, 4)).astype(np.float32)
    got = run("Add", [a, b], {"broadcast": 1, "axis": 1}, opset=6)
    np.testing.assert_allclose(got, a + b[None, :, :, None])
    c = RNG.standard_normal((5,)).astype(np.float32)
    np.testing.assert_allclose(run("Mul", [a, c], {"broadcast": 1}, opset=6), a * c)
    d = RNG.standard_normal((2,)).astype(np.float32)
    np.testing.assert_allclose(run("Sub", [a, d], {"broadcast": 1, "axis": 0}, opset=1), a - d[:, None, None, None])
    v = RNG.standard_normal((5,)).astype(np.float32)
    one = np.array([[2.0]], np.float32)
    got = run("Div", [v, one], {"broadcast": 1}, opset=6)
    assert got.shape == (5,)
    np.testing.assert_allclose(got, v / 2)


def test_zero_dim_and_empty():
    s = np.array(3.0, np.float32)
    got = run("Add", [s, s])
    assert isinstance(got, np.ndarray) and got.shape == () and got == 6
    e = np.zeros((0, 3), np.float32)
    assert run("Mul", [e, np.ones((3,), np.float32)]).shape == (0, 3)
    assert run("Exp", [e]).shape == (0, 3)


def test_bfloat16_arith():
    a = np.array([1.5, -2.25, 3.0], BF16)
    b = np.array([0.5, 4.0, -1.0], BF16)
    got = run("Add", [a, b])
    assert got.dtype == BF16
    np.testing.assert_array_equal(got.astype(np.float32), np.array([2.0, 1.75, 2.0], np.float32))
    ex = run("Exp", [a])
    assert ex.dtype == BF16
    np.testing.assert_allclose(ex.astype(np.float32), np.exp(a.astype(np.float32)), rtol=1e-2)


# ---------------------------------------------------------------------- Pow Mod


@pytest.mark.parametrize(
    "bdt,edt",
    [(np.float32, np.float32), (np.float32, np.int64), (np.float64, np.float32), (np.int64, np.float32),
     (np.int32, np.int64), (np.float16, np.float32)],
)
def test_pow_mixed(bdt, edt):
    a = np.array([[1, 2, 3], [4, 5, 6]], bdt)
    e = np.array([2, 3, 1], edt)
    got = run("Pow", [a, e], opset=15)
    assert got.dtype == np.dtype(bdt)
    np.testing.assert_allclose(got.astype(np.float64), np.power(a.astype(np.float64), e.astype(np.float64)), rtol=1e-3)


def test_pow_negative_int_exponent():
    a = np.array([1, 2, -1, 4], np.int64)
    e = np.array([-1, -1, -3, 2], np.int64)
    np.testing.assert_array_equal(run("Pow", [a, e], opset=15), np.array([1, 0, -1, 16], np.int64))


def test_pow_legacy():
    a = RNG.random((2, 3)).astype(np.float32) + 0.5
    e = np.array([2.0], np.float32)
    np.testing.assert_allclose(run("Pow", [a, e], {"broadcast": 1}, opset=1), a**2, rtol=1e-6)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_mod_int(fmod, dtype):
    a = np.array([-4, 7, 5, 4, -7, 8], dtype)
    b = np.array([2, -3, 8, -2, 3, 5], dtype)
    got = run("Mod", [a, b], {"fmod": fmod}, opset=13)
    want = np.fmod(a, b) if fmod else np.mod(a, b)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.dtype(dtype)
    check("Mod", [a, b], {"fmod": fmod}, opset=13)


def test_mod_float():
    a = np.array([-4.3, 7.2, 5.0, 4.3, -7.2, 8.0], np.float32)
    b = np.array([2.1, -3.4, 8.0, -2.1, 3.4, 5.0], np.float32)
    check("Mod", [a, b], {"fmod": 1}, opset=13)
    np.testing.assert_allclose(run("Mod", [a, b], {"fmod": 0}, opset=28), np.mod(a, b), rtol=1e-6)


# ---------------------------------------------------------------------- unary


@pytest.mark.parametrize(
    "op,lo,hi",
    [("Abs", -5, 5), ("Neg", -5, 5), ("Sign", -5, 5), ("Reciprocal", 0.5, 5), ("Sqrt", 0, 5), ("Exp", -5, 5),
     ("Log", 0.1, 5), ("Ceil", -5, 5), ("Floor", -5, 5), ("Sin", -5, 5), ("Cos", -5, 5), ("Tan", -1, 1),
     ("Asin", -1, 1), ("Acos", -1, 1), ("Atan", -5, 5), ("Sinh", -3, 3), ("Cosh", -3, 3), ("Asinh", -3, 3),
     ("Acosh", 1, 5), ("Atanh", -0.9, 0.9), ("Erf", -4, 4)],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_unary_float(op, lo, hi, dtype):
    x = RNG.uniform(lo, hi, (3, 5)).astype(dtype)
    check(op, [x], rtol=2e-3 if dtype == np.float16 else 1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Abs", "Neg", "Sign"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_unary_int(op, dtype):
    check(op, [np.array([-3, 0, 4, -1], dtype)])


def test_round_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, 2.6, -2.6], np.float32)
    np.testing.assert_array_equal(run("Round", [x], opset=11), np.array([0, 2, 2, 0, -2, 2, 3, -3], np.float32))


def test_erf_accuracy():
    x = np.concatenate([np.linspace(-7, 7, 2001), [0.0, 1e-300, -1e-12, np.inf, -np.inf, np.nan]])
    got = run("Erf", [x])
    want = np.array([math.erf(v) if not math.isnan(v) else np.nan for v in x])
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-300)


def test_nan_propagates():
    x = np.array([np.nan, 1.0], np.float32)
    assert np.isnan(run("Exp", [x])[0])
    assert np.isnan(run("Abs", [x])[0])
    assert np.isnan(run("Add", [x, x])[0])


# ---------------------------------------------------------------------- variadic


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic_broadcast(op):
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    b = RNG.standard_normal((3,)).astype(np.float32)
    c = RNG.standard_normal((2, 1)).astype(np.float32)
    check(op, [a, b, c], opset=13)
    check(op, [a], opset=13)


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_variadic_int(op):
    a = np.array([1, -5, 3], np.int64)
    b = np.array([2, -7, 0], np.int64)
    check(op, [a, b], opset=13)
    check(op, [a.astype(np.uint8), b.astype(np.uint8)], opset=13)


def test_variadic_old_opset():
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    b = RNG.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(run("Sum", [a, b], opset=6), a + b)
    np.testing.assert_allclose(run("Mean", [a, b], opset=1), (a + b) / 2, rtol=1e-6)


# ---------------------------------------------------------------------- Clip


def test_clip_inputs():
    x = RNG.standard_normal((3, 4)).astype(np.float32) * 3
    lo, hi = np.array(-1.0, np.float32), np.array(1.5, np.float32)
    check("Clip", [x, lo, hi], opset=13)
    check("Clip", [x, None, hi], opset=13)
    check("Clip", [x, lo], opset=11)
    check("Clip", [x], opset=11)
    # min > max: everything becomes max
    np.testing.assert_array_equal(run("Clip", [x, np.array(2.0, np.float32), np.array(1.0, np.float32)], opset=13),
                                  np.full_like(x, 1.0))


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8])
def test_clip_int(dtype):
    x = np.array([-100, -3, 0, 5, 100], dtype) if np.dtype(dtype).kind == "i" else np.array([0, 3, 5, 100], dtype)
    check("Clip", [x, np.array(-2 if np.dtype(dtype).kind == "i" else 2, dtype), np.array(6, dtype)], opset=12)


def test_clip_attrs():
    x = RNG.standard_normal((3, 4)).astype(np.float32) * 3
    np.testing.assert_array_equal(run("Clip", [x], {"min": -1.0, "max": 1.0}, opset=6), np.clip(x, -1, 1))
    np.testing.assert_array_equal(run("Clip", [x], {"max": 0.5}, opset=6), np.minimum(x, 0.5))
    np.testing.assert_array_equal(run("Clip", [x], {"min": 0.0}, opset=1), np.maximum(x, 0.0))
    # absent attributes default to the float32 limits
    big = np.array([-np.inf, 1.0, np.inf, np.nan], np.float32)
    got = run("Clip", [big], opset=6)
    fmax = np.finfo(np.float32).max
    np.testing.assert_array_equal(got, np.array([-fmax, 1.0, fmax, np.nan], np.float32))
    got16 = run("Clip", [big.astype(np.float16)], opset=6)
    np.testing.assert_array_equal(got16, big.astype(np.float16))


# ---------------------------------------------------------------------- IsInf IsNaN


@pytest.mark.parametrize("neg,pos", [(1, 1), (0, 1), (1, 0), (0, 0)])
def test_isinf(neg, pos):
    x = np.array([-np.inf, -1.0, 0.0, np.nan, np.inf], np.float32)
    got = run("IsInf", [x], {"detect_negative": neg, "detect_positive": pos}, opset=20, out_dtype=np.bool_)
    want = np.array([bool(neg), False, False, False, bool(pos)])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16])
def test_isnan(dtype):
    x = np.array([np.nan, 1.0, np.inf], np.float32).astype(dtype)
    got = run("IsNaN", [x], opset=20, out_dtype=np.bool_)
    np.testing.assert_array_equal(got, [True, False, False])
