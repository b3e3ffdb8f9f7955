"""Constant nodes become initializers: tensors taken as they are, other kinds through
onnx_ir's own conversion, graph outputs left alone."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from epoxy.optimize.passes import LiftConstantsPass


def _model() -> ir.Model:
    nodes = [
        helper.make_node("Constant", [], ["t"], value=numpy_helper.from_array(np.arange(6, dtype=np.float32)
                                                                           .reshape(2, 3))),
        helper.make_node("Constant", [], ["i"], value_ints=[4, 5]),
        helper.make_node("Constant", [], ["out_c"], value=numpy_helper.from_array(np.array(7, np.int64))),
        helper.make_node("Add", ["x", "t"], ["y"]),
        helper.make_node("Concat", ["i", "i"], ["z"], axis=0),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(n, t, None) for n, t in
         (("y", TensorProto.FLOAT), ("z", TensorProto.INT64), ("out_c", TensorProto.INT64))])
    return ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_tensor_constants_are_lifted_with_their_values_and_outputs_stay_nodes() -> None:
    model = _model()
    result = LiftConstantsPass(lift_all_constants=False, size_limit=0)(model)
    assert result.modified
    inits = model.graph.initializers
    assert set(inits) == {"t"}  # value_ints is not a tensor attribute; out_c is a graph output
    np.testing.assert_array_equal(inits["t"].const_value.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    assert [n.op_type for n in model.graph] == ["Constant", "Constant", "Add", "Concat"]
    add = next(n for n in model.graph if n.op_type == "Add")
    assert add.inputs[1] is inits["t"]


def test_other_attribute_kinds_go_through_onnx_ir_when_all_are_lifted() -> None:
    model = _model()
    LiftConstantsPass(lift_all_constants=True, size_limit=0)(model)
    inits = model.graph.initializers
    assert set(inits) == {"t", "i"}
    np.testing.assert_array_equal(inits["i"].const_value.numpy(), [4, 5])


def test_small_tensors_stay_below_the_size_limit() -> None:
    model = _model()
    LiftConstantsPass(lift_all_constants=False, size_limit=10)(model)
    assert not model.graph.initializers
