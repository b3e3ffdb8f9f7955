"""The small-tensor paths of Concat, Shape, Cast, the integer comparisons, Where and Gather on
1-d data (issue #17): Concat of short integer vectors through Python lists, Shape's array built
once per input shape, Cast/Equal/Where without conversions or errstate when the dtypes need none,
Gather giving a 0-d array. Oracles: onnx.reference, and the general path (the same kernel on
inputs that do not qualify, or the helpers the fast paths skip)."""

from __future__ import annotations

import typing
import warnings

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from epoxy.contract import NodeSpec
from epoxy_ep_cpu.ops import cast, indexing, logical, shape


def _spec(op: str, inputs: tuple[str, ...], opset: int = 18, attrs: dict[str, object] | None = None) -> NodeSpec:
    return NodeSpec(index=0, name="n", op_type=op, domain="", opset=opset, inputs=inputs, outputs=("y",),
                    attributes=attrs or {}, input_types=(), output_types=(), constants={})


def _ref(op: str, feeds: dict[str, np.ndarray], **attrs: typing.Any) -> np.ndarray:
    node = helper.make_node(op, list(feeds), ["y"], **attrs)
    with np.errstate(all="ignore"):
        outs = typing.cast(list[np.ndarray], ReferenceEvaluator(node).run(None, feeds))
    return np.asarray(outs[0])


def _same(got: object, ref: np.ndarray) -> None:
    """An ndarray (never a numpy scalar) with the reference's dtype, shape and values."""
    assert type(got) is np.ndarray, type(got)
    assert got.dtype == ref.dtype and got.shape == ref.shape, (got.dtype, got.shape, ref.dtype, ref.shape)
    np.testing.assert_array_equal(got, ref)


# ------------------------------------------------------------------------------------ Concat

_VECTORS = [
    [np.array([1], np.int64), np.array([16, 4], np.int64), np.array([-1], np.int64)],
    [np.array([], np.int64), np.array([7], np.int64)],
    [np.array([2**63 - 1], np.int64), np.array([-(2**63)], np.int64)],
    [np.array([2**64 - 1, 0], np.uint64), np.array([5], np.uint64)],
    [np.array([3, 4], np.int32)],
    [np.arange(16, dtype=np.int64), np.arange(3, dtype=np.int64)],  # 16 elements: still the list path
]


@pytest.mark.parametrize("parts", _VECTORS)
@pytest.mark.parametrize("axis", [0, -1])
def test_concat_small_int_vectors_match_reference_and_concatenate(parts: list[np.ndarray], axis: int) -> None:
    assert shape._small_int_vectors(tuple(parts)) is not None  # the list path is taken
    names = [f"x{i}" for i in range(len(parts))]
    before = [p.copy() for p in parts]
    got = shape.concat(_spec("Concat", tuple(names), attrs={"axis": axis}))(*parts)
    _same(got, _ref("Concat", dict(zip(names, parts)), axis=axis))
    _same(got, np.concatenate(parts, axis=axis))
    got[...] = 1  # a fresh array: the inputs are not touched
    for p, b in zip(parts, before):
        np.testing.assert_array_equal(p, b)


@pytest.mark.parametrize("parts", [
    [np.array([1], np.int64), np.array([2], np.int32)],  # mixed dtypes
    [np.array([1.0], np.float32), np.array([2.0], np.float32)],  # floats
    [np.arange(17, dtype=np.int64), np.array([1], np.int64)],  # longer than the list path takes
    [np.array([[1, 2]], np.int64), np.array([[3, 4]], np.int64)],  # 2-d
])
def test_concat_other_inputs_take_the_general_path(parts: list[np.ndarray]) -> None:
    assert shape._small_int_vectors(tuple(parts)) is None
    got = shape.concat(_spec("Concat", ("a", "b"), attrs={"axis": 0}))(*parts)
    assert got.dtype == parts[0].dtype
    np.testing.assert_array_equal(got, np.concatenate(parts, axis=0))


def test_concat_of_1d_vectors_on_axis_1_still_fails() -> None:
    parts = (np.array([1], np.int64), np.array([2], np.int64))
    with pytest.raises(Exception):  # noqa: B017 - numpy's AxisError, as before the list path
        shape.concat(_spec("Concat", ("a", "b"), attrs={"axis": 1}))(*parts)


# ------------------------------------------------------------------------------------- Shape


def test_shape_returns_a_fresh_array_each_run() -> None:
    """The cached array is copied: writing into one run's output changes no later output."""
    kernel = shape.shape(_spec("Shape", ("x",)))
    for dims in [(2, 3, 5), (1,), (), (0, 4), (2, 3, 5)]:
        x = np.zeros(dims, np.float32)
        first = kernel(x)
        _same(first, _ref("Shape", {"x": x}))
        first[...] = -7
        _same(kernel(x), _ref("Shape", {"x": x}))
        assert not np.shares_memory(first, kernel(x))


# -------------------------------------------------------------------------------------- Cast

_PLAIN_SOURCES = [np.bool_, np.int8, np.uint8, np.int32, np.int64, np.uint64]
_PLAIN_TARGETS = {1: np.float32, 11: np.float64, 7: np.int64, 6: np.int32, 2: np.uint8, 9: np.bool_, 13: np.uint64}


def _cast_inputs(dtype: type) -> list[np.ndarray]:
    if dtype is np.bool_:
        return [np.array(True), np.array([True, False, True])]
    info = np.iinfo(dtype)
    return [np.array(3, dtype), np.array([0, 1, info.max, info.min, info.max // 3 + 1], dtype),
            np.arange(6, dtype=dtype).reshape(2, 3)[:, ::2]]  # non-contiguous


@pytest.mark.parametrize("src", _PLAIN_SOURCES)
@pytest.mark.parametrize("to", sorted(_PLAIN_TARGETS))
def test_cast_plain_pairs_match_reference_and_cast_array(src: type, to: int) -> None:
    kernel = cast.cast(_spec("Cast", ("x",), 21, {"to": to}))
    assert kernel.__name__ == "run_plain"
    for x in _cast_inputs(src):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the fast path never warns
            got = kernel(x)
        general = cast.cast_array(x, np.dtype(_PLAIN_TARGETS[to]))
        _same(got, general)
        _same(got, _ref("Cast", {"x": x}, to=to))
        assert not np.shares_memory(got, x)  # a copy even when the dtype does not change


def test_cast_other_sources_and_targets_keep_the_general_path() -> None:
    to_f32 = cast.cast(_spec("Cast", ("x",), 21, {"to": 1}))
    x = np.array([np.nan, 1e40, -2.5], np.float64)  # float source: cast_array, under errstate
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _same(to_f32(x), cast.cast_array(x, np.dtype(np.float32)))
    assert cast.cast(_spec("Cast", ("x",), 21, {"to": 10})).__name__ == "run"  # float16 target
    strings = cast.cast(_spec("Cast", ("x",), 21, {"to": 7}))(np.array(["12", "-3"], dtype=object))
    _same(strings, np.array([12, -3], np.int64))


# ------------------------------------------------------------------ comparisons and Where


@pytest.mark.parametrize("op", ["Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"])
@pytest.mark.parametrize("pair", [
    (np.array(3, np.int64), np.array(3, np.int64)),
    (np.array([1, -1, 5], np.int64), np.array(-1, np.int64)),
    (np.array([[0], [7]], np.int32), np.array([7, 0, 2], np.int32)),
    (np.array([2**64 - 1, 0], np.uint64), np.array([2**64 - 1, 1], np.uint64)),
])
def test_integer_comparisons_match_reference_and_the_float_path(op: str, pair: tuple[np.ndarray, np.ndarray]) -> None:
    a, b = pair
    kernel = logical._compare(logical._COMPARE[op][1])
    got = kernel(a, b)
    _same(got, _ref(op, {"a": a, "b": b}))
    if a.dtype != np.uint64:  # the general path on the same values as float64
        _same(got, kernel(a.astype(np.float64), b.astype(np.float64)))


def test_equal_on_bools() -> None:
    a, b = np.array([True, False]), np.array(True)
    _same(logical._compare(np.equal)(a, b), _ref("Equal", {"a": a, "b": b}))


@pytest.mark.parametrize("cond, x, y", [
    (np.array(True), np.array(4, np.int64), np.array(9, np.int64)),
    (np.array([True, False, True]), np.array([1, 2, 3], np.int64), np.array(-1, np.int64)),
    (np.array([[True], [False]]), np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros(3, np.float32)),
])
def test_where_matches_reference_and_the_general_path(cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
    kernel = logical.where(_spec("Where", ("c", "x", "y"), 16))
    got = kernel(cond, x, y)
    _same(got, _ref("Where", {"c": cond, "x": x, "y": y}))
    # general path: an integer condition (converted to bool there) gives the same values
    _same(got, kernel(cond.astype(np.int64), x, y))


def test_where_mixed_dtypes_keep_x_dtype() -> None:
    """Not the fast path (dtypes differ): as before, the result takes x's dtype."""
    got = logical.where(_spec("Where", ("c", "x", "y"), 16))(np.array([True, False]), np.array([1, 2], np.int64),
                                                             np.array([3, 4], np.int32))
    _same(got, np.array([1, 4], np.int64))


# ------------------------------------------------------------------------------------ Gather


@pytest.mark.parametrize("index", [0, 2, -1, -3])
@pytest.mark.parametrize("dtype", [np.int64, np.float32])
def test_gather_1d_scalar_index_gives_a_0d_array(index: int, dtype: type) -> None:
    data: np.ndarray = np.array([5, 16, 32], dtype)
    kernel = indexing.gather(_spec("Gather", ("x", "i"), 13))
    got = kernel(data, np.array(index, np.int64))
    _same(got, _ref("Gather", {"x": data, "i": np.array(index, np.int64)}))
    _same(got, kernel(data, np.array([index], np.int64)).reshape(()))  # the general path
    assert not np.shares_memory(got, data)
