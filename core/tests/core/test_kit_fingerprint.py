"""epoxy.kit.group_fingerprint: one digest of what a compiled group depends on."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from epoxy.contract import FusedGroup, SubgraphSpec
from epoxy.graph.graph_spec import CoreGraph
from epoxy.kit import boundary, group_fingerprint


def _spec(alpha=0.5, weight=1.0, dims=("n", 4)):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.full(4, weight, np.float32), "w")
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"], name="mul"),
             helper.make_node("LeakyRelu", ["m"], ["y"], name="act", alpha=alpha)]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 17)])
    ir_model = ir.serde.deserialize_model(model)
    graph = CoreGraph(ir_model.graph, ir_model.opset_imports)
    inputs, outputs = boundary(graph, (0, 1))
    return SubgraphSpec(FusedGroup((0, 1), "g0"), graph, tuple(inputs), tuple(outputs))


def test_same_group_same_digest_and_each_dependency_changes_it():
    base = group_fingerprint(_spec())
    assert base == group_fingerprint(_spec()) and len(base) == 64
    assert group_fingerprint(_spec(alpha=0.25)) != base  # an attribute
    assert group_fingerprint(_spec(weight=2.0)) != base  # a constant the nodes read
    assert group_fingerprint(_spec(dims=("n", 5))) != base  # the boundary's types
    assert group_fingerprint(_spec(), salt="other options") != base


def test_known_values_count_as_constants():
    spec = _spec()
    assert group_fingerprint(spec, known=lambda name: None) != group_fingerprint(spec)
    extra = group_fingerprint(spec, known=lambda name: np.ones(2) if name == "x" else spec.graph.constant(name))
    assert extra != group_fingerprint(spec)
