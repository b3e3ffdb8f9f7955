"""Cast, CastLike and BitCast on the cpu provider, checked against onnx.reference / ml_dtypes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import epoxy


def _elem(dtype) -> int:  # type: ignore[no-untyped-def]
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _build(op, inputs, n_out=1, opset=21, **attrs):  # type: ignore[no-untyped-def]
    """One-node model; ``inputs`` is a list of (name, array or None for an omitted input)."""
    names = [n if v is not None else "" for n, v in inputs]
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], **attrs)
    graph_inputs = [helper.make_tensor_value_info(n, _elem(v.dtype), v.shape) for n, v in inputs if v is not None]
    outs = [helper.make_value_info(f"y{i}", onnx.TypeProto()) for i in range(n_out)]
    graph = helper.make_graph([node], "g", graph_inputs, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _as_f64(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) if a.dtype.type.__module__.startswith("ml_dtypes") else a


def run_both(op, inputs, n_out=1, opset=21, expected=None, **attrs):  # type: ignore[no-untyped-def]
    """(epoxy outputs, reference outputs) of a one-node model (reference: onnx.reference)."""
    model = _build(op, inputs, n_out, opset, **attrs)
    feeds = {n: v for n, v in inputs if v is not None}
    with np.errstate(all="ignore"):
        ref = expected if expected is not None else ReferenceEvaluator(model).run(None, feeds)
    ref = [np.asarray(r) for r in ref]
    for out, v in zip(model.graph.output, ref):
        out.type.CopyFrom(helper.make_tensor_type_proto(_elem(v.dtype), [f"d{k}" for k in range(v.ndim)]))
    sess = epoxy.InferenceSession(model, providers=["cpu"])
    with np.errstate(all="ignore"):
        got = sess.run(None, feeds)
    return got, ref


def check(op, inputs, n_out=1, opset=21, expected=None, **attrs):  # type: ignore[no-untyped-def]
    got, ref = run_both(op, inputs, n_out, opset, expected, **attrs)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert isinstance(g, np.ndarray), type(g)
        assert g.dtype == r.dtype, (g.dtype, r.dtype)
        assert g.shape == r.shape, (g.shape, r.shape)
        if r.dtype == object:
            assert g.tolist() == r.tolist()
        else:
            np.testing.assert_array_equal(_as_f64(g), _as_f64(r))
    return got

import ml_dtypes  # noqa: E402

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
    with pytest.raises(Exception):
        run_both("BitCast", [("x", x)], opset=26, expected=[np.zeros(4, np.int8)], to=T.INT8)
