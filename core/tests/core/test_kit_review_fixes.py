"""Regression tests for what the kit review found (issue #15): decline reasons, rejected
groups, invalid-index messages, report layout, control-flow crediting, session timings."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from fakes import MINI_KERNELS, Factory, fuser_factory
from models import chain, diamond
from onnx import TensorProto, helper

from epoxy import InferenceSession, ProviderError, SessionOptions, UnsupportedOpError
from epoxy.contract import Capability, Device, FusedGroup, GraphSpec, NodeSpec
from epoxy.kit import HostAllocator, KernelProvider
from epoxy.partition.partitioner import NodeDecision
from epoxy.partition.report import PartitionReport


# -- 1. a reason the provider already prefixed with its name is shown with the name once ---------
class _Prefixing(KernelProvider):
    """A kit provider whose reasons name itself, as provider authors often write them."""

    def claims(self, node: NodeSpec) -> str | None:
        if node.op_type == "Add":
            return f"{self.name}: no kernel for Add"
        return super().claims(node)


def _acme() -> Factory:
    return Factory("acme", lambda d, o: _Prefixing("acme", d, MINI_KERNELS, o), 60)


def test_provider_name_is_prefixed_once(make_registry):
    session = InferenceSession(chain(["Add", "Relu"]), providers=["acme", "cpu"], registry=make_registry(_acme()))
    add = next(d for d in session.partition_report().nodes if d.node == "n0_add")
    assert add.declined == [("acme", "no kernel for Add")]
    text = str(session.partition_report())
    assert "acme: no kernel for Add" in text and "acme: acme:" not in text


def test_unclaimed_node_error_prefixes_once(make_registry):
    with pytest.raises(UnsupportedOpError) as info:
        InferenceSession(chain(["Add", "Relu"]), providers=["acme"], registry=make_registry(_acme(), with_cpu=False),
                         sess_options=SessionOptions(disable_fallback=True))
    assert "acme: no kernel for Add" in str(info.value) and "acme: acme:" not in str(info.value)


# -- 2. a rejected group's nodes are declined for that reason only -------------------------------
def test_rejected_group_nodes_are_not_also_unsupported(make_registry):
    registry = make_registry(fuser_factory([["a", "c"]]))
    session = InferenceSession(diamond(), providers=["fuser", "cpu"], registry=registry)
    decisions = {d.node: d for d in session.partition_report().nodes}
    for name in ("a", "c"):
        assert len(decisions[name].declined) == 1, decisions[name].declined
        provider, reason = decisions[name].declined[0]
        assert provider == "fuser" and "not convex" in reason
    # b was never proposed: the generic reason stays
    assert decisions["b"].declined == [("fuser", "not supported by this provider")]


def test_group_overlapping_taken_nodes_is_its_only_reason(make_registry):
    registry = make_registry(fuser_factory([["a", "b"], ["b", "c"]]))
    session = InferenceSession(diamond(), providers=["fuser", "cpu"], registry=registry)
    c = next(d for d in session.partition_report().nodes if d.node == "c")
    assert len(c.declined) == 1 and "nodes already assigned" in c.declined[0][1]


# -- 3. an invalid index is named, with the valid range and the provider ------------------------
@dataclass
class _BadIndices:
    device: Device
    answer: Capability
    name: str = "badidx"

    def __post_init__(self) -> None:
        self.allocator = HostAllocator(self.device)

    def capability(self, graph: GraphSpec) -> Capability:
        return self.answer

    def kernel(self, node: NodeSpec) -> Any:
        raise NotImplementedError

    def compile(self, subgraph: Any) -> Any:
        raise NotImplementedError


@pytest.mark.parametrize("answer, where", [
    (Capability(nodes=(0,) * 150 + (999,)), "node index 999"),
    (Capability(groups=(FusedGroup((1,) * 150 + (999,), "big"),)),
     "node index 999 in group #0 'big'"),
])
def test_invalid_index_message_shows_index_range_and_provider(make_registry, answer: Capability, where: str):
    factory = Factory("badidx", lambda d, o: _BadIndices(d, answer), 60)
    with pytest.raises(ProviderError) as info:
        InferenceSession(chain(["Add", "Relu"]), providers=["badidx"], registry=make_registry(factory, with_cpu=False))
    message = str(info.value)
    assert where in message and "0..1" in message and "'badidx'" in message, message


# -- 4. report columns stay aligned whatever the group labels ----------------------------------
def test_report_columns_align_with_long_group_labels():
    nodes = [
        NodeDecision("n0", "MatMul", "openvino", "openvino_a_very_long_group_label_0", [("cuda", "no")]),
        NodeDecision("n1", "Add", "cpu", None, [("openvino", "declined")]),
        NodeDecision("n2", "SkipSimplifiedLayerNormalization", "cpu", None, []),
    ]
    report = PartitionReport(["openvino", "cpu"], nodes)
    lines = report.format().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("node"))
    rows = lines[header:header + 4]
    why = [row.index(marker) for row, marker in zip(rows, ("why not", "cuda: no", "openvino: declined", "-"))]
    assert len(set(why)) == 1, "\n".join(rows)
    provider = [row.index(marker) for row, marker in zip(rows, ("provider", "openvino [", "cpu", "cpu"))]
    assert len(set(provider)) == 1, "\n".join(rows)


def test_summary_column_aligns_with_long_provider_names():
    nodes = [NodeDecision("a", "Relu", "a_provider_with_a_long_name", None),
             NodeDecision("b", "Relu", "cpu", None)]
    lines = PartitionReport(["a_provider_with_a_long_name", "cpu"], nodes).format(per_node=False).splitlines()
    counts = [line.index("/ 2 nodes") for line in lines if "/ 2 nodes" in line]
    assert len(counts) == 2 and len(set(counts)) == 1, lines


# -- 6. control flow is the core's; its bodies' providers are listed apart ----------------------
def _if_model():  # type: ignore[no-untyped-def]
    vi = helper.make_tensor_value_info
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="then_relu")], "then", [],
                               [vi("t", TensorProto.FLOAT, [3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [],
                               [vi("e", TensorProto.FLOAT, [3])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="the_if")
    graph = helper.make_graph([node], "if", [vi("c", TensorProto.BOOL, []), vi("x", TensorProto.FLOAT, [3])],
                              [vi("y", TensorProto.FLOAT, [3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_control_flow_node_is_credited_to_core_and_bodies_listed_apart(make_registry):
    from fakes import sim_factory

    registry = make_registry(sim_factory(ops=("Relu",)))
    session = InferenceSession(_if_model(), providers=["sim", "cpu"], registry=registry)
    report = session.partition_report()
    (decision,) = report.nodes
    assert decision.provider == "core" and report.summary() == {"core": 1}
    assert decision.bodies == {"then_branch": {"sim": 1}, "else_branch": {"cpu": 1}}
    assert report.to_dict()["nodes"][0]["bodies"] == decision.bodies
    text = report.format()
    assert "then_branch: 1 on sim" in text and "else_branch: 1 on cpu" in text
    x = np.array([-1, 0, 2], np.float32)
    np.testing.assert_array_equal(session.run(None, {"c": np.array(True), "x": x})[0], np.maximum(x, 0))


def test_plain_nodes_have_no_bodies(make_registry):
    session = InferenceSession(chain(["Relu"]), providers=["cpu"], registry=make_registry())
    assert all(d.bodies == {} for d in session.partition_report().nodes)


# -- 7. provider creation has its own timing; "optimize" is the optimizer only ------------------
def test_provider_creation_is_not_timed_as_optimize(make_registry):
    pause = 0.3

    def slow(device: Device, options: Mapping[str, Any]) -> KernelProvider:
        time.sleep(pause)
        return KernelProvider("slow", device, MINI_KERNELS, options)

    registry = make_registry(Factory("slow", slow, 60))
    session = InferenceSession(chain(["Relu"]), providers=["slow", "cpu"], registry=registry)
    assert session.timings["providers"] >= pause
    assert session.timings["optimize"] < pause
    assert list(session.timings) == ["load", "providers", "optimize", "partition", "plan"]
