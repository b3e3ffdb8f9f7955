"""epoxy.kit's convex grouping (shared by every compiling provider) on hand-made graphs."""

from __future__ import annotations

from dataclasses import dataclass, field

from epoxy.kit import convex_groups


@dataclass
class _Node:
    index: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass
class FakeGraph:
    """Minimal GraphSpec: node i reads ``edges[i]`` (producer indices) and writes ``v{i}``."""

    preds: list[list[int]]
    nodes: list[_Node] = field(init=False)

    def __post_init__(self) -> None:
        self.nodes = [_Node(i, tuple(f"v{p}" for p in ps) or ("x",), (f"v{i}",)) for i, ps in enumerate(self.preds)]

    def producer(self, name: str):
        return int(name[1:]) if name.startswith("v") else None

    def node_inputs(self, index: int) -> tuple[str, ...]:
        return tuple(n for n in self.nodes[index].inputs if n)


def _is_convex(graph, group):
    members = set(group)
    succ = {i: set() for i in range(len(graph.preds))}
    for i, ps in enumerate(graph.preds):
        for p in ps:
            succ[p].add(i)
    # any path member -> outside -> member?
    for m in members:
        stack = [s for s in succ[m] if s not in members]
        seen = set()
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            for s in succ[x]:
                if s in members:
                    return False
                stack.append(s)
    return True


def test_chain_is_one_group():
    g = FakeGraph([[], [0], [1], [2]])
    groups, reasons = convex_groups(g, {0, 1, 2, 3})
    assert groups == [(0, 1, 2, 3)] and not reasons


def test_unsupported_node_splits_chain():
    g = FakeGraph([[], [0], [1], [2], [3]])
    groups, _ = convex_groups(g, {0, 1, 3, 4})
    assert groups == [(0, 1), (3, 4)]


def test_side_path_through_unsupported_node_keeps_groups_convex():
    # 0 -> 1 -> 3 and 0 -> 2(unsupported) -> 3: {0, 1, 3} is not convex
    g = FakeGraph([[], [0], [0], [1, 2]])
    groups, _ = convex_groups(g, {0, 1, 3})
    assert all(_is_convex(g, grp) for grp in groups)
    assert sorted(i for grp in groups for i in grp) == [0, 1, 3]
    assert (0, 1) in groups and (3,) in groups


def test_parallel_branches_merge_at_join():
    # diamond 0 -> {1, 2} -> 3, all supported
    g = FakeGraph([[], [0], [0], [1, 2]])
    groups, _ = convex_groups(g, {0, 1, 2, 3})
    assert groups == [(0, 1, 2, 3)]


def test_groups_never_depend_on_each_other_both_ways():
    # a=0 feeds b=1; c=2 feeds d=3; a also feeds d; b and c join at e=4 (unsupported x=5 between)
    # whatever the grouping, contracting all groups must leave a DAG
    g = FakeGraph([[], [0], [], [2, 0], [1, 2], [4], [5, 3]])
    supported = {0, 1, 2, 3, 4, 6}
    groups, reasons = convex_groups(g, supported)
    unit = {}
    for k, grp in enumerate(groups):
        for i in grp:
            unit[i] = ("g", k)
    for i in range(len(g.preds)):
        unit.setdefault(i, ("n", i))
    edges = {(unit[p], unit[i]) for i, ps in enumerate(g.preds) for p in ps if unit[p] != unit[i]}
    nodes = set(unit.values())
    indeg = {n: 0 for n in nodes}
    for _, b in edges:
        indeg[b] += 1
    ready = [n for n in nodes if indeg[n] == 0]
    seen = 0
    while ready:
        n = ready.pop()
        seen += 1
        for a, b in edges:
            if a == n:
                indeg[b] -= 1
                if indeg[b] == 0:
                    ready.append(b)
    assert seen == len(nodes)
    assert all(_is_convex(g, grp) for grp in groups)
    covered = {i for grp in groups for i in grp} | set(reasons)
    assert covered == supported


def test_nothing_supported():
    assert convex_groups(FakeGraph([[], [0]]), set()) == ([], {})
