"""Providers that break on Loop bodies and If branches (but work on the main graph): the
subgraph falls back to the next provider (cpu) with the reason in the report, as on the
main graph; with ``EPOXY_STRICT_PLUGINS=1`` it is a clear error naming the provider."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import epoxy
from epoxy.contract import Capability, Device, FusedGroup
from epoxy.kit import HostAllocator
from epoxy.plugins import ProviderRegistry
from epoxy.testing import registry_with

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
OPS = {"Neg": np.negative, "Add": np.add, "Mul": np.multiply, "Relu": lambda v: np.maximum(v, 0),
       "Identity": lambda v: v}


def _vi(name, elem=F, shape=(3,)):
    return helper.make_tensor_value_info(name, elem, list(shape))


def _counting_body(prefix: str, acc: str, step: str):
    """Loop body: acc_out = acc_in + step (an outer value); the cond passes through."""
    return helper.make_graph(
        [helper.make_node("Identity", [f"{prefix}_cond_in"], [f"{prefix}_cond_out"], name=f"in_{prefix}_cond"),
         helper.make_node("Add", [f"{prefix}_{acc}_in", step], [f"{prefix}_{acc}_out"], name=f"in_{prefix}_add")],
        f"{prefix}_body",
        [_vi(f"{prefix}_i", I64, ()), _vi(f"{prefix}_cond_in", B, ()), _vi(f"{prefix}_{acc}_in")],
        [_vi(f"{prefix}_cond_out", B, ()), _vi(f"{prefix}_{acc}_out")],
    )


def control_flow_model():
    """xn = Neg(x) (main graph); a Loop adding xn ``trip`` times; an If whose then branch
    runs another Loop (nested) then a Mul, and whose else branch runs a Relu."""
    then_branch = helper.make_graph(
        [helper.make_node("Loop", ["trip", "going", "looped"], ["inner"], name="in_inner_loop",
                          body=_counting_body("inner", "acc2", "xn")),
         helper.make_node("Mul", ["inner", "two"], ["t"], name="in_then_mul")],
        "then", [], [_vi("t")],
    )
    else_branch = helper.make_graph([helper.make_node("Relu", ["looped"], ["e"], name="in_else_relu")],
                                    "else", [], [_vi("e")])
    nodes = [
        helper.make_node("Neg", ["x"], ["xn"], name="neg"),
        helper.make_node(
            "Loop", ["trip", "going", "x"], ["looped"], name="the_loop", body=_counting_body("outer", "acc", "xn")
        ),
        helper.make_node("If", ["cond"], ["y"], name="the_if", then_branch=then_branch, else_branch=else_branch),
    ]
    graph = helper.make_graph(nodes, "main", [_vi("x"), _vi("cond", B, ()), _vi("trip", I64, ())], [_vi("y")],
                              [numpy_helper.from_array(np.full(3, 2.0, np.float32), "two"),
                               numpy_helper.from_array(np.array(True), "going")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class SubgraphBreaker:
    """Works on the main graph; on subgraphs (bodies and branches) fails as ``mode`` says."""

    name = "vendor"

    def __init__(self, mode: str, device: Device) -> None:
        self.mode, self.device = mode, device
        self.allocator = HostAllocator(device)

    def capability(self, graph):
        ours = tuple(n.index for n in graph.nodes if n.op_type in OPS)
        if "x" in graph.inputs:  # the main graph
            return Capability(nodes=ours)
        if self.mode == "capability raises":
            raise RuntimeError("capability exploded on a subgraph")
        if self.mode == "capability returns garbage":
            return {"nodes": "all of them"}
        if self.mode == "compile fails":
            return Capability(groups=(FusedGroup(ours, "body_group"),)) if ours else Capability()
        return Capability(nodes=ours)

    def kernel(self, node):
        if self.mode == "kernel factory raises" and node.name.startswith("in_"):
            raise RuntimeError("no kernel for subgraph nodes today")
        return OPS[node.op_type]

    def compile(self, subgraph):
        raise RuntimeError("vendor compiler crashed on a subgraph")


class BreakerFactory:
    name, vendor, version, sdk_api, priority = "vendor", "tests", "0.1", "1.0", 100

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def devices(self):
        return [Device("vendor", "cpu", 0, "vendor test device")]

    def create(self, device, options):
        return SubgraphBreaker(self.mode, device)


def _registry(mode: str) -> ProviderRegistry:
    import epoxy_ep_cpu.plugin

    return registry_with(epoxy_ep_cpu.plugin, BreakerFactory(mode), plugin_name="vendor")


MODES = {
    "capability raises": "failed in capability(): RuntimeError: capability exploded on a subgraph",
    "capability returns garbage": "capability() returned dict, expected Capability",
    "kernel factory raises": "could not create a kernel for node 'in_",
    "compile fails": "failed to compile group 'body_group'",
}
FEEDS = [{"x": np.array([-1.0, 0.5, 2.0], np.float32), "cond": np.array(c), "trip": np.array(3, np.int64)}
         for c in (True, False)]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_provider_failing_on_subgraphs_is_skipped_there_and_cpu_runs_them(mode):
    model = control_flow_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = epoxy.InferenceSession(model, registry=_registry(mode))
    report = session.partition_report()
    assert {d.node: d.provider for d in report.nodes} == {"neg": "vendor", "the_loop": "core", "the_if": "core"}
    notes = " | ".join(report.notes)
    for where in ("the_loop.body", "the_if.then_branch", "the_if.else_branch"):
        line = next(n for n in report.notes if n.startswith(where))
        assert "provider 'vendor' skipped for this subgraph" in line and MODES[mode] in line, notes
        placement = line.split(";")[0]  # "<where>: 2 on cpu"
        assert "on cpu" in placement and "vendor" not in placement, notes
    assert any(MODES[mode] in str(w.message) for w in caught)
    for feeds in FEEDS:
        want = ReferenceEvaluator(model).run(None, feeds)[0]
        np.testing.assert_allclose(session.run(None, feeds)[0], want, rtol=1e-6)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_provider_failing_on_subgraphs_in_strict_mode_is_a_clear_error(mode, monkeypatch):
    monkeypatch.setenv("EPOXY_STRICT_PLUGINS", "1")
    with pytest.raises(epoxy.ProviderError, match="provider 'vendor'") as info:
        epoxy.InferenceSession(control_flow_model(), registry=_registry(mode))
    assert MODES[mode] in str(info.value)
