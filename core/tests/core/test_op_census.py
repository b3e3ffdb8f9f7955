"""The optimizer's op census (epoxy.kit.passes.OpCensus): a rewrite pass whose ``needs`` the
graph cannot meet is skipped without walking it, a pass that makes the op another pass needs
makes that one run, and outside the optimizer every pass walks as before."""

from __future__ import annotations

import onnx_ir as ir
from onnx import TensorProto, helper

from epoxy.kit.passes import Namer, RewritePass, graph_nodes, is_op, make_node, replace
from epoxy.optimize.pipeline import PassRegistration, optimize


def _model() -> ir.Model:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


class _Rename(RewritePass):
    """``source`` -> ``target`` (same inputs); records how often it walked the graph."""

    max_sweeps = 1

    def __init__(self, source: str, target: str, needs: tuple[frozenset[str], ...]) -> None:
        super().__init__()
        self.source, self.target, self.needs, self.walks = source, target, needs, 0

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        self.walks += 1
        count = 0
        for node in graph_nodes(graph):
            if is_op(node, self.source):
                new = make_node(namer, self.target, list(node.inputs), name=node.name or self.target)
                replace(graph, [node], [new], [node.outputs[0]], [new.outputs[0]])
                count += 1
        return count


def _ops(model: ir.Model) -> list[str]:
    return [node.op_type for node in model.graph]


def test_a_pass_whose_op_is_absent_does_not_walk() -> None:
    model = _model()
    absent = _Rename("Softmax", "Exp", (frozenset({"Softmax"}),))
    present = _Rename("Relu", "Abs", (frozenset({"Relu"}),))
    both_groups = _Rename("Neg", "Sqrt", (frozenset({"Neg"}), frozenset({"MatMul"})))  # MatMul missing
    changed = optimize(model, [PassRegistration(p) for p in (absent, present, both_groups)], "basic", ["cpu"])
    assert (absent.walks, present.walks, both_groups.walks) == (0, 1, 0)
    assert changed == ["_Rename"] and _ops(model) == ["Abs", "Neg"]


def test_an_op_a_pass_makes_wakes_the_pass_that_needs_it() -> None:
    model = _model()
    first = _Rename("Relu", "Softmax", (frozenset({"Relu"}),))  # makes the Softmax the next one needs
    second = _Rename("Softmax", "Exp", (frozenset({"Softmax"}),))
    optimize(model, [PassRegistration(first), PassRegistration(second)], "basic", ["cpu"])
    assert second.walks == 1 and _ops(model) == ["Exp", "Neg"]


def test_outside_the_optimizer_every_pass_walks() -> None:
    model = _model()
    absent = _Rename("Softmax", "Exp", (frozenset({"Softmax"}),))
    assert not absent(model).modified
    assert absent.walks == 1


class _Both(ir.passes.InPlacePass):
    """Two rewrite passes run one after the other inside one registered pass (as ep-cpu's
    CpuFusionPass runs its steps)."""

    def __init__(self, *steps: RewritePass) -> None:
        super().__init__()
        self.steps = steps

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for step in self.steps:
            modified = step(model).modified or modified
        return ir.passes.PassResult(model, modified=modified)


def test_inside_a_composite_pass_a_change_wakes_the_next_step() -> None:
    model = _model()
    second = _Rename("Softmax", "Exp", (frozenset({"Softmax"}),))
    warm = _Rename("Neg", "Neg", (frozenset({"Neg"}),))  # a no-op rename that takes the census first
    composite = _Both(warm, _Rename("Relu", "Softmax", (frozenset({"Relu"}),)), second)
    optimize(model, [PassRegistration(composite)], "basic", ["cpu"])
    assert second.walks == 1 and _ops(model) == ["Exp", "Neg"]
