"""Capability: which nodes translate, and how they are cut into convex fused groups.

Grouping rule. Every node gets a *barrier level*: the largest number of unclaimed nodes on
any path from the graph inputs to it. Claimed nodes joined by an edge and sharing a level
form one group. A path that leaves a group through an unclaimed node and comes back would
raise the level on the way, so it cannot end in the same group: groups are convex, and
contracting convex groups keeps the unit graph acyclic (what the partitioner requires).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from epoxy.contract import Capability, FusedGroup, GraphSpec

from .facts import Facts
from .ops import check_node


@dataclass
class Plan:
    """Groups found (node indices per group) and reasons for every node left out."""

    groups: list[tuple[int, ...]] = field(default_factory=list)
    declined: dict[int, str] = field(default_factory=dict)

    def capability(self, prefix: str = "coreml_group") -> Capability:
        return Capability(
            groups=tuple(FusedGroup(g, f"{prefix}_{k}") for k, g in enumerate(self.groups)),
            declined=dict(self.declined),
        )


def plan_groups(graph: GraphSpec, facts: Facts) -> Plan:
    plan = Plan()
    n = len(graph.nodes)
    claimed = [False] * n
    for node in graph.nodes:
        reason = check_node(node, facts)
        if reason is None:
            claimed[node.index] = True
        else:
            plan.declined[node.index] = reason

    producers: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        for name in graph.node_inputs(i):  # SDK API 1.1: implicit inputs of bodies too
            p = graph.producer(name)
            if p is not None and p != i:
                producers[i].append(p)

    level = [0] * n
    for i in _topological(n, producers):
        level[i] = max((level[p] + (0 if claimed[p] else 1) for p in producers[i]), default=0)

    parent = list(range(n))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for i in range(n):
        if not claimed[i]:
            continue
        for p in producers[i]:
            if claimed[p] and level[p] == level[i]:
                ra, rb = find(i), find(p)
                if ra != rb:
                    parent[max(ra, rb)] = min(ra, rb)

    components: dict[int, list[int]] = {}
    for i in range(n):
        if claimed[i]:
            components.setdefault(find(i), []).append(i)

    for members in sorted(components.values(), key=min):
        group = tuple(sorted(members))
        if all(i in facts.folded for i in group):
            for i in group:
                plan.declined[i] = "constant subexpression: groups that read it fold its value in at conversion time"
            continue
        inputs = _runtime_inputs(graph, facts, group)
        if not inputs:
            for i in group:
                plan.declined[i] = "its group would read no run-time input (constant computation)"
            continue
        if not _convex(graph, producers, set(group)):  # cannot happen by construction; be safe
            for i in group:
                plan.declined[i] = "its Core ML group would not be convex"
            continue
        plan.groups.append(group)
    return plan


def _runtime_inputs(graph: GraphSpec, facts: Facts, group: Sequence[int]) -> list[str]:
    produced = {o for i in group for o in graph.nodes[i].outputs if o}
    found: list[str] = []
    for i in group:
        if i in facts.folded:
            continue
        for name in graph.nodes[i].inputs:
            if name and name not in produced and not facts.is_known(name) and name not in found:
                found.append(name)
    return found


def _topological(n: int, producers: list[list[int]]) -> list[int]:
    """Node order with producers first (graph order already is, except in odd graphs)."""
    if all(p < i for i in range(n) for p in producers[i]):
        return list(range(n))
    consumers: list[list[int]] = [[] for _ in range(n)]
    indegree = [0] * n
    for i in range(n):
        for p in set(producers[i]):
            consumers[p].append(i)
            indegree[i] += 1
    order = [i for i in range(n) if indegree[i] == 0]
    for i in order:
        for c in consumers[i]:
            indegree[c] -= 1
            if indegree[c] == 0:
                order.append(c)
    return order


def _convex(graph: GraphSpec, producers: list[list[int]], group: set[int]) -> bool:
    n = len(producers)
    consumers: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        for p in producers[i]:
            consumers[p].append(i)
    stack = [c for i in group for c in consumers[i] if c not in group]
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        for c in consumers[v]:
            if c in group:
                return False
            stack.append(c)
    return True
