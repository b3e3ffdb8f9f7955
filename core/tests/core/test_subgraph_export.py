"""Exported node groups (what compile-based providers get) are valid ONNX models even when
optimizer passes fused nodes newer than the model's opset (Gelu 20, LayerNormalization 17
in an opset-13 model): onnx.checker accepts them and they compute what the model does."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import pytest
from fakes import Factory
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from epoxy import InferenceSession, SessionOptions
from epoxy.contract import Capability, Device, FusedGroup, GraphSpec, SubgraphSpec
from epoxy.graph.export_opsets import CONVERTED_PREFIX

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


@dataclass
class ExportingProvider:
    """Claims one group per set of op types in ``groups`` (one group of every node when
    None); compiling checks the exported model with onnx.checker and runs it with
    onnx.reference."""

    device: Device
    groups: Sequence[frozenset[str]] | None = None
    name: str = "exporter"
    exported: list[onnx.ModelProto] = field(default_factory=list)

    def __post_init__(self) -> None:
        from epoxy.kit import HostAllocator

        self.allocator = HostAllocator(self.device)

    def capability(self, graph: GraphSpec) -> Capability:
        if self.groups is None:
            return Capability(groups=(FusedGroup(tuple(range(len(graph.nodes))), "all"),))
        groups = [tuple(n.index for n in graph.nodes if n.op_type in ops) for ops in self.groups]
        return Capability(groups=tuple(FusedGroup(g, f"g{k}") for k, g in enumerate(groups) if g))

    def kernel(self, node: Any) -> Any:
        raise NotImplementedError

    def compile(self, subgraph: SubgraphSpec) -> Any:
        proto = subgraph.graph.to_model(subgraph.group.nodes)
        onnx.checker.check_model(proto, full_check=True)
        self.exported.append(proto)
        evaluator = ReferenceEvaluator(proto)
        names = [v.name for v in proto.graph.input]

        def run(*args: Any) -> tuple[Any, ...]:
            feeds = dict(zip(subgraph.inputs, args))
            return tuple(evaluator.run(list(subgraph.outputs), {n: feeds[n] for n in names}))

        return run


def _session(model: onnx.ModelProto, make_registry: Any, level: str,
             groups: Sequence[Sequence[str]] | None = None):
    made: list[ExportingProvider] = []

    def make(device: Device, options: Any) -> ExportingProvider:
        made.append(ExportingProvider(device, None if groups is None else [frozenset(g) for g in groups]))
        return made[-1]

    registry = make_registry(Factory("exporter", make, 90))
    session = InferenceSession(model, providers=["exporter"], registry=registry,
                               sess_options=SessionOptions(graph_optimization_level=level))
    return session, made[-1]


def _c(name: str, value: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def transformer_block(opset: int = 13) -> onnx.ModelProto:
    """MatMul -> GELU (erf pattern) -> LayerNorm pattern -> ReduceMean(axes attribute).

    ReduceMean-13 takes ``axes`` as an attribute; from opset 18 as an input. A value is
    named like the converter's renamed values to check names stay unique."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Div", ["h", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["h", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["g"], name="gelu_out"),
        helper.make_node("ReduceMean", ["g"], ["mean"], axes=[-1]), helper.make_node("Sub", ["g", "mean"], ["dev"]),
        helper.make_node("Pow", ["dev", "two"], ["sq"]), helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["std"]),
        helper.make_node("Div", ["dev", "std"], ["norm"]), helper.make_node("Mul", ["norm", "gamma"], ["scaled"]),
        helper.make_node("Add", ["scaled", "beta"], [f"{CONVERTED_PREFIX}0"], name="ln_out"),
        helper.make_node("ReduceMean", [f"{CONVERTED_PREFIX}0"], ["y"], axes=[-1], keepdims=1, name="pool"),
    ]
    inits = [numpy_helper.from_array(RNG.standard_normal((4, 8)).astype(np.float32), "w"),
             _c("sqrt2", math.sqrt(2.0)), _c("one", 1.0), _c("half", 0.5), _c("two", 2.0), _c("eps", 1e-5),
             _c("gamma", RNG.standard_normal(8)), _c("beta", RNG.standard_normal(8))]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", F, [3, 4])],
                              [helper.make_tensor_value_info("y", F, [3, 1])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


X = RNG.standard_normal((3, 4)).astype(np.float32)


def _opset(proto: onnx.ModelProto) -> int:
    return {o.domain: o.version for o in proto.opset_import}[""]


def test_group_with_fused_newer_ops_is_exported_at_their_opset(make_registry):
    model = transformer_block()
    session, provider = _session(model, make_registry, "extended")
    (proto,) = provider.exported  # onnx.checker already accepted it
    ops = [n.op_type for n in proto.graph.node]
    assert {"Gelu", "LayerNormalization"} <= set(ops)
    assert _opset(proto) == 20
    # ReduceMean-13 (axes attribute) was rewritten for opset 20 (axes input)
    (pool,) = [n for n in proto.graph.node if n.name == "pool"]
    assert len(pool.input) == 2 and not [a for a in pool.attribute if a.name == "axes"]
    values = [o for n in proto.graph.node for o in n.output]
    assert len(values) == len(set(values))
    want = ReferenceEvaluator(model).run(None, {"x": X})[0]
    np.testing.assert_allclose(session.run(None, {"x": X})[0], want, rtol=1e-5, atol=1e-6)


def test_each_group_imports_the_versions_its_own_nodes_need(make_registry):
    model = transformer_block()
    session, provider = _session(model, make_registry, "extended",
                                 groups=[("Gelu", "LayerNormalization"), ("ReduceMean",)])
    fused, pool = provider.exported
    assert [n.op_type for n in fused.graph.node] == ["Gelu", "LayerNormalization"] and _opset(fused) == 20
    assert [n.op_type for n in pool.graph.node] == ["ReduceMean"] and _opset(pool) == 13
    want = ReferenceEvaluator(model).run(None, {"x": X})[0]
    np.testing.assert_allclose(session.run(None, {"x": X})[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [13, 17])
def test_single_version_group_is_exported_as_written(make_registry, opset):
    model = transformer_block(opset)
    _, provider = _session(model, make_registry, "disable")
    (proto,) = provider.exported
    assert _opset(proto) == opset
    assert [(n.op_type, list(n.input)) for n in proto.graph.node] == [
        (n.op_type, list(n.input)) for n in model.graph.node
    ]
