"""Reductions, ArgMax/ArgMin and Det on the cpu provider, checked against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

REDUCE_OPS = [
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
]


from _reduction_oracle import _check, _elem, _model, _reference, _run  # noqa: E402,F401

RNG = np.random.default_rng(0)
X = RNG.uniform(0.5, 2.0, size=(2, 3, 4)).astype(np.float32)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", [None, [1], [0, -1]])
def test_reduce_axes_input(op: str, keepdims: int, axes) -> None:  # type: ignore[no-untyped-def]
    ax = None if axes is None else np.array(axes, dtype=np.int64)
    _check(op, 18, [("x", X), ("axes", ax)], keepdims=keepdims)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("opset", [1, 11, 13])
def test_reduce_axes_attribute(op: str, opset: int) -> None:
    if op == "ReduceSum" and opset == 13:
        pytest.skip("ReduceSum-13 takes axes as an input")
    axes = [1] if opset == 1 else [-2]
    _check(op, opset, [("x", X)], axes=axes, keepdims=0)
    _check(op, opset, [("x", X)])  # all axes, keepdims default 1


def test_reduce_sum_13_axes_input_and_noop() -> None:
    got = _check("ReduceSum", 13, [("x", X), ("axes", np.array([], dtype=np.int64))], noop_with_empty_axes=1)
    np.testing.assert_array_equal(got[0], X)
    got = _check("ReduceSum", 13, [("x", X), ("axes", np.array([], dtype=np.int64))])
    assert got[0].shape == (1, 1, 1)


@pytest.mark.parametrize("op", ["ReduceSumSquare", "ReduceLogSum", "ReduceL1"])
def test_noop_keeps_elementwise_step(op: str) -> None:
    got = _run(_model(op, 18, [("x", X)], noop_with_empty_axes=1), [("x", X)])[0]
    expected = {"ReduceSumSquare": X * X, "ReduceLogSum": np.log(X), "ReduceL1": np.abs(X)}[op]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize(
    ("op", "identity"),
    [
        ("ReduceSum", 0.0),
        ("ReduceProd", 1.0),
        ("ReduceMax", -np.inf),
        ("ReduceMin", np.inf),
        ("ReduceL1", 0.0),
        ("ReduceL2", 0.0),
        ("ReduceSumSquare", 0.0),
        ("ReduceLogSum", -np.inf),
        ("ReduceLogSumExp", -np.inf),
    ],
)
def test_empty_reduction_gives_identity(op: str, identity: float) -> None:
    x = np.zeros((2, 0, 4), dtype=np.float32)
    got = _run(
        _model(op, 18, [("x", x), ("axes", np.array([1], dtype=np.int64))]),
        [("x", x), ("axes", np.array([1], dtype=np.int64))],
    )[0]
    assert got.shape == (2, 1, 4) and got.dtype == np.float32
    np.testing.assert_array_equal(got, np.full((2, 1, 4), identity, dtype=np.float32))


def test_empty_non_reduced_axis() -> None:
    x = np.zeros((2, 0, 4), dtype=np.float32)
    inputs = [("x", x), ("axes", np.array([2], dtype=np.int64))]
    got = _run(_model("ReduceSum", 13, inputs, keepdims=1), inputs)[0]
    assert got.shape == (2, 0, 1)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.int8])
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd"])
def test_integer_dtypes_kept(op: str, dtype) -> None:  # type: ignore[no-untyped-def]
    x = RNG.integers(0, 5, size=(3, 4)).astype(dtype)
    opset = 20 if op in ("ReduceMax", "ReduceMin") else 18
    inputs = [("x", x), ("axes", np.array([1], dtype=np.int64))]
    got = _run(_model(op, opset, inputs, keepdims=0), inputs)[0]
    expected = {"ReduceMax": x.max(1), "ReduceMin": x.min(1), "ReduceSum": x.sum(1), "ReduceProd": x.prod(1)}[op]
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, expected.astype(dtype))


def test_integer_empty_max_min_use_dtype_limits() -> None:
    x = np.zeros((0, 3), dtype=np.int32)
    axes = np.array([0], dtype=np.int64)
    got = _run(_model("ReduceMax", 20, [("x", x), ("axes", axes)]), [("x", x), ("axes", axes)])[0]
    np.testing.assert_array_equal(got, np.full((1, 3), np.iinfo(np.int32).min, dtype=np.int32))
    got = _run(_model("ReduceMin", 20, [("x", x), ("axes", axes)]), [("x", x), ("axes", axes)])[0]
    np.testing.assert_array_equal(got, np.full((1, 3), np.iinfo(np.int32).max, dtype=np.int32))


def test_bool_max_min() -> None:
    x = np.array([[True, False], [False, False]])
    axes = np.array([1], dtype=np.int64)
    got = _run(_model("ReduceMax", 20, [("x", x), ("axes", axes)], keepdims=0), [("x", x), ("axes", axes)])[0]
    np.testing.assert_array_equal(got, [True, False])
    got = _run(_model("ReduceMin", 20, [("x", x), ("axes", axes)], keepdims=0), [("x", x), ("axes", axes)])[0]
    np.testing.assert_array_equal(got, [False, False])
    empty = np.zeros((2, 0), dtype=bool)
    got = _run(_model("ReduceMin", 20, [("x", empty), ("axes", axes)], keepdims=0), [("x", empty), ("axes", axes)])[0]
    np.testing.assert_array_equal(got, [True, True])


def test_nan_propagates_and_logsumexp_is_stable() -> None:
    x = np.array([[1.0, np.nan, 3.0], [1000.0, 1000.0, -np.inf]], dtype=np.float32)
    axes = np.array([1], dtype=np.int64)
    inputs = [("x", x), ("axes", axes)]
    got = _run(_model("ReduceMax", 18, inputs, keepdims=0), inputs)[0]
    assert np.isnan(got[0]) and got[1] == 1000.0
    got = _run(_model("ReduceLogSumExp", 18, inputs, keepdims=0), inputs)[0]
    np.testing.assert_allclose(got[1], 1000.0 + np.log(2.0), rtol=1e-6)
    ninf = np.full((1, 3), -np.inf, dtype=np.float32)
    got = _run(_model("ReduceLogSumExp", 18, [("x", ninf), ("axes", axes)]), [("x", ninf), ("axes", axes)])[0]
    assert got.shape == (1, 1) and got[0, 0] == -np.inf


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceL2", "ReduceLogSumExp"])
def test_float_dtypes(op: str, dtype) -> None:  # type: ignore[no-untyped-def]
    x = X.astype(dtype)
    _check(op, 18, [("x", x), ("axes", np.array([1], dtype=np.int64))], rtol=2e-3, atol=1e-3)


def test_bfloat16_sum() -> None:
    import ml_dtypes

    x = X.astype(ml_dtypes.bfloat16)
    inputs = [("x", x), ("axes", np.array([2], dtype=np.int64))]
    got = _run(_model("ReduceSum", 13, inputs), inputs)[0]
    assert got.dtype == x.dtype
    np.testing.assert_allclose(got.astype(np.float32), x.astype(np.float32).sum(2, keepdims=True), rtol=1e-2)


def test_scalar_input() -> None:
    x = np.array(3.0, dtype=np.float32)
    got = _run(_model("ReduceSumSquare", 18, [("x", x)], keepdims=0), [("x", x)])[0]
    assert got.shape == () and got == 9.0


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("opset", [1, 11, 12, 13])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_arg_ops(op: str, opset: int, keepdims: int) -> None:
    x = np.array([[2, 1, 2, 1], [0, 0, 3, 3], [5, 5, 5, 5]], dtype=np.float32)
    axis = 1 if opset == 1 else -1
    _check(op, opset, [("x", x)], axis=axis, keepdims=keepdims)
    _check(op, opset, [("x", x)], keepdims=keepdims)
    if opset >= 12:
        got = _check(op, opset, [("x", x)], axis=axis, keepdims=keepdims, select_last_index=1)
        first = _run(_model(op, opset, [("x", x)], axis=axis, keepdims=keepdims), [("x", x)])[0]
        assert got[0].dtype == np.int64
        assert not np.array_equal(got[0], first)


def test_arg_ops_int_and_empty_outer() -> None:
    x = np.array([[3, -7, 2]], dtype=np.int32)
    got = _run(_model("ArgMin", 13, [("x", x)], out_elem=TensorProto.INT64, axis=1), [("x", x)])[0]
    np.testing.assert_array_equal(got, [[1]])
    empty = np.zeros((0, 4), dtype=np.float32)
    got = _run(_model("ArgMax", 13, [("x", empty)], out_elem=TensorProto.INT64, axis=1, keepdims=0), [("x", empty)])[0]
    assert got.shape == (0,) and got.dtype == np.int64


@pytest.mark.parametrize("opset", [11, 22])
def test_det(opset: int) -> None:
    x = RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)
    got = _check("Det", opset, [("x", x)], rtol=1e-4, atol=1e-5)
    assert got[0].shape == (2, 3)
    x2 = RNG.standard_normal((4, 4)).astype(np.float64)
    got = _run(_model("Det", opset, [("x", x2)]), [("x", x2)])[0]
    assert got.shape == () and got.dtype == np.float64
    np.testing.assert_allclose(got, np.linalg.det(x2))
