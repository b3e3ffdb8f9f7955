"""Capability analysis: which nodes run on the GPU, which on the host, which are fused.

Pure Python over the :class:`~epoxy.contract.GraphSpec` (no CuPy), so it is tested on
machines without a GPU.

Host values (the shape-tensor decision). ``Shape`` and ``Size`` only read ``.shape``, so
they never need the device; their int64 outputs are kept as host numpy arrays, and so are
the outputs of shape arithmetic over them (``Gather``/``Concat``/``Unsqueeze``/``Slice``/
``Cast``/``Add``... on integer tensors whose inputs are all host values or constants).
Those nodes are claimed by this provider but run on the host with numpy ("host mode"): a
``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` chain costs no transfer and no
synchronization, and ``Reshape`` reads its shape input directly. The allocator returns
such host values unchanged when the core asks for them on the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from epoxy.contract import GraphSpec, NodeSpec
from epoxy.kit.elementwise import elementwise_groups

from .kernels.elementwise import fusable
from .ops_table import B, I, OpDef, decline_reason, dtype_name, load


@dataclass
class NodePlan:
    node: NodeSpec
    opdef: OpDef
    host_mode: bool
    consts: dict[int, np.ndarray]


@dataclass
class Analysis:
    claimed: dict[int, NodePlan] = field(default_factory=dict)
    declined: dict[int, str] = field(default_factory=dict)
    host_values: set[str] = field(default_factory=set)
    groups: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)  # (kind, nodes)


def constants_of(graph: GraphSpec, node: NodeSpec) -> dict[int, np.ndarray]:
    out = {}
    for i, name in enumerate(node.inputs):
        if name and name not in graph.inputs:  # an initializer a feed may replace is no constant
            value = graph.constant(name)
            if value is not None:
                out[i] = value
    return out


FOLD_LIMIT = 16 << 20  # elements: larger ConstantOfShape outputs are not materialized on the host


class StaticView:
    """A GraphSpec view where ``constant()`` also answers for ``ConstantOfShape`` outputs
    whose shape is a constant (the light_* models build every weight that way), so
    Conv+BatchNorm folding and constant parameters see them. Values are built on demand."""

    def __init__(self, graph: GraphSpec) -> None:
        self._g = graph
        self.nodes = graph.nodes
        self.inputs = graph.inputs
        self.outputs = graph.outputs
        self.opsets = graph.opsets
        self._cache: dict[str, np.ndarray | None] = {}

    def constant(self, name: str) -> np.ndarray | None:
        value = self._g.constant(name)
        if value is not None or not name:
            return value
        if name not in self._cache:
            self._cache[name] = None
            p = self._g.producer(name)
            node = self._g.nodes[p] if p is not None else None
            if node is not None and node.op_type == "ConstantOfShape" and node.inputs and node.inputs[0]:
                shape = self._g.constant(node.inputs[0])
                if shape is not None and int(np.prod(shape, dtype=np.int64)) <= FOLD_LIMIT:
                    v = node.attr("value")
                    fill = np.zeros(1, np.float32) if v is None else np.asarray(v).reshape(-1)
                    self._cache[name] = np.full(tuple(int(d) for d in shape), fill[0], dtype=fill.dtype)
        return self._cache[name]

    def value_type(self, name: str) -> Any:
        return self._g.value_type(name)

    def producer(self, name: str) -> Any:
        return self._g.producer(name)

    def consumers(self, name: str) -> Any:
        return self._g.consumers(name)

    def to_model(self, node_indices: Any) -> Any:
        return self._g.to_model(node_indices)


def analyze(graph: GraphSpec) -> Analysis:
    """Claimed nodes (device or host mode) and decline reasons; no groups yet."""
    load()
    result = Analysis()
    for node in graph.nodes:
        reason = decline_reason(node)
        if reason:
            result.declined[node.index] = reason
            continue
        from .ops_table import OPS

        opdef = OPS[node.op_type]
        consts = constants_of(graph, node)
        host = False
        if opdef.host_capable:
            out_dts = [dtype_name(t.dtype) for t, o in zip(node.output_types, node.outputs) if o]
            if out_dts and all(d in I | B for d in out_dts):
                host = all(
                    i in consts or i in opdef.raw_inputs or name in result.host_values
                    for i, name in enumerate(node.inputs) if name
                )
        result.claimed[node.index] = NodePlan(node, opdef, host, consts)
        if host:
            result.host_values.update(o for o in node.outputs if o)
    return result


def _single_consumer(graph: GraphSpec, name: str, outputs: set[str]) -> int | None:
    users = list(graph.consumers(name))
    if len(users) != 1 or name in outputs:
        return None
    return users[0]


def find_groups(
    graph: GraphSpec, analysis: Analysis, taken: set[int] | None = None
) -> list[tuple[str, tuple[int, ...]]]:
    """Conv(+BatchNorm)(+Relu) groups and fused elementwise groups among claimed device nodes.

    Every group has one output: all other values its nodes produce are read only inside
    the group (and are not graph outputs), which makes it convex by construction.
    """
    taken = set() if taken is None else set(taken)
    outputs = set(graph.outputs)
    device = {i: p for i, p in analysis.claimed.items() if not p.host_mode}
    groups: list[tuple[str, tuple[int, ...]]] = []
    # Conv [+ BatchNormalization] [+ Relu]
    for i, plan in sorted(device.items()):
        node = plan.node
        if node.op_type != "Conv" or i in taken or 1 not in plan.consts:
            continue
        members = [i]
        cur = node
        nxt = _single_consumer(graph, cur.outputs[0], outputs)
        if nxt is not None and nxt in device and nxt not in taken and device[nxt].node.op_type == "BatchNormalization" \
                and all(k in device[nxt].consts for k in (1, 2, 3, 4)) and device[nxt].node.inputs[0] == cur.outputs[0]:
            members.append(nxt)
            cur = device[nxt].node
            nxt = _single_consumer(graph, cur.outputs[0], outputs)
        if nxt is not None and nxt in device and nxt not in taken and device[nxt].node.op_type == "Relu":
            members.append(nxt)
        if len(members) > 1:
            groups.append(("conv", tuple(members)))
            taken.update(members)
    # elementwise: the kit's single-output groups among the claimed device nodes
    ew = {i for i, p in device.items() if i not in taken and fusable(p.node, p.consts)}
    for ew_group in elementwise_groups(graph, lambda n: n.index in ew, taken):
        groups.append(("ew", ew_group))
        taken.update(ew_group)
    return groups


def find_regions(graph: GraphSpec, claimed: Sequence[int]) -> list[tuple[int, ...]]:
    """Convex regions of claimed nodes, for CUDA-graph capture.

    A claimed node's level is the largest number of unclaimed nodes on any path reaching
    it; claimed nodes of one level form a convex set (a path that leaves through an
    unclaimed node comes back at a higher level).
    """
    mine = set(claimed)
    level: dict[int, int] = {}
    for node in graph.nodes:
        lv = 0
        for name in node.inputs:
            p = graph.producer(name) if name else None
            if p is None:
                continue
            lv = max(lv, level[p] + (0 if p in mine else 1))
        level[node.index] = lv
    regions: dict[int, list[int]] = {}
    for i in sorted(mine):
        regions.setdefault(level[i], []).append(i)
    return [tuple(v) for _, v in sorted(regions.items())]


def describe(analysis: Analysis) -> dict[str, Any]:
    """Counts for tests and debugging."""
    return {
        "device": sum(1 for p in analysis.claimed.values() if not p.host_mode),
        "host": sum(1 for p in analysis.claimed.values() if p.host_mode),
        "declined": len(analysis.declined),
        "groups": [(k, len(n)) for k, n in analysis.groups],
    }
