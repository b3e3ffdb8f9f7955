"""Comparison, logic, bitwise and Where kernels of the cpu provider."""

from __future__ import annotations

import numpy as np
import pytest
from _elementwise_oracle import BF16, RNG, _elem, check, make_model, reference, run  # noqa: E402,F401

# ---------------------------------------------------------------------- comparisons


@pytest.mark.parametrize("op", ["Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64, np.uint8, np.float64])
def test_compare(op, dtype):
    a = np.array([[1, 2, 3], [3, 2, 1]], dtype)
    b = np.array([2, 2, 2], dtype)
    got = check(op, [a, b], opset=16, out_dtype=np.bool_)
    assert got.dtype == np.bool_


def test_compare_nan_and_bf16():
    a = np.array([np.nan, 1.0, 2.0], np.float32)
    b = np.array([np.nan, 1.0, 3.0], np.float32)
    np.testing.assert_array_equal(run("Equal", [a, b], opset=13, out_dtype=np.bool_), [False, True, False])
    np.testing.assert_array_equal(run("Less", [a.astype(BF16), b.astype(BF16)], opset=13, out_dtype=np.bool_),
                                  [False, False, True])


def test_equal_strings():
    a = np.array(["a", "bc", ""], dtype=object)
    b = np.array(["a", "b", ""], dtype=object)
    got = run("Equal", [a, b], opset=19, out_dtype=np.bool_)
    np.testing.assert_array_equal(got, [True, False, True])
    got = run("Equal", [a, np.array(["bc"], dtype=object)], opset=19, out_dtype=np.bool_)
    np.testing.assert_array_equal(got, [False, True, False])


def test_compare_legacy_broadcast():
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    b = np.array([1, 13, 20], np.int32)
    got = run("Greater", [a, b], {"broadcast": 1, "axis": 1}, opset=1, out_dtype=np.bool_)
    np.testing.assert_array_equal(got, a > b[None, :, None])


# ---------------------------------------------------------------------- boolean logic


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(op):
    a = RNG.random((2, 3, 4)) > 0.5
    b = RNG.random((3, 1)) > 0.5
    check(op, [a, b], opset=7)


def test_logic_legacy_and_not():
    a = RNG.random((2, 3, 4)) > 0.5
    b = RNG.random((3,)) > 0.5
    np.testing.assert_array_equal(run("And", [a, b], {"broadcast": 1, "axis": 1}, opset=1), a & b[None, :, None])
    check("Not", [a], opset=1)
    e = np.zeros((0, 2), bool)
    assert run("Not", [e]).shape == (0, 2)


# ---------------------------------------------------------------------- bitwise


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint16, np.uint64])
def test_bitwise(op, dtype):
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, (3, 4), dtype=dtype, endpoint=True)
    b = RNG.integers(info.min, info.max, (4,), dtype=dtype, endpoint=True)
    check(op, [a, b], opset=18)


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint8, np.uint32])
def test_bitwise_not(dtype):
    info = np.iinfo(dtype)
    check("BitwiseNot", [RNG.integers(info.min, info.max, (5,), dtype=dtype, endpoint=True)], opset=18)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_bitshift_unsigned(direction, dtype):
    x = np.array([16, 4, 1, 255], dtype)
    y = np.array([1, 2, 3, 0], dtype)
    check("BitShift", [x, y], {"direction": direction}, opset=11)
    check("BitShift", [x, np.array([2], dtype)], {"direction": direction}, opset=11)


def test_bitshift_signed_and_out_of_range():
    x = np.array([-16, 16, -1, 5, -5, 3], np.int8)
    y = np.array([2, 2, 9, -1, 8, 7], np.int8)
    right = run("BitShift", [x, y], {"direction": "RIGHT"}, opset=28)
    np.testing.assert_array_equal(right, np.array([-4, 4, -1, 0, -1, 0], np.int8))
    left = run("BitShift", [x, y], {"direction": "LEFT"}, opset=28)
    np.testing.assert_array_equal(left, np.array([-64, 64, 0, 0, 0, -128], np.int8))
    u = np.array([1, 1], np.uint32)
    np.testing.assert_array_equal(run("BitShift", [u, np.array([31, 32], np.uint32)], {"direction": "LEFT"}, opset=11),
                                  np.array([2**31, 0], np.uint32))


# ---------------------------------------------------------------------- Where


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, np.bool_, np.float16])
def test_where(dtype):
    c = RNG.random((2, 1, 4)) > 0.5
    x = RNG.integers(0, 9, (3, 4)).astype(dtype)
    y = RNG.integers(0, 9, (2, 3, 1)).astype(dtype)
    got = check("Where", [c, x, y], opset=16, out_dtype=dtype)
    assert got.shape == (2, 3, 4)


def test_where_strings_and_bf16():
    c = np.array([True, False, True])
    x = np.array(["a", "b", "c"], dtype=object)
    y = np.array(["z"], dtype=object)
    got = run("Where", [c, x, y], opset=16)
    assert list(got) == ["a", "z", "c"]
    xb = np.array([1, 2, 3], np.float32).astype(BF16)
    yb = np.array([-1, -2, -3], np.float32).astype(BF16)
    got = run("Where", [c, xb, yb], opset=16)
    assert got.dtype == BF16
    np.testing.assert_array_equal(got.astype(np.float32), [1, -2, 3])
    assert run("Where", [np.array(True), np.array(1.0, np.float32), np.array(2.0, np.float32)], opset=9).shape == ()
