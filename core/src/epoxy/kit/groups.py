"""Shared graph helpers for compiling providers: group boundaries and convex node groups.

A compiling provider claims nodes as :class:`~epoxy.contract.FusedGroup` s; the core
contracts each group into one step, so a group must be *convex* (no path leaves it and
comes back) and the groups together must keep the graph acyclic. :func:`convex_groups`
builds maximal such groups from the nodes a provider supports; :func:`boundary` says what a
group reads and what it must hand out, the same way the core computes it for ``compile``.

Nodes are visited in topological order; a supported node joins the groups of its supported
producers when the union stays convex, checked with ancestor/descendant bitsets (Python
ints). A final pass contracts the groups one by one, largest first, and drops any whose
contraction would close a cycle with groups taken before (two groups can each be convex and
still depend on each other).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..contract import GraphSpec
from .ordering import stable_topological_order


def dependencies(graph: GraphSpec) -> tuple[list[set[int]], list[set[int]]]:
    """(predecessors, successors) of every node, through :meth:`GraphSpec.node_inputs`
    (so a control-flow node depends on what its bodies read from outside)."""
    n = len(graph.nodes)
    preds: list[set[int]] = [set() for _ in range(n)]
    succs: list[set[int]] = [set() for _ in range(n)]
    for i in range(n):
        for name in graph.node_inputs(i):
            p = graph.producer(name)
            if p is not None and p != i:
                preds[i].add(p)
                succs[p].add(i)
    return preds, succs


def boundary(graph: GraphSpec, node_indices: Sequence[int]) -> tuple[list[str], list[str]]:
    """(inputs, outputs) of a node group: the values it reads from outside (in node order),
    and the values it produces that a graph output or a node outside the group needs."""
    members = set(node_indices)
    produced: set[str] = set()
    for i in node_indices:
        produced.update(o for o in graph.nodes[i].outputs if o)
    inputs: list[str] = []
    for i in sorted(node_indices):
        for name in graph.node_inputs(i):
            if name not in produced and name not in inputs:
                inputs.append(name)
    graph_outputs = set(graph.outputs)
    outputs: list[str] = []
    for i in sorted(node_indices):
        for name in graph.nodes[i].outputs:
            if name and (name in graph_outputs or any(c not in members for c in graph.consumers(name))):
                outputs.append(name)
    return inputs, outputs


class _Group:
    __slots__ = ("anc", "desc", "mask", "members")

    def __init__(self, members: set[int], mask: int, anc: int, desc: int) -> None:
        self.members = members
        self.mask = mask
        self.anc = anc
        self.desc = desc


def convex_groups(graph: GraphSpec, supported: Collection[int], *, provider: str = "this provider",
                  ) -> tuple[list[tuple[int, ...]], dict[int, str]]:
    """Maximal connected convex groups of the ``supported`` node indices.

    Returns (groups as sorted index tuples, the reason for each supported node left out:
    its group would close a cycle with a group taken before). ``provider`` names the
    provider in those reasons."""
    supported = set(supported)
    if not supported:
        return [], {}
    preds, succs = dependencies(graph)
    order = stable_topological_order(preds)
    if len(order) != len(preds):
        raise ValueError("graph has a cycle")
    position = {node: k for k, node in enumerate(order)}
    n = len(order)
    anc = [0] * n
    for i in order:
        a = 0
        for p in preds[i]:
            a |= anc[p] | (1 << p)
        anc[i] = a
    desc = [0] * n
    for i in reversed(order):
        d = 0
        for s in succs[i]:
            d |= desc[s] | (1 << s)
        desc[i] = d

    group_of: dict[int, _Group] = {}
    for v in order:
        if v not in supported:
            continue
        mask, a, d = 1 << v, anc[v], desc[v]
        members = {v}
        candidates = {id(g): g for p in preds[v] if (g := group_of.get(p)) is not None}
        for g in sorted(candidates.values(), key=lambda g: -len(g.members)):
            m2, a2, d2 = mask | g.mask, a | g.anc, d | g.desc
            if (a2 & d2) & ~m2 == 0:  # no outside node lies between two members
                mask, a, d = m2, a2, d2
                members |= g.members
        group = _Group(members, mask, a, d)
        for m in members:
            group_of[m] = group

    groups = list({id(g): g for g in group_of.values()}.values())
    groups.sort(key=lambda g: (-len(g.members), min(position[m] for m in g.members)))
    kept, dropped = _contract(groups, succs, position, n)
    reasons = {m: f"fusing its {provider} group would create a cycle with another {provider} group"
               for g in dropped for m in g.members}
    result = sorted((tuple(sorted(g.members, key=lambda m: position[m])) for g in kept), key=lambda t: position[t[0]])
    return [tuple(sorted(t)) for t in result], reasons


def _contract(groups: list[_Group], succs: Sequence[set[int]], position: dict[int, int], n: int
              ) -> tuple[list[_Group], list[_Group]]:
    unit_of = list(range(n))
    members: dict[int, set[int]] = {i: {i} for i in range(n)}
    kept, dropped = [], []
    for g in groups:
        if len(g.members) > 1 and not _acyclic(g.members, unit_of, members, succs, position):
            dropped.append(g)
            continue
        uid = min(g.members)
        for m in g.members:
            members.pop(m, None)
            unit_of[m] = uid
        members[uid] = set(g.members)
        kept.append(g)
    return kept, dropped


def _acyclic(group: set[int], unit_of: list[int], members: dict[int, set[int]],
             succs: Sequence[set[int]], position: dict[int, int]) -> bool:
    """True when no path leaves ``group`` and comes back (moving through whole units)."""
    last = max(position[m] for m in group)
    stack = [s for m in group for s in succs[m] if s not in group]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if position[node] > last:
            continue  # topological order: nothing after the group's last node leads back in
        unit = unit_of[node]
        if unit in seen:
            continue
        seen.add(unit)
        for m in members[unit]:
            for s in succs[m]:
                if s in group:
                    return False
                if unit_of[s] not in seen:
                    stack.append(s)
    return True
