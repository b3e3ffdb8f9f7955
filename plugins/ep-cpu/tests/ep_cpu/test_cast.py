"""Cast, CastLike and BitCast on the cpu provider, checked against onnx.reference / ml_dtypes."""

from __future__ import annotations

import ml_dtypes  # noqa: E402
import numpy as np
import pytest
from _shape_oracle import _as_f64, _build, _elem, check, run_both  # noqa: E402,F401
from onnx import TensorProto

T = TensorProto
VALUES = np.array([0.47892547, 0.48033667, -0.49968487, 1e6, 1e-7, -1e-7, np.nan, np.inf, -np.inf, -0.0, 0.0, 2.5,
                   3.5, -2.5, 448.0, 57344.0, 465.0, 240.0], dtype=np.float32)


@pytest.mark.parametrize(
    "to",
    [T.FLOAT16, T.DOUBLE, T.BFLOAT16, T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2, T.FLOAT8E5M2FNUZ,
     T.FLOAT4E2M1, T.BOOL],
)
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_float_to_floats(to, saturate) -> None:  # type: ignore[no-untyped-def]
    check("Cast", [("x", VALUES)], opset=23, to=to, saturate=saturate)
    with np.errstate(over="ignore"):
        half = VALUES.astype(np.float16)
    check("Cast", [("x", half)], opset=23, to=to, saturate=saturate)


def test_cast_float8_saturation_by_hand() -> None:
    x = np.array([1e6, -1e6, np.inf, -np.inf, np.nan, 0.3], np.float32)
    got, _ = run_both("Cast", [("x", x)], opset=21, expected=[x.astype(ml_dtypes.float8_e4m3fn)],
                      to=T.FLOAT8E4M3FN)
    np.testing.assert_array_equal(got[0].astype(np.float32)[:4], [448, -448, 448, -448])
    assert np.isnan(got[0].astype(np.float32)[4])
    got, _ = run_both("Cast", [("x", x)], opset=21, expected=[x.astype(ml_dtypes.float8_e5m2)],
                      to=T.FLOAT8E5M2, saturate=0)
    np.testing.assert_array_equal(got[0].astype(np.float32)[:4], [np.inf, -np.inf, np.inf, -np.inf])


@pytest.mark.parametrize("src", [np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                                 ml_dtypes.float8_e5m2fnuz])
@pytest.mark.parametrize("to", [T.FLOAT, T.FLOAT16, T.DOUBLE, T.INT32, T.INT8, T.UINT8, T.BOOL])
def test_cast_from_exotic(src, to) -> None:  # type: ignore[no-untyped-def]
    x = np.array([0.5, -2.0, 3.0, 0.0, 7.0, 100.0], np.float32).astype(src)
    check("Cast", [("x", x)], opset=23, to=to)


@pytest.mark.parametrize("to", [T.INT4, T.UINT4, T.INT8, T.UINT8, T.INT16, T.INT32, T.INT64, T.UINT64])
def test_cast_float_to_ints(to) -> None:  # type: ignore[no-untyped-def]
    x = np.arange(-9, 16).astype(np.float32)
    check("Cast", [("x", x)], opset=23, to=to)


def test_cast_int_wraparound_and_bool() -> None:
    x = np.array([200, -200, 300, 0, 1, -1], np.int32)
    check("Cast", [("x", x)], to=T.INT8)
    check("Cast", [("x", x)], to=T.UINT8)
    check("Cast", [("x", x)], to=T.BOOL)
    check("Cast", [("x", np.array([True, False]))], to=T.FLOAT)
    check("Cast", [("x", np.array([True, False]))], to=T.INT64)


def test_cast_int4_to_others() -> None:
    x = np.arange(-8, 8).astype(ml_dtypes.int4)
    check("Cast", [("x", x)], opset=21, to=T.FLOAT)
    check("Cast", [("x", x)], opset=21, to=T.INT8)
    u = np.arange(0, 16).astype(ml_dtypes.uint4)
    check("Cast", [("x", u)], opset=21, to=T.FLOAT16)
    check("Cast", [("x", u)], opset=21, to=T.UINT8)


def test_cast_strings() -> None:
    s = np.array(["3.5", "-1e-5", "1E8", "INF", "-inf", "NaN", "+INF", "0"], dtype=object)
    got, _ = run_both("Cast", [("x", s)], to=T.FLOAT, expected=[np.array(
        [3.5, -1e-5, 1e8, np.inf, -np.inf, np.nan, np.inf, 0], np.float32)])
    np.testing.assert_array_equal(got[0], np.array([3.5, -1e-5, 1e8, np.inf, -np.inf, np.nan, np.inf, 0], np.float32))
    ints = np.array(["12", "-7", "1000"], dtype=object)
    got, _ = run_both("Cast", [("x", ints)], to=T.INT64, expected=[np.array([12, -7, 1000])])
    np.testing.assert_array_equal(got[0], [12, -7, 1000])
    got, _ = run_both("Cast", [("x", np.array([1.5, -2.0], np.float32))], to=T.STRING,
                      expected=[np.array(["1.5", "-2.0"], dtype=object)])
    assert got[0].dtype == object
    assert [float(v) for v in got[0]] == [1.5, -2.0]
    got, _ = run_both("Cast", [("x", np.array([3, -4], np.int32))], to=T.STRING,
                      expected=[np.array(["3", "-4"], dtype=object)])
    assert got[0].tolist() == ["3", "-4"]


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_e8m0(mode, saturate) -> None:  # type: ignore[no-untyped-def]
    x = np.array([0.0, 0.124, 0.25, 0.5, 1.1, 1.5, 1.75, 2.0, 4.0, 8.0, 3e38, np.nan], np.float32)
    if saturate or mode != "nearest":
        xs = x if saturate else x[:-2]  # non-saturating overflow behaviour differs between versions
        check("Cast", [("x", xs)], opset=24, to=T.FLOAT8E8M0, saturate=saturate, round_mode=mode)
    back = np.array([1.0, 0.5, 64.0], np.float32).astype(ml_dtypes.float8_e8m0fnu)
    check("Cast", [("x", back)], opset=24, to=T.FLOAT)


def test_castlike() -> None:
    x = np.array([1.5, -3.25, 1e6, np.nan], np.float32)
    check("CastLike", [("x", x), ("t", np.zeros(1, np.float16))], opset=21)
    check("CastLike", [("x", x), ("t", np.zeros(1, ml_dtypes.float8_e4m3fn))], opset=21)
    check("CastLike", [("x", x), ("t", np.zeros(1, ml_dtypes.float8_e4m3fn))], opset=21, saturate=0)
    check("CastLike", [("x", x[:2]), ("t", np.zeros(1, np.int32))], opset=15)


@pytest.mark.parametrize(
    "x,to",
    [
        (np.array([1.0, -2.0, np.inf], np.float32), T.INT32),
        (np.array([[1, -1]], np.int64), T.DOUBLE),
        (np.array(1.0, np.float32), T.UINT32),
        (np.array([True, False]), T.UINT8),
        (np.array([-1, 5], np.int8), T.UINT8),
        (np.array([1.0, 2.0], np.float16), T.BFLOAT16),
        (np.zeros((0, 2), np.uint16), T.INT16),
    ],
)
def test_bitcast(x, to) -> None:  # type: ignore[no-untyped-def]
    from onnx.helper import tensor_dtype_to_np_dtype

    expected = x.view(tensor_dtype_to_np_dtype(to))
    check("BitCast", [("x", x)], opset=26, expected=[expected], to=to)


def test_bitcast_sub_byte_and_width_mismatch() -> None:
    x = np.array([-1, 7, -8, 0], ml_dtypes.int4)
    got, _ = run_both("BitCast", [("x", x)], opset=26, expected=[np.array([15, 7, 8, 0], ml_dtypes.uint4)],
                      to=T.UINT4)
    assert got[0].dtype == ml_dtypes.uint4
    assert got[0].astype(np.int32).tolist() == [15, 7, 8, 0]
    with pytest.raises(Exception):  # noqa: B017 - each runtime refuses with its own exception type
        run_both("BitCast", [("x", x)], opset=26, expected=[np.zeros(4, np.int8)], to=T.INT8)
