"""Capability and partitioning on small models: gates, OpenVINO's frontend, groups, cost, results."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from ov_test_models import conv_net, make_model

import epoxy
from epoxy_ep_openvino import support


def _declines(sess, node):
    d = next(d for d in sess.partition_report().nodes if d.node == node)
    return dict(d.declined)


def _assert_close(a, b, rtol=1e-4, atol=1e-5):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


def test_conv_net_is_one_group_and_matches_cpu(rng):
    model = conv_net(rng)
    sess = epoxy.InferenceSession(model, providers=["openvino", "cpu"])
    report = sess.partition_report()
    assert report.summary() == {"openvino": 5}
    assert list(report.groups) == ["openvino_0"]
    x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    ref = epoxy.InferenceSession(model, providers=["cpu"]).run(None, {"x": x})
    _assert_close(sess.run(None, {"x": x}), ref)


def test_dynamic_batch_passes_through(rng):
    model = conv_net(rng)
    sess = epoxy.InferenceSession(model, providers=["openvino", "cpu"])
    cpu = epoxy.InferenceSession(model, providers=["cpu"])
    for n in (1, 3, 2):
        x = rng.standard_normal((n, 3, 16, 16)).astype(np.float32)
        _assert_close(sess.run(None, {"x": x}), cpu.run(None, {"x": x}))


def test_gated_op_splits_into_openvino_and_cpu(rng):
    # Hardmax taken out of the allowlist: two openvino groups around one cpu node
    model = conv_net(rng, middle="Hardmax")
    allow = dict(support.OPS)
    del allow["Hardmax"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(support, "OPS", allow)
        sess = epoxy.InferenceSession(model, providers=["openvino", "cpu"])
    report = sess.partition_report()
    assert report.summary() == {"openvino": 5, "cpu": 1}
    assert len(report.groups) == 2
    assert "not in the openvino allowlist" in _declines(sess, "middle")["openvino"]
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    ref = epoxy.InferenceSession(model, providers=["cpu"]).run(None, {"x": x})
    _assert_close(sess.run(None, {"x": x}), ref)
    text = report.format()
    assert "openvino_0" in text and "openvino_1" in text


def test_op_openvino_lacks_is_declined_by_its_frontend(rng):
    # CumProd: we let it through our gates here; OpenVINO's frontend has no converter for it
    w = rng.standard_normal((4, 4)).astype(np.float32)
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["a"], name="mm1"),
         helper.make_node("CumProd", ["a", "axis"], ["b"], name="cumprod"),
         helper.make_node("MatMul", ["b", "w"], ["c"], name="mm2"),
         helper.make_node("Tanh", ["c"], ["y"], name="tanh")],
        [("x", TensorProto.FLOAT, [4, 4])], [("y", TensorProto.FLOAT, [4, 4])],
        {"w": w, "axis": np.array(1, np.int64)}, opset=26,
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(support.OPS, "CumProd", 99)
        sess = epoxy.InferenceSession(model, providers=[("openvino", {"min_group_cost": 0}), "cpu"])
    assert "frontend cannot convert CumProd" in _declines(sess, "cumprod")["openvino"]
    assert sess.partition_report().summary() == {"openvino": 3, "cpu": 1}
    x = rng.standard_normal((4, 4)).astype(np.float32)
    ref = epoxy.InferenceSession(model, providers=["cpu"]).run(None, {"x": x})
    _assert_close(sess.run(None, {"x": x}), ref)


def test_opset_newer_than_checked_is_declined(rng):
    model = conv_net(rng)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(support.OPS, "Relu", 6)
        sess = epoxy.InferenceSession(model, providers=["openvino", "cpu"])
    assert "newer than checked" in _declines(sess, "relu1")["openvino"]


def test_known_wrong_case_is_declined(ov_all, rng):
    # Tile with run-time repeats: OpenVINO returns garbage, so it stays on cpu
    model = make_model(
        [helper.make_node("Relu", ["x"], ["a"], name="relu"),
         helper.make_node("Tile", ["a", "reps"], ["y"], name="tile")],
        [("x", TensorProto.FLOAT, [2, 3]), ("reps", TensorProto.INT64, [2])], [("y", TensorProto.FLOAT, [None, None])],
    )
    sess = epoxy.InferenceSession(model, providers=ov_all)
    assert "known wrong" in _declines(sess, "tile")["openvino"]
    x = rng.standard_normal((2, 3)).astype(np.float32)
    (y,) = sess.run(None, {"x": x, "reps": np.array([2, 3], np.int64)})
    np.testing.assert_array_equal(y, np.tile(np.maximum(x, 0), (2, 3)))


def test_unsupported_dtypes_are_declined(ov_all):
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                       [("x", TensorProto.DOUBLE, [3])], [("y", TensorProto.DOUBLE, [3])])
    sess = epoxy.InferenceSession(model, providers=ov_all)
    assert "float64" in _declines(sess, "relu")["openvino"]


def test_small_groups_are_left_to_cpu():
    model = make_model([helper.make_node("Add", ["x", "x"], ["y"], name="add")],
                       [("x", TensorProto.FLOAT, [4])], [("y", TensorProto.FLOAT, [4])])
    sess = epoxy.InferenceSession(model, providers=["openvino", "cpu"])
    assert sess.partition_report().summary() == {"cpu": 1}
    assert "too small" in _declines(sess, "add")["openvino"]
    forced = epoxy.InferenceSession(model, providers=[("openvino", {"min_group_cost": 0}), "cpu"])
    assert forced.partition_report().summary() == {"openvino": 1}
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(forced.run(None, {"x": x})[0], 2 * x)


def test_non_convex_region_is_split(ov_all, rng):
    # a -> b -> d and a -> c(gated) -> d: {a, b, d} would be non-convex
    model = make_model(
        [helper.make_node("Relu", ["x"], ["a"], name="a"),
         helper.make_node("Neg", ["a"], ["b"], name="b"),
         helper.make_node("Hardmax", ["a"], ["c"], name="c"),
         helper.make_node("Add", ["b", "c"], ["y"], name="d")],
        [("x", TensorProto.FLOAT, [3, 5])], [("y", TensorProto.FLOAT, [3, 5])],
    )
    allow = dict(support.OPS)
    del allow["Hardmax"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(support, "OPS", allow)
        sess = epoxy.InferenceSession(model, providers=ov_all)
    groups = sess.partition_report().groups
    assert sorted(map(sorted, groups.values())) == [["a", "b"], ["d"]]
    x = rng.standard_normal((3, 5)).astype(np.float32)
    ref = epoxy.InferenceSession(model, providers=["cpu"]).run(None, {"x": x})
    _assert_close(sess.run(None, {"x": x}), ref)


def test_overridable_initializer(ov_all, rng):
    model = make_model([helper.make_node("Mul", ["x", "s"], ["y"], name="mul")],
                       [("x", TensorProto.FLOAT, [4]), ("s", TensorProto.FLOAT, [4])],
                       [("y", TensorProto.FLOAT, [4])], {"s": np.full(4, 2, np.float32)})
    sess = epoxy.InferenceSession(model, providers=ov_all)
    assert sess.partition_report().summary() == {"openvino": 1}
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], 2 * x)
    np.testing.assert_array_equal(sess.run(None, {"x": x, "s": np.full(4, 3, np.float32)})[0], 3 * x)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], 2 * x)


def test_read_only_and_strided_inputs(ov_all, rng):
    model = conv_net(rng)
    sess = epoxy.InferenceSession(model, providers=ov_all)
    base = rng.standard_normal((2, 3, 16, 32)).astype(np.float32)
    x = base[:, :, :, ::2]  # not contiguous
    ro = np.ascontiguousarray(x)
    ro.setflags(write=False)
    a = sess.run(None, {"x": x})[0]
    b = sess.run(None, {"x": ro})[0]
    np.testing.assert_array_equal(a, b)


def test_multiple_outputs_and_intermediate_output(ov_all, rng):
    model = make_model(
        [helper.make_node("Relu", ["x"], ["a"], name="relu"),
         helper.make_node("Split", ["a"], ["p", "q"], name="split", axis=1, num_outputs=2),
         helper.make_node("Mul", ["p", "q"], ["y"], name="mul")],
        [("x", TensorProto.FLOAT, [2, 4])],
        [("y", TensorProto.FLOAT, [2, 2]), ("a", TensorProto.FLOAT, [2, 4])],
    )
    sess = epoxy.InferenceSession(model, providers=ov_all)
    assert sess.partition_report().summary() == {"openvino": 3}
    x = rng.standard_normal((2, 4)).astype(np.float32)
    ref = epoxy.InferenceSession(model, providers=["cpu"]).run(None, {"x": x})
    _assert_close(sess.run(None, {"x": x}), ref)


def test_control_flow_is_left_to_core(ov_all, rng):
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [3])])
    model = make_model(
        [helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
        [("c", TensorProto.BOOL, []), ("x", TensorProto.FLOAT, [3])], [("y", TensorProto.FLOAT, [3])],
    )
    sess = epoxy.InferenceSession(model, providers=ov_all)
    assert sess.partition_report().summary() == {"core": 1}
    x = rng.standard_normal(3).astype(np.float32)
    np.testing.assert_array_equal(sess.run(None, {"c": np.array(True), "x": x})[0], np.maximum(x, 0))
    np.testing.assert_array_equal(sess.run(None, {"c": np.array(False), "x": x})[0], -x)
