"""The picture's graph model: the partition report joined with the graph it was made from.

The report says where each node went and why earlier providers declined; the graph says
what each node reads and writes. The picture needs both, keyed by node name, as plain
frozen data the layout and the writers can share without touching a session.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..contract import GraphSpec, ValueType
from ..partition.report import PartitionReport
from .errors import PictureError

#: the provider sessions fall back to; a node it runs after others declined is a "fallback"
FALLBACK_PROVIDER = "cpu"


@dataclass(frozen=True)
class ValueInfo:
    """One input or output of a node, as the detail panel shows it."""

    name: str
    dtype: str
    shape: str


@dataclass(frozen=True)
class PictureNode:
    """A node box: what it is, where it ran, and why the providers before that one declined."""

    index: int
    name: str
    op_type: str
    provider: str
    group: str | None
    declined: tuple[tuple[str, str], ...]
    inputs: tuple[ValueInfo, ...]
    outputs: tuple[ValueInfo, ...]
    #: a control-flow node (run by the core): ``(subgraph attribute, "3 on openvino, 1 on cpu")``
    bodies: tuple[tuple[str, str], ...] = ()

    @property
    def fallback(self) -> bool:
        """Run by the fallback provider because a provider listed before it declined."""
        return self.provider == FALLBACK_PROVIDER and bool(self.declined)


@dataclass(frozen=True)
class PictureEdge:
    """Producer -> consumer, with every value passed between the two (one arrow, not one per value)."""

    source: int
    target: int
    values: tuple[str, ...]


@dataclass(frozen=True)
class PictureGroup:
    """A fused / compiled group: one provider ran these nodes as one unit."""

    label: str
    provider: str
    members: tuple[int, ...]


@dataclass(frozen=True)
class PictureIO:
    """A graph input or output, drawn as a small pill (not a node: no provider runs it).
    ``nodes``: the nodes that read the input, or the node that writes the output."""

    value: ValueInfo
    kind: str  # "input" | "output"
    nodes: tuple[int, ...]


@dataclass(frozen=True)
class PartitionPicture:
    """Everything drawn: nodes in graph order, edges, groups, providers in priority order."""

    providers: tuple[str, ...]
    nodes: tuple[PictureNode, ...]
    edges: tuple[PictureEdge, ...]
    groups: tuple[PictureGroup, ...]
    notes: tuple[str, ...] = ()
    io: tuple[PictureIO, ...] = ()

    def io_edges(self) -> list[tuple[int, int]]:
        """``(io index, node index)`` per arrow between a pill and a node (direction by its kind)."""
        return [(i, n) for i, pill in enumerate(self.io) for n in pill.nodes]

    def counts(self) -> dict[str, int]:
        """Node count per provider, providers in priority order then any other (``core``)."""
        counts = {p: 0 for p in self.providers}
        for node in self.nodes:
            counts[node.provider] = counts.get(node.provider, 0) + 1
        return {p: n for p, n in counts.items() if n}


def describe_type(vt: ValueType) -> tuple[str, str]:
    """``(dtype, shape)`` as text: ``("float32", "1x3x224x224")``; ``?`` where unknown."""
    if vt.kind != "tensor":
        inner = f"({describe_type(vt.element)[0]})" if vt.element is not None else ""
        return (f"{vt.kind}{inner}", "")
    dtype = str(vt.dtype) if vt.dtype is not None else "?"
    if vt.shape is None:
        return dtype, "?"
    return dtype, "x".join(_dim(d) for d in vt.shape) or "scalar"


def _dim(d: int | str | None) -> str:
    # shape inference names the dims it cannot tell unk__0, unk__1...: unknown, not symbols
    return "?" if d is None or (isinstance(d, str) and d.startswith("unk__")) else str(d)


def _values(names: Sequence[str], types: Sequence[ValueType]) -> tuple[ValueInfo, ...]:
    return tuple(ValueInfo(n, *describe_type(t)) for n, t in zip(names, types) if n)


def build_picture(report: PartitionReport, graph: GraphSpec) -> PartitionPicture:
    """Join the report's decisions with the graph's nodes. The partitioner writes one
    decision per node in graph order; a mismatch is an error naming the node, since the
    picture would otherwise silently miss or misplace it. Positional, not by name: names
    need not be unique in an ONNX model."""
    specs = list(graph.nodes)
    if len(specs) != len(report.nodes):
        raise PictureError(f"the partition report has {len(report.nodes)} nodes but the graph has {len(specs)}")
    nodes: list[PictureNode] = []
    for spec, decision in zip(specs, report.nodes):
        if decision.node != spec.name:
            raise PictureError(f"node {spec.name!r} ({spec.op_type}) of the graph meets decision {decision.node!r} "
                               "of the partition report at the same position", node=spec.name)
        nodes.append(PictureNode(
            index=len(nodes), name=spec.name, op_type=spec.op_type, provider=decision.provider,
            group=decision.fused_group, declined=tuple((p, r) for p, r in decision.declined),
            inputs=_values(spec.inputs, spec.input_types), outputs=_values(spec.outputs, spec.output_types),
            bodies=tuple((attr, ", ".join(f"{n} on {p}" for p, n in counts.items()) or "no nodes")
                         for attr, counts in decision.bodies.items()),
        ))
    position = {spec.index: i for i, spec in enumerate(specs)}
    edges: dict[tuple[int, int], list[str]] = {}
    for spec in specs:
        for name in spec.inputs:
            source = graph.producer(name) if name else None
            if source is not None and source in position:
                values = edges.setdefault((position[source], position[spec.index]), [])
                if name not in values:
                    values.append(name)
    io = _inputs_and_outputs(graph, specs, position)
    members: dict[str, list[PictureNode]] = {label: [] for label in report.groups}
    for node in nodes:
        if node.group is not None:
            members.setdefault(node.group, []).append(node)
    groups = tuple(PictureGroup(label, group[0].provider, tuple(n.index for n in group))
                   for label, group in members.items() if group)
    return PartitionPicture(
        providers=tuple(report.providers), nodes=tuple(nodes),
        edges=tuple(PictureEdge(s, t, tuple(v)) for (s, t), v in edges.items()),
        groups=groups, notes=tuple(report.notes), io=io,
    )


def _inputs_and_outputs(graph: GraphSpec, specs: Sequence[Any], position: dict[int, int]) -> tuple[PictureIO, ...]:
    """The feeds (initializers listed as inputs are weights, not drawn) and the outputs."""
    readers: dict[str, list[int]] = {}
    for spec in specs:
        for name in spec.inputs:
            if name and position[spec.index] not in readers.setdefault(name, []):
                readers[name].append(position[spec.index])
    pills = [PictureIO(ValueInfo(n, *describe_type(graph.value_type(n))), "input", tuple(readers.get(n, ())))
             for n in graph.inputs if graph.constant(n) is None]
    for name in graph.outputs:
        source = graph.producer(name)
        writer = (position[source],) if source is not None and source in position else ()
        pills.append(PictureIO(ValueInfo(name, *describe_type(graph.value_type(name))), "output", writer))
    return tuple(pills)


def picture_of(session: Any) -> PartitionPicture:
    """The picture of an :class:`epoxy.InferenceSession`'s partition (its optimized graph)."""
    # The session keeps the graph it partitioned privately (``epoxy.aot`` reads it the same way);
    # the report alone lacks edges, shapes and dtypes.
    graph = getattr(session, "_graph", None)
    if graph is None:
        raise PictureError("this session holds no partitioned graph to draw")
    return build_picture(session.partition_report(), graph)
