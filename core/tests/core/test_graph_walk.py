"""epoxy.graph.walk visits what onnx_ir's own traversals visit, in the same order."""

from __future__ import annotations

import onnx_ir as ir
from onnx import TensorProto, helper

from epoxy.graph.walk import all_graphs, all_nodes


def _nested_model() -> ir.Model:
    """An If whose then-branch holds a Loop (whose body holds an If with an empty branch),
    beside plain nodes before and after it."""
    empty = helper.make_graph([], "empty", [], [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1])])
    inner_if = helper.make_node("If", ["cond"], ["u"], name="inner_if", then_branch=empty, else_branch=empty)
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_id"), inner_if,
         helper.make_node("Relu", ["u"], ["v"], name="body_relu")],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [1])])
    loop = helper.make_node("Loop", ["n", "cond"], ["w"], name="loop", body=body)
    then = helper.make_graph([loop], "then", [], [helper.make_tensor_value_info("w", TensorProto.FLOAT, [None, 1])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["z"], name="neg")], "else", [],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])])
    nodes = [helper.make_node("Abs", ["x"], ["a"], name="abs"),
             helper.make_node("If", ["cond"], ["y"], name="outer_if", then_branch=then, else_branch=other),
             helper.make_node("Sigmoid", ["a"], ["s"], name="sigmoid")]
    graph = helper.make_graph(nodes, "main", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
                                              helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                                              helper.make_tensor_value_info("n", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, [1])])
    return ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_all_nodes_is_onnx_irs_recursive_order():
    model = _nested_model()
    walked = [n.name for n in all_nodes(model.graph)]
    assert walked == [n.name for n in ir.traversal.RecursiveGraphIterator(model.graph)]
    # helper.make_node writes attributes sorted by name: else_branch comes first
    assert walked == ["abs", "outer_if", "neg", "loop", "body_id", "inner_if", "body_relu", "sigmoid"]


def test_all_graphs_is_model_graphs_empty_ones_included():
    model = _nested_model()
    walked = [g.name for g in all_graphs(model.graph)]
    assert walked == [g.name for g in model.graphs()]
    assert walked == ["main", "else", "then", "body", "empty", "empty"]
