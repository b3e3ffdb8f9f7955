"""Constant, ConstantOfShape, Range, OneHot and EyeLike on the cpu provider vs onnx.reference."""

from __future__ import annotations

import ml_dtypes  # noqa: E402
import numpy as np
import onnx
import pytest
from _shape_oracle import _as_f64, _build, _elem, check, run_both  # noqa: E402,F401
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import epoxy


def _constant_model(attr_name, value, opset=21):  # type: ignore[no-untyped-def]
    node = helper.make_node("Constant", [], ["y0"], **{attr_name: value})
    graph = helper.make_graph([node], "g", [], [helper.make_value_info("y0", onnx.TypeProto())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if attr_name == "sparse_value":  # the reference returns its own SparseTensor: densify by hand
        dense = np.zeros(int(np.prod(value.dims)), dtype=np.int64)
        dense[onnx.numpy_helper.to_array(value.indices)] = onnx.numpy_helper.to_array(value.values)
        ref = dense.reshape(tuple(value.dims))
    else:
        ref = np.asarray(ReferenceEvaluator(model).run(None, {})[0])
    if ref.dtype.kind in "SU":
        ref = ref.astype(object)
    elem = helper.np_dtype_to_tensor_dtype(ref.dtype) if ref.dtype != object else TensorProto.STRING
    model.graph.output[0].type.CopyFrom(helper.make_tensor_type_proto(elem, list(ref.shape)))
    return model, ref


@pytest.mark.parametrize(
    "attr,value",
    [
        ("value", helper.make_tensor("v", TensorProto.FLOAT, [2, 2], [1, 2, 3, 4])),
        ("value", helper.make_tensor("v", TensorProto.BFLOAT16, [2], [1.5, -2.0])),
        ("value", helper.make_tensor("v", TensorProto.STRING, [2], [b"ab", b"c"])),
        ("value_float", 2.5),
        ("value_floats", [1.0, 2.0]),
        ("value_int", 7),
        ("value_ints", [3, 4, 5]),
        ("value_string", "hello"),
        ("value_strings", ["a", "bc"]),
        ("sparse_value", helper.make_sparse_tensor(
            helper.make_tensor("v", TensorProto.INT64, [2], [5, 6]),
            helper.make_tensor("i", TensorProto.INT64, [2], [1, 4]), [2, 3])),
    ],
)
def test_constant(attr, value) -> None:  # type: ignore[no-untyped-def]
    model, ref = _constant_model(attr, value)
    got = epoxy.InferenceSession(model, providers=["cpu"]).run(None, {})[0]
    assert got.dtype == ref.dtype and got.shape == ref.shape
    if ref.dtype == object:
        want = [v.decode() if isinstance(v, bytes) else str(v) for v in ref.reshape(-1)]
        assert [str(v) for v in got.reshape(-1)] == want
    else:
        np.testing.assert_array_equal(got.astype(np.float64), ref.astype(np.float64))


def test_constant_of_shape() -> None:
    check("ConstantOfShape", [("s", np.array([2, 3], np.int64))])
    check("ConstantOfShape", [("s", np.array([0, 3], np.int64))],
          value=helper.make_tensor("v", TensorProto.INT32, [1], [7]))
    check("ConstantOfShape", [("s", np.zeros((0,), np.int64))],
          value=helper.make_tensor("v", TensorProto.FLOAT16, [1], [1.5]))
    check("ConstantOfShape", [("s", np.array([2], np.int64))],
          value=helper.make_tensor("v", TensorProto.BOOL, [1], [True]))


@pytest.mark.parametrize(
    "start,limit,delta,dtype",
    [
        (3, 9, 3, np.int32),
        (10, 4, -2, np.int64),
        (10, 4, 2, np.int64),
        (1, 2, 0.3, np.float32),
        (-1.5, 7.2, 0.5, np.float64),
        (5.0, 1.0, -1.25, np.float32),
        (0, 10, 3, np.int16),
    ],
)
def test_range(start, limit, delta, dtype) -> None:  # type: ignore[no-untyped-def]
    got = check("Range", [("a", np.array(start, dtype)), ("b", np.array(limit, dtype)), ("c", np.array(delta, dtype))],
                opset=21)
    assert got[0].ndim == 1


def test_range_half_precision() -> None:
    a, b, c = (np.array(v, np.float16) for v in (0.0, 4.0, 0.5))
    got, _ = run_both("Range", [("a", a), ("b", b), ("c", c)], opset=21,
                      expected=[np.arange(0, 4, 0.5).astype(np.float16)])
    np.testing.assert_array_equal(got[0], np.arange(0, 4, 0.5).astype(np.float16))
    a, b, c = (np.array(v, ml_dtypes.bfloat16) for v in (1.0, 3.0, 1.0))
    got, _ = run_both("Range", [("a", a), ("b", b), ("c", c)], opset=21,
                      expected=[np.array([1.0, 2.0], ml_dtypes.bfloat16)])
    assert got[0].dtype == ml_dtypes.bfloat16 and got[0].astype(np.float32).tolist() == [1.0, 2.0]


@pytest.mark.parametrize("axis", [-1, 0, 1, -2])
def test_one_hot(axis) -> None:  # type: ignore[no-untyped-def]
    idx = np.array([[0, 3, -1], [5, -7, 2]], np.int64)
    check("OneHot", [("i", idx), ("d", np.array(5, np.int64)), ("v", np.array([2, 9], np.int32))], opset=11, axis=axis)
    check("OneHot", [("i", idx.astype(np.float32)), ("d", np.array(4.0, np.float32)),
                     ("v", np.array([0.0, 1.0], np.float32))], opset=11, axis=axis)


@pytest.mark.parametrize("k", [0, 1, -2, 5])
def test_eye_like(k) -> None:  # type: ignore[no-untyped-def]
    x = np.zeros((3, 4), np.float32)
    check("EyeLike", [("x", x)], k=k)
    check("EyeLike", [("x", x)], k=k, dtype=TensorProto.INT32)
    check("EyeLike", [("x", np.zeros((2, 2), np.int64))], k=k, dtype=TensorProto.BOOL)


def test_constant_kernel_sparse_value_dense() -> None:
    # the core hands sparse_value to kernels already densified
    from epoxy.contract import NodeSpec
    from epoxy_ep_cpu.ops.creation import constant

    dense = np.array([[0, 5, 0], [0, 6, 0]], np.int64)
    spec = NodeSpec(0, "c", "Constant", "", 13, (), ("y",), {"sparse_value": dense}, (), ())
    out = constant(spec)()
    np.testing.assert_array_equal(out, dense)
    assert out.dtype == np.int64
