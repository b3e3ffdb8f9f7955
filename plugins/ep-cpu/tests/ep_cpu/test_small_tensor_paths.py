"""Per-call shortcuts on small tensors (ReduceMean with axes known at build, Expand through
a cached target shape): same answers as the general paths and as onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy.errors import KernelError

ort = pytest.importorskip("onnxruntime")


def _both(model, feeds):
    data = model.SerializeToString()
    got = epoxy.InferenceSession(data, providers=["cpu"]).run(None, feeds)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    return got, want


@pytest.mark.parametrize("axes_as", ["initializer", "input"])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", [[-1], [0, 2], []])
def test_reduce_mean_with_constant_or_fed_axes(axes_as: str, keepdims: int, axes: list[int]) -> None:
    x = np.random.default_rng(len(axes)).standard_normal((2, 3, 4)).astype(np.float32)
    axes_value = np.array(axes, np.int64)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", "b", "c"])]
    inits, feeds = [], {"x": x}
    if axes_as == "initializer":
        inits = [numpy_helper.from_array(axes_value, "axes")]
    else:
        inputs.append(helper.make_tensor_value_info("axes", TensorProto.INT64, [len(axes)]))
        feeds["axes"] = axes_value
    node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=keepdims)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    for _ in range(2):  # the second run takes the cached axes
        got, want = _both(model, feeds)
        assert got[0].shape == want[0].shape and got[0].dtype == want[0].dtype
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("x_shape,shape", [((3, 1), (2, 3, 4)), ((1,), (5,)), ((2, 3), (1, 1)), ((4,), (3, 1))])
def test_expand_matches_onnxruntime_across_shapes(x_shape, shape) -> None:
    x = np.arange(int(np.prod(x_shape)), dtype=np.float32).reshape(x_shape)
    node = helper.make_node("Expand", ["x", "s"], ["y"])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape)),
                      helper.make_tensor_value_info("s", TensorProto.INT64, [len(shape)])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    for _ in range(2):
        got, want = _both(model, {"x": x, "s": np.array(shape, np.int64)})
        np.testing.assert_array_equal(got[0], want[0])
        got[0][...] = -1  # a fresh array each run


def test_expand_to_an_incompatible_shape_names_the_node() -> None:
    node = helper.make_node("Expand", ["x", "s"], ["y"], name="grow")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                      helper.make_tensor_value_info("s", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    sess = epoxy.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
                                  .SerializeToString(), providers=["cpu"])
    with pytest.raises(KernelError, match="grow"):
        sess.run(None, {"x": np.ones(3, np.float32), "s": np.array([4], np.int64)})
