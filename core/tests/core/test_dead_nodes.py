"""DeadNodeRemovalPass does what onnx_ir's RemoveUnusedNodesPass does (the oracle): the
same graph, bit for bit, on a model built to hold every case that pass handles and on
real models before and after the optimizer's folds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_ir.passes.common import RemoveUnusedNodesPass

from epoxy.optimize.passes import ConstantFoldingPass, ConvBatchNormFoldPass, DeadNodeRemovalPass

F = TensorProto.FLOAT


def _vi(name: str, shape, elem: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _every_case() -> onnx.ModelProto:
    """Dead chains, unused optional outputs (Dropout, LayerNormalization, BatchNormalization
    in inference mode, explicit and implied, and one that may train), trailing empty inputs,
    a dead node inside an If branch, unused initializers, a dead node in a function body,
    custom-domain nodes dead and alive."""
    branch_dead = helper.make_node("Neg", ["x"], ["branch_unused"], name="branch_dead")
    then = helper.make_graph([branch_dead, helper.make_node("Abs", ["x"], ["t"], name="then_abs")], "then", [],
                             [_vi("t", [2, 3])])
    other = helper.make_graph([helper.make_node("Relu", ["x"], ["e"], name="else_relu")], "else", [],
                              [_vi("e", [2, 3])])
    nodes = [
        helper.make_node("Relu", ["x"], ["dead1"], name="dead_relu"),
        helper.make_node("Neg", ["dead1"], ["dead2"], name="dead_neg"),
        helper.make_node("Dropout", ["x"], ["drop", "mask"], name="dropout"),
        helper.make_node("LayerNormalization", ["drop", "scale"], ["ln", "mean", "inv"], name="ln", axis=-1),
        helper.make_node("BatchNormalization", ["bn_in", "s", "b", "m", "v"], ["bn0", "rm0", "rv0"],
                         name="bn_explicit", training_mode=0),
        helper.make_node("BatchNormalization", ["bn_in", "s", "b", "m", "v"], ["bn1"], name="bn_implied"),
        helper.make_node("BatchNormalization", ["bn_in", "s", "b", "m", "v"], ["bn2", "rm2", "rv2"],
                         name="bn_training", training_mode=1),
        helper.make_node("Clip", ["ln", "", ""], ["clip"], name="clip"),
        helper.make_node("If", ["cond"], ["branch"], name="if", then_branch=then, else_branch=other),
        helper.make_node("Custom", ["x"], ["custom_dead"], name="custom_dead", domain="local"),
        helper.make_node("Custom", ["x"], ["custom"], name="custom_alive", domain="local"),
        helper.make_node("Fn", ["x"], ["fn"], name="call", domain="fns"),
    ]
    body = [helper.make_node("Relu", ["a"], ["unused_in_body"], name="body_dead"),
            helper.make_node("Abs", ["a"], ["out"], name="body_abs")]
    function = helper.make_function("fns", "Fn", ["a"], ["out"], body, [helper.make_opsetid("", 17)])
    c = np.ones(3, np.float32)
    inits = [numpy_helper.from_array(c, n) for n in ("scale", "s", "b", "m", "v", "unused_weight")]
    graph = helper.make_graph(
        nodes, "every_case", [_vi("x", [2, 3]), _vi("bn_in", [2, 3]), _vi("cond", [], TensorProto.BOOL)],
        [_vi(n, None) for n in ("clip", "bn0", "bn1", "bn2", "branch", "custom", "fn")], initializer=inits)
    return helper.make_model(graph, functions=[function], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("local", 1), helper.make_opsetid("fns", 1)])


def _light(name: str) -> onnx.ModelProto:
    return onnx.load(str(Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"))


def _after(proto: onnx.ModelProto, passes: list) -> tuple[bytes, bool]:
    model = ir.serde.deserialize_model(proto)
    modified = False
    for p in passes:
        modified = p(model).modified
    return ir.serde.serialize_model(model).SerializeToString(deterministic=True), modified


@pytest.mark.parametrize("make, folds", [
    (_every_case, []),
    (lambda: _light("squeezenet"), []),
    (lambda: _light("squeezenet"), [ConstantFoldingPass]),
    (lambda: _light("shufflenet"), [ConstantFoldingPass, ConvBatchNormFoldPass]),
])
def test_the_same_graph_as_onnx_irs_pass(make, folds):
    proto = make()
    ours, ours_modified = _after(proto, [f() for f in folds] + [DeadNodeRemovalPass()])
    theirs, theirs_modified = _after(proto, [f() for f in folds] + [RemoveUnusedNodesPass()])
    assert ours == theirs
    assert ours_modified == theirs_modified


def test_what_the_case_model_loses():
    model = ir.serde.deserialize_model(_every_case())
    assert DeadNodeRemovalPass()(model).modified
    names = {n.name: n for n in model.graph}
    assert "dead_relu" not in names and "dead_neg" not in names and "custom_dead" not in names
    assert [o.name for o in names["dropout"].outputs] == ["drop"]
    assert [o.name for o in names["ln"].outputs] == ["ln"]
    explicit = names["bn_explicit"]
    assert [o.name for o in explicit.outputs] == ["bn0"] and "training_mode" not in explicit.attributes
    assert [o.name for o in names["bn_training"].outputs] == ["bn2", "rm2", "rv2"]
    assert len(names["clip"].inputs) == 1
    assert [n.name for n in names["if"].attributes["then_branch"].value] == ["then_abs"]
    assert "unused_weight" not in model.graph.initializers
    assert [n.name for n in next(iter(model.functions.values()))] == ["body_abs"]
    assert not DeadNodeRemovalPass()(model).modified
