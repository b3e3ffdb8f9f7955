"""Rewrites applied before OpenVINO reads a group: GlobalAveragePool computes every channel
the same way (OpenVINO's own lowering sums the tail channel block after a blocked-layout
convolution in another order, so equal channels averaged to different values)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from ov_test_models import make_model

import epoxy
from epoxy_ep_openvino.rewrites import apply_rewrites


def _conv_pool_model(channels: int, spatial, opset: int = 18) -> onnx.ModelProto:
    """conv (every weight 0.02: all output channels hold the same data) -> relu -> GAP."""
    w = np.full((channels, 64, 1, 1), 0.02, np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["y"], name="pool"),
    ]
    return make_model(nodes, [("x", TensorProto.FLOAT, [1, 64, *spatial])],
                      [("y", TensorProto.FLOAT, [1, channels, 1, 1])], {"w": w}, opset=opset)


@pytest.mark.parametrize("channels", [1000, 24, 37])
@pytest.mark.parametrize("spatial", [(13, 13), ("H", "W")], ids=["static", "dynamic"])
@pytest.mark.parametrize("opset", [13, 18])
def test_equal_channels_pool_to_equal_values(channels, spatial, opset, rng):
    model = _conv_pool_model(channels, spatial, opset)
    x = (rng.standard_normal((1, 64, 13, 13)) * 1e3).astype(np.float32)
    sess = epoxy.InferenceSession(model.SerializeToString(), providers=[("openvino", {"min_group_cost": 0}), "cpu"])
    report = sess.partition_report()
    assert set(report.summary()) == {"openvino"}, report.format(per_node=False)
    (y,) = sess.run(None, {"x": x})
    assert y.shape == (1, channels, 1, 1)
    differing = np.nonzero(y.ravel() != y.ravel()[0])[0]
    assert differing.size == 0, f"channels {differing[:8]} differ from channel 0"
    ref = epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, ref, rtol=1e-5)


def _shapes(table):
    return lambda name: table.get(name)


def test_static_image_becomes_one_average_pool():
    model = _conv_pool_model(8, (5, 7))
    assert apply_rewrites(model, _shapes({"r": (1, 8, 5, 7)})) == 1
    pool = [n for n in model.graph.node if n.op_type == "AveragePool"]
    assert [n.op_type for n in model.graph.node] == ["Conv", "Relu", "AveragePool"]
    assert list(pool[0].attribute[0].ints) == [5, 7]
    onnx.checker.check_model(model, full_check=True)


@pytest.mark.parametrize("opset", [13, 18])
def test_dynamic_image_becomes_flat_mean_valid_at_the_models_opset(opset):
    model = _conv_pool_model(8, ("H", "W"), opset)
    assert apply_rewrites(model, _shapes({"r": (1, 8, None, None)})) == 1
    assert [n.op_type for n in model.graph.node] == ["Conv", "Relu", "Reshape", "ReduceMean", "Reshape"]
    onnx.checker.check_model(model, full_check=True)


def test_unknown_rank_is_left_alone():
    model = _conv_pool_model(8, (5, 5))
    assert apply_rewrites(model, _shapes({})) == 0
    assert [n.op_type for n in model.graph.node] == ["Conv", "Relu", "GlobalAveragePool"]
