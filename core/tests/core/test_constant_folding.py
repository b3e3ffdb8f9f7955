"""Nodes whose inputs are all constants run once at session creation (unless disabled)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from epoxy import InferenceSession, SessionOptions


def _model(with_default_input: bool = False):
    inits = [numpy_helper.from_array(np.full((2, 3), 2, np.float32), "c1"),
             numpy_helper.from_array(np.full((2, 3), 3, np.float32), "c2")]
    nodes = [
        helper.make_node("Mul", ["c1", "c2"], ["w"], name="weights"),  # constant: folded
        helper.make_node("Neg", ["w"], ["nw"], name="neg_weights"),    # constant chain: folded
        helper.make_node("Add", ["x", "nw"], ["y"], name="add"),       # reads a feed: runs
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    if with_default_input:  # c1 is also a graph input: a feed may override it, so no folding
        inputs.append(helper.make_tensor_value_info("c1", TensorProto.FLOAT, [2, 3]))
    graph = helper.make_graph(
        nodes, "fold", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_constant_chain_is_folded(make_registry):
    session = InferenceSession(_model(), providers=["cpu"], registry=make_registry())
    assert [s.label for s in session._plan.steps] == ["add"]
    assert "constant-folded 2 node(s)" in " ".join(session.partition_report().notes)
    (y,) = session.run(None, {"x": np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(y, np.full((2, 3), -5, np.float32))


def test_folding_disabled_with_optimizations(make_registry):
    session = InferenceSession(_model(), providers=["cpu"], registry=make_registry(),
                               sess_options=SessionOptions(graph_optimization_level="disable"))
    assert [s.label for s in session._plan.steps] == ["weights", "neg_weights", "add"]


def test_overridable_initializer_is_not_folded(make_registry):
    session = InferenceSession(_model(with_default_input=True), providers=["cpu"], registry=make_registry())
    assert [s.label for s in session._plan.steps] == ["weights", "neg_weights", "add"]
    x = np.ones((2, 3), np.float32)
    (default,) = session.run(None, {"x": x})
    (overridden,) = session.run(None, {"x": x, "c1": np.zeros((2, 3), np.float32)})
    np.testing.assert_array_equal(default, np.full((2, 3), -5, np.float32))
    np.testing.assert_array_equal(overridden, np.ones((2, 3), np.float32))
