"""Constant nodes lifted while loading (epoxy.load.constant_nodes) give the graph the
optimizer's LiftConstantsPass gives, in subgraphs too; the caller's proto is never edited."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from epoxy.load.loader import load_model
from epoxy.optimize.passes import LiftConstantsPass
from epoxy.optimize.pipeline import constant_lifting_pass


def _const(name: str, array: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array))


def _model() -> onnx.ModelProto:
    branch = helper.make_graph(
        [_const("inner_c", np.array([2.0, 3.0], np.float32)), helper.make_node("Mul", ["x", "inner_c"], ["b_out"])],
        "branch", [], [helper.make_tensor_value_info("b_out", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["o_out"])], "other", [],
                              [helper.make_tensor_value_info("o_out", TensorProto.FLOAT, [2])])
    nodes = [
        _const("t", np.array([1.0, -1.0], np.float32)),
        helper.make_node("Constant", [], ["ints"], value_ints=[4, 5]),  # not a tensor: left to the pass
        _const("out_c", np.array(7, np.int64)),  # a graph output: stays a node
        _const("cond", np.array(True)),
        helper.make_node("Add", ["x", "t"], ["y"]),
        helper.make_node("Concat", ["ints", "ints"], ["z"], axis=0),
        helper.make_node("If", ["cond"], ["w"], then_branch=branch, else_branch=other),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info(n, t, None) for n, t in
         (("y", TensorProto.FLOAT), ("z", TensorProto.INT64), ("out_c", TensorProto.INT64), ("w", TensorProto.FLOAT))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _summary(model: ir.Model) -> tuple:
    def graph_summary(graph: ir.Graph) -> tuple:
        inits = {name: v.const_value.numpy().tolist() for name, v in graph.initializers.items()}
        return [n.op_type for n in graph], inits

    if_node = next(n for n in model.graph if n.op_type == "If")
    return graph_summary(model.graph), graph_summary(if_node.attributes["then_branch"].value)


def test_lifting_while_loading_gives_the_graph_the_pass_gives(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    lifted = load_model(path, lift_constants=True)
    assert lifted.lifted_constants == 3  # t, cond and the branch's inner_c
    by_pass = load_model(path).model
    assert not by_pass.graph.initializers
    LiftConstantsPass(lift_all_constants=False, size_limit=0)(by_pass)
    assert _summary(lifted.model) == _summary(by_pass)
    (main_ops, main_inits), (branch_ops, branch_inits) = _summary(lifted.model)
    assert main_ops == ["Constant", "Constant", "Add", "Concat", "If"]  # ints and out_c stay nodes
    assert set(main_inits) == {"t", "cond"} and branch_inits == {"inner_c": [2.0, 3.0]}
    add = next(n for n in lifted.model.graph if n.op_type == "Add")
    assert add.inputs[1] is lifted.model.graph.initializers["t"]


def test_a_callers_proto_is_never_edited():
    proto = _model()
    before = proto.SerializeToString()
    unowned = load_model(proto, lift_constants=True, infer_shapes=False, check="off")
    assert unowned.lifted_constants == 0  # nothing loading owns to edit: the optimizer's pass lifts them
    inferred = load_model(proto, lift_constants=True)  # inference made a proto of its own: lifted there
    assert inferred.lifted_constants == 3
    assert proto.SerializeToString() == before


def test_lifting_follows_the_optimization_level():
    passes = __import__("epoxy.plugins", fromlist=["default_registry"]).default_registry().passes()
    assert constant_lifting_pass(passes, "basic") == constant_lifting_pass(passes, "all") == "LiftConstantsPass"
    assert constant_lifting_pass(passes, "disable") is None


def test_a_session_reports_the_lift_as_the_pass_it_stands_for(make_registry):
    import epoxy

    proto = helper.make_model(helper.make_graph(
        [_const("t", np.array([1.0, -1.0], np.float32)), helper.make_node("Add", ["x", "t"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]), opset_imports=[helper.make_opsetid("", 17)])
    session = epoxy.InferenceSession(proto.SerializeToString(), providers=["cpu"], registry=make_registry())
    assert session.applied_passes[0] == "LiftConstantsPass"
    assert [n.op_type for n in session._model.graph] == ["Add"]
    np.testing.assert_array_equal(session.run(None, {"x": np.array([3.0, 4.0], np.float32)})[0], [4.0, 3.0])
