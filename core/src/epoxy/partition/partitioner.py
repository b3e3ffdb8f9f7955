"""Greedy partitioning of nodes over providers in the user's priority order.

Each provider, highest priority first, is asked for its capability over the whole graph.
It gets every claimed node not yet taken; a fused group is taken whole or not at all, and
only when merging it keeps the graph of execution units acyclic (the group is convex).
Whatever is left goes to the fallback (cpu, last) unless fallback is disabled, in which
case an unclaimed node is an error naming it. Every decision is recorded for the report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral
from typing import cast

from ..contract import Capability, FusedGroup, Provider
from ..errors import ProviderError, UnsupportedOpError
from ..graph.graph_spec import CoreGraph


@dataclass
class Unit:
    """An execution unit: one node on a kernel, or a fused group compiled by a provider."""

    provider: str
    nodes: tuple[int, ...]
    fused: bool
    label: str = ""


@dataclass
class NodeDecision:
    """Where one node went and why the providers before it declined."""

    node: str
    op_type: str
    provider: str
    fused_group: str | None
    declined: list[tuple[str, str]] = field(default_factory=list)
    #: for a control-flow node (run by the core): subgraph attribute -> node count per
    #: provider in that body. The node itself is the core's; these providers ran its bodies.
    bodies: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass
class Partition:
    """Units in execution order plus the per-node decisions."""

    units: list[Unit]
    decisions: list[NodeDecision]


def _short(value: object, limit: int = 80) -> str:
    """A repr short enough for one message line (the offending part is named separately)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _valid_range(n: int) -> str:
    return f"0..{n - 1}" if n else "none"


def _first_bad_index(indices: object, n: int) -> str | None:
    """The first entry of ``indices`` that is not a node index of an ``n``-node graph, as
    text (its repr), or None when all are valid. The message shows this entry in full: a
    truncated repr of the whole collection used to cut it off."""
    if isinstance(indices, (str, bytes)):
        return _short(indices)
    try:
        items = list(indices)  # type: ignore[call-overload]
    except TypeError:
        return f"{_short(indices)} (not a collection of indices)"
    for i in items:
        if not (isinstance(i, Integral) and not isinstance(i, bool) and 0 <= cast(int, i) < n):
            return _short(i)
    return None


def _own_reason(provider_name: str, reason: object) -> str:
    """A decline reason without the provider's name in front: reports and errors print
    ``provider: reason``, so a reason the provider already prefixed (``acme: no kernel``)
    would read ``acme: acme: no kernel``."""
    text = str(reason)
    prefix = f"{provider_name}: "
    while text.startswith(prefix):
        text = text[len(prefix):]
    return text


def _ask(provider_name: str, provider: Provider, graph: CoreGraph) -> Capability:
    try:
        cap = provider.capability(graph)
    except Exception as exc:
        raise ProviderError(
            f"provider {provider_name!r} failed in capability(): {type(exc).__name__}: {exc}",
            provider=provider_name,
        ) from exc
    if not isinstance(cap, Capability):
        raise ProviderError(
            f"provider {provider_name!r} capability() returned {type(cap).__name__}, expected Capability",
            provider=provider_name,
        )
    n = len(graph.nodes)
    bad: tuple[str, str] | None = None  # (what was invalid, which entry and why)
    found = _first_bad_index(cap.nodes, n)
    if found is not None:
        bad = (f"nodes {_short(cap.nodes)}", f"node index {found} is not a node of this graph")
    else:
        for g_index, group in enumerate(cap.groups):
            what = f"groups {_short(cap.groups)}"
            if not isinstance(group, FusedGroup):
                bad = (what, f"group #{g_index} is a {type(group).__name__}, not a FusedGroup")
                break
            found = _first_bad_index(group.nodes, n)
            if found is not None:
                bad = (what, f"node index {found} in group #{g_index} {group.label!r} is not a node of this graph")
                break
            if not tuple(group.nodes):
                bad = (what, f"group #{g_index} {group.label!r} has no nodes")
                break
    if bad is None and not isinstance(cap.declined, Mapping):
        bad = (f"declined {_short(cap.declined)}", "declined must map node indices to reasons")
    if bad is not None:
        raise ProviderError(
            f"provider {provider_name!r} capability() returned invalid {bad[0]}: {bad[1]} "
            f"(valid node indices: {_valid_range(n)}; the graph has {n} nodes)",
            provider=provider_name,
        )
    return cap


class _UnitGraph:
    """Dependency graph between execution units, for convexity (cycle) checks."""

    def __init__(self, graph: CoreGraph) -> None:
        n = len(graph.nodes)
        self.unit_of = list(range(n))  # node -> unit id (initially singleton units)
        self.members: dict[int, set[int]] = {i: {i} for i in range(n)}
        self.succ: list[set[int]] = [set() for _ in range(n)]
        for i in range(n):
            for name in graph.node_inputs(i):
                p = graph.producer(name)
                if p is not None and p != i:
                    self.succ[p].add(i)

    def merge_is_acyclic(self, nodes: Sequence[int]) -> bool:
        """True when contracting ``nodes`` (with the units they are in) keeps a DAG.

        A path that leaves the group and comes back would make the merged unit depend on
        itself; search from the group's outside successors for a way back in, moving
        through whole units (a unit runs as one step).
        """
        group = set().union(*(self.members[self.unit_of[i]] for i in nodes))
        stack = [s for i in group for s in self.succ[i] if s not in group]
        seen_units: set[int] = set()
        while stack:
            unit = self.unit_of[stack.pop()]
            if unit in seen_units:
                continue
            seen_units.add(unit)
            for m in self.members[unit]:
                for s in self.succ[m]:
                    if s in group:
                        return False
                    if self.unit_of[s] not in seen_units:
                        stack.append(s)
        return True

    def merge(self, nodes: Sequence[int]) -> None:
        units = {self.unit_of[i] for i in nodes}
        uid = min(units)
        merged = set().union(*(self.members.pop(u) for u in units))
        for i in merged:
            self.unit_of[i] = uid
        self.members[uid] = merged


def partition(
    graph: CoreGraph,
    providers: Sequence[tuple[str, Provider]],
    *,
    fallback: str | None,
) -> Partition:
    """Assign every node to a provider; see the module docstring for the rules."""
    n = len(graph.nodes)
    owner: list[str | None] = [None] * n
    group_label: list[str | None] = [None] * n
    declined: list[list[tuple[str, str]]] = [[] for _ in range(n)]
    fused_groups: list[tuple[str, FusedGroup]] = []
    units_graph = _UnitGraph(graph)

    for name, provider in providers:
        cap = _ask(name, provider, graph)
        quiet = bool(getattr(provider, "quiet_declines", False))
        claimed_single = set(cap.nodes)
        claimed_in_group: set[int] = set()
        # nodes of groups this provider proposed but the partitioner refused: their decline
        # is that refusal, not also "not supported" (the provider does support them)
        in_refused_group: set[int] = set()
        for g_index, group in enumerate(cap.groups):
            nodes = tuple(sorted(set(group.nodes)))
            label = group.label or f"{name}_group_{g_index}"
            taken = [i for i in nodes if owner[i] is not None]
            if taken:
                for i in nodes:
                    if owner[i] is None:
                        declined[i].append(
                            (name, f"group {label} not taken: nodes already assigned ({graph.nodes[taken[0]].name})")
                        )
                in_refused_group.update(nodes)
                continue
            if not units_graph.merge_is_acyclic(nodes):
                for i in nodes:
                    declined[i].append((name, f"group {label} not taken: fusing it would create a cycle (not convex)"))
                in_refused_group.update(nodes)
                continue
            units_graph.merge(nodes)
            fused_groups.append((name, FusedGroup(nodes, label)))
            for i in nodes:
                owner[i] = name
                group_label[i] = label
            claimed_in_group.update(nodes)
        for i in range(n):
            if owner[i] is not None:
                continue
            if i in claimed_single:
                owner[i] = name
            elif i not in claimed_in_group and i not in in_refused_group:
                if quiet and i not in cap.declined:
                    continue  # an internal provider (core control flow) only reports real declines
                declined[i].append((name, _own_reason(name, cap.declined.get(i, "not supported by this provider"))))

    unclaimed = [i for i in range(n) if owner[i] is None]
    if unclaimed:
        node = graph.nodes[unclaimed[0]]
        reasons = "; ".join(f"{p}: {r}" for p, r in declined[unclaimed[0]]) or "no providers"
        raise UnsupportedOpError(
            f"no provider can run node {node.name!r} ({node.qualified_op}): {reasons}"
            + ("" if fallback else " (fallback to cpu is disabled or cpu is not installed)"),
            node=node.name, op_type=node.op_type, domain=node.domain, opset=node.opset, unclaimed=tuple(unclaimed),
        )

    units = _order_units(graph, owner, fused_groups)
    by_name = dict(providers)
    decisions = [
        NodeDecision(spec.name, spec.op_type, owner[i] or "", group_label[i], declined[i],
                     _bodies(by_name.get(owner[i] or ""), i))
        for i, spec in enumerate(graph.nodes)
    ]
    return Partition(units, decisions)


def _bodies(provider: Provider | None, index: int) -> dict[str, dict[str, int]]:
    """Where the subgraphs of node ``index`` ran, from a provider that runs subgraphs (the
    core's control flow: ``body_placement``); empty for every other node. Kept apart from
    the node's own provider so a body's providers are never credited with the node."""
    placement = getattr(provider, "body_placement", None)
    if placement is None:
        return {}
    return {attr: dict(counts) for attr, counts in placement(index).items()}


def _order_units(graph: CoreGraph, owner: list[str | None], groups: list[tuple[str, FusedGroup]]) -> list[Unit]:
    """Topologically order units (a fused group runs where all its inputs are ready)."""
    n = len(graph.nodes)
    unit_index = [-1] * n
    units: list[Unit] = []
    for provider, group in groups:
        for i in group.nodes:
            unit_index[i] = len(units)
        units.append(Unit(provider, group.nodes, True, group.label))
    for i in range(n):
        if unit_index[i] < 0:
            unit_index[i] = len(units)
            units.append(Unit(owner[i] or "", (i,), False, graph.nodes[i].name))
    deps: list[set[int]] = [set() for _ in units]
    for i in range(n):
        for name in graph.node_inputs(i):
            p = graph.producer(name)
            if p is not None and unit_index[p] != unit_index[i]:
                deps[unit_index[i]].add(unit_index[p])
    # Kahn's algorithm, keeping original node order among ready units for stable plans
    indegree = [len(d) for d in deps]
    users: list[list[int]] = [[] for _ in units]
    for u, ds in enumerate(deps):
        for d in ds:
            users[d].append(u)
    import heapq

    ready = [(min(units[u].nodes), u) for u in range(len(units)) if indegree[u] == 0]
    heapq.heapify(ready)
    ordered: list[Unit] = []
    while ready:
        _, u = heapq.heappop(ready)
        ordered.append(units[u])
        for v in users[u]:
            indegree[v] -= 1
            if indegree[v] == 0:
                heapq.heappush(ready, (min(units[v].nodes), v))
    if len(ordered) != len(units):
        raise ProviderError("partition produced a cyclic unit graph (internal error)")
    return ordered
