"""The small-tensor paths of the shape-arithmetic kernels (issue #17): constant axes/shape/slice
parameters resolved when the kernel is built, output shapes cached per input shape, a 0-d
Gather index without an index array. Oracles: onnx.reference, and the same node with those
parameters fed at run time (the general path)."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import epoxy
from epoxy.contract import NodeSpec
from epoxy_ep_cpu.ops import indexing, shape

_I64 = onnx.TensorProto.INT64


def _model(op: str, x: np.ndarray, params: list[tuple[str, np.ndarray | None]], const: bool, **attrs):  # type: ignore[no-untyped-def]
    """One node ``op(x, *params)``; the params are initializers when ``const``, else graph inputs."""
    names = ["x"] + [n if v is not None else "" for n, v in params]
    inputs = [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)]
    inits = []
    for n, v in params:
        if v is None:
            continue
        if const:
            inits.append(numpy_helper.from_array(v, n))
        else:
            inputs.append(helper.make_tensor_value_info(n, _I64, v.shape))
    node = helper.make_node(op, names, ["y"], **attrs)
    out = helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(x.dtype), None)
    graph = helper.make_graph([node], "g", inputs, [out], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _check(op: str, x: np.ndarray, params: list[tuple[str, np.ndarray | None]], **attrs) -> None:  # type: ignore[no-untyped-def]
    """Constant and fed parameters give onnx.reference's output, shape, dtype and values."""
    feeds_all = {"x": x, **{n: v for n, v in params if v is not None}}
    ref = ReferenceEvaluator(_model(op, x, params, const=False, **attrs)).run(None, feeds_all)[0]
    for const in (True, False):
        model = _model(op, x, params, const, **attrs)
        sess = epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"])
        feeds = {"x": x} if const else feeds_all
        for _ in range(2):  # the second run takes the cached shape arithmetic
            got = sess.run(None, feeds)[0]
            assert got.dtype == ref.dtype and got.shape == ref.shape, (op, const)
            np.testing.assert_array_equal(got, ref)


X = np.arange(2 * 1 * 3 * 4, dtype=np.float32).reshape(2, 1, 3, 4)


@pytest.mark.parametrize("axes", [[0], [-1], [1, 3], [4, 0, -2]])
def test_unsqueeze_constant_and_fed_axes(axes: list[int]) -> None:
    _check("Unsqueeze", X, [("axes", np.array(axes, np.int64))])


@pytest.mark.parametrize("axes", [[1], [-3], None])
def test_squeeze_constant_and_fed_axes(axes: list[int] | None) -> None:
    _check("Squeeze", X, [("axes", None if axes is None else np.array(axes, np.int64))])


@pytest.mark.parametrize("target", [[2, -1], [0, 0, 12], [-1], [0, 3, 1, 4], [4, 3, 2]])
def test_reshape_constant_and_fed_shape(target: list[int]) -> None:
    x = X if target != [4, 3, 2] else X.reshape(24)
    _check("Reshape", x, [("shape", np.array(target, np.int64))])


def test_reshape_allowzero_is_part_of_the_cached_key() -> None:
    x = np.zeros((0, 3), np.float32)
    _check("Reshape", x, [("shape", np.array([3, 0], np.int64))], allowzero=1)
    _check("Reshape", np.zeros((2, 3), np.float32), [("shape", np.array([0, 3], np.int64))], allowzero=0)


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([0], [2], None, None),
    ([1, -1], [3, -5], [2, -1], [1, -1]),
    ([-100], [100], [3], [2]),
    ([2], [0], [2], [-1]),
    ([0, 0], [1, 9223372036854775807], [0, 3], None),
])
def test_slice_constant_and_fed_parameters(starts, ends, axes, steps) -> None:  # type: ignore[no-untyped-def]
    def arr(v):  # type: ignore[no-untyped-def]
        return None if v is None else np.array(v, np.int64)

    params = [("starts", arr(starts)), ("ends", arr(ends)), ("axes", arr(axes)), ("steps", arr(steps))]
    while params and params[-1][1] is None:
        params.pop()
    _check("Slice", X, params)


def test_cached_shapes_follow_the_input_shape() -> None:
    """One session, two input shapes: the per-shape caches never serve the other shape."""
    model = _model("Reshape", X, [("shape", np.array([0, -1], np.int64))], const=True)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    sess = epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"])
    for n in (2, 5, 2):
        x = np.ones((n, 1, 3, 4), np.float32)
        assert sess.run(None, {"x": x})[0].shape == (n, 12)


def test_bad_parameters_still_fail_on_both_paths() -> None:
    for const in (True, False):
        model = _model("Unsqueeze", X, [("axes", np.array([0, 0], np.int64))], const)
        sess = epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"])
        feeds = {"x": X} if const else {"x": X, "axes": np.array([0, 0], np.int64)}
        with pytest.raises(epoxy.errors.EpoxyError, match="Unsqueeze"):
            sess.run(None, feeds)
        model = _model("Reshape", X, [("shape", np.array([5, -1], np.int64))], const)
        sess = epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"])
        feeds = {"x": X} if const else {"x": X, "shape": np.array([5, -1], np.int64)}
        with pytest.raises(epoxy.errors.EpoxyError, match="Reshape"):
            sess.run(None, feeds)


def _spec(op: str, inputs: tuple[str, ...], constants: dict[str, np.ndarray], opset: int = 18,
          attrs: dict | None = None) -> NodeSpec:  # type: ignore[type-arg]
    return NodeSpec(index=0, name="n", op_type=op, domain="", opset=opset, inputs=inputs, outputs=("y",),
                    attributes=attrs or {}, input_types=(), output_types=(), constants=constants)


def test_constant_parameters_select_the_static_kernels() -> None:
    """The paths above are really taken: constants give the static kernels, fed values do not."""
    axes = {"a": np.array([0], np.int64)}
    assert shape.unsqueeze(_spec("Unsqueeze", ("x", "a"), axes)).__name__ == "run_static"
    assert shape.unsqueeze(_spec("Unsqueeze", ("x", "a"), {})).__name__ == "run"
    assert shape.squeeze(_spec("Squeeze", ("x", "a"), axes)).__name__ == "run_static"
    assert shape.reshape(_spec("Reshape", ("x", "a"), axes)).__name__ == "run_static"
    s = {"s": np.array([0], np.int64), "e": np.array([1], np.int64)}
    assert indexing.slice_(_spec("Slice", ("x", "s", "e"), s)).__name__ == "run_static"
    assert indexing.slice_(_spec("Slice", ("x", "s", "e", "ax"), s)).__name__ == "run"  # axes fed
    floats = {"a": np.array([0.0])}
    assert shape.reshape(_spec("Reshape", ("x", "a"), floats)).__name__ == "run"


@pytest.mark.parametrize("data", [np.array([3, 16, 32], np.int64), np.arange(12, dtype=np.int32).reshape(3, 4),
                                  np.arange(24, dtype=np.float32).reshape(2, 3, 4).T])
@pytest.mark.parametrize("index", [0, 1, -1, -2])
@pytest.mark.parametrize("axis", [0, -1])
def test_gather_scalar_index_matches_the_array_path(data: np.ndarray, index: int, axis: int) -> None:
    """A 0-d index (the fast path) against a 1-element index reshaped (the general path) and
    onnx.reference; both are copies, never views of the data."""
    kernel = indexing.gather(_spec("Gather", ("x", "i"), {}, 13, {"axis": axis}))
    got = kernel(data, np.array(index, np.int64))
    general = np.squeeze(kernel(data, np.array([index], np.int64)), axis=axis if data.ndim > 1 else 0)
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)
    ref = ReferenceEvaluator(node).run(None, {"x": data, "i": np.array(index, np.int64)})[0]
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, general)
    assert np.asarray(got).dtype == data.dtype and np.asarray(got).shape == np.asarray(ref).shape
    assert not np.shares_memory(np.asarray(got), data)


@pytest.mark.parametrize("index", [3, -4, 100])
def test_gather_scalar_index_out_of_range_raises(index: int) -> None:
    kernel = indexing.gather(_spec("Gather", ("x", "i"), {}, 13))
    with pytest.raises(IndexError, match="out of range"):
        kernel(np.array([1, 2, 3], np.int64), np.array(index, np.int64))


def test_shape_and_concat_on_tiny_int64_tensors() -> None:
    """Shape (whole, and start/end) and Concat of 0-d-turned-1-d pieces, against onnx.reference."""
    x = np.zeros((2, 3, 5), np.float32)
    for attrs in ({}, {"start": 1}, {"end": -1}, {"start": -2, "end": 10}):
        node = helper.make_node("Shape", ["x"], ["y"], **attrs)
        ref = ReferenceEvaluator(node).run(None, {"x": x})[0]
        got = shape.shape(_spec("Shape", ("x",), {}, 18, attrs))(x)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, ref)
    parts = [np.array([1], np.int64), np.array([16, 4], np.int64), np.array([-1], np.int64)]
    cat = shape.concat(_spec("Concat", ("a", "b", "c"), {}, 18, {"axis": -1}))
    got = cat(*parts)
    ref = ReferenceEvaluator(helper.make_node("Concat", ["a", "b", "c"], ["y"], axis=-1)).run(
        None, dict(zip("abc", parts)))[0]
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul"])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint64])
def test_integer_arithmetic_on_tiny_arrays_wraps_quietly(op: str, dtype: type) -> None:
    """The no-errstate path for same-dtype integer arrays: onnx.reference's values and dtype,
    0-d results as arrays, overflow wrapping without a warning."""
    from epoxy_ep_cpu.ops import elementwise

    big = np.iinfo(dtype).max
    cases = [(np.array(7, dtype), np.array(3, dtype)), (np.array([big, 5], dtype), np.array([2, 3], dtype)),
             (np.array([[1], [2]], dtype), np.array([big], dtype))]
    kernel = elementwise._arith_factory(op, elementwise._BINARY[op])(_spec(op, ("a", "b"), {}, 14))
    node = helper.make_node(op, ["a", "b"], ["y"])
    for a, b in cases:
        with np.errstate(all="ignore"):
            ref = ReferenceEvaluator(node).run(None, {"a": a, "b": b})[0]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = kernel(a, b)
        assert isinstance(got, np.ndarray) and got.dtype == a.dtype and got.shape == np.asarray(ref).shape
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_gather_index_arrays_negative_and_out_of_range(dtype) -> None:
    """Index arrays on both axes: negative indices count from the end (as onnx.reference
    reads them), and one index outside [-dim, dim) raises IndexError naming the dimension."""
    data = np.arange(5 * 7, dtype=np.float32).reshape(5, 7)
    for axis, idx in ((0, [[0, -1], [4, -5]]), (1, [[6, -7, 3]])):
        kernel = indexing.gather(_spec("Gather", ("x", "i"), {}, 13, {"axis": axis}))
        node = helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)
        i = np.array(idx, dtype)
        ref = ReferenceEvaluator(node).run(None, {"x": data, "i": i})[0]
        np.testing.assert_array_equal(kernel(data, i), ref)
        for bad in (data.shape[axis], -data.shape[axis] - 1):
            with pytest.raises(IndexError, match=f"out of range for dimension of size {data.shape[axis]}"):
                kernel(data, np.array([[0, bad]], dtype))
