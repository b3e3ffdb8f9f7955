"""Fusable elementwise groups in a graph, given which nodes a backend may take.

A group has one output: every other value its nodes produce is read only inside the group
and is not a graph output. That makes it convex by construction (nothing outside sits
between two members), so the core can contract it into one step, and it makes the program
a single store per element.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from ...contract import GraphSpec, NodeSpec


def elementwise_groups(graph: GraphSpec, may_take: Callable[[NodeSpec], bool],
                       taken: Collection[int] = (), min_size: int = 2, same_shape: bool = False,
                       ) -> list[tuple[int, ...]]:
    """Groups (sorted node indices) of at least ``min_size`` nodes that ``may_take`` accepts,
    none in ``taken``: grown from each group's last node backwards through producers whose
    every output is read only inside the group.

    ``same_shape``: a producer joins only when its output's static shape is the group
    output's (or either is unknown). A program computes every instruction once per *output*
    element, so a node on a broadcast operand (RMSNorm's ``1/sqrt(var + eps)`` on one value
    per row) would be recomputed for every element of the row: a backend whose per-element
    cost matters more than one more call keeps such nodes out."""
    outputs = set(graph.outputs)
    busy = set(taken)
    candidates = {n.index for n in graph.nodes if n.index not in busy and may_take(n)}
    groups: list[tuple[int, ...]] = []
    for root in sorted(candidates, reverse=True):
        if root in busy:
            continue
        members = {root}
        root_shape = _shape(graph, graph.nodes[root])
        grew = True
        while grew:
            grew = False
            for m in sorted(members):
                for name in graph.nodes[m].inputs:
                    p = graph.producer(name) if name else None
                    if p is None or p in members or p not in candidates or p in busy:
                        continue
                    outs = [o for o in graph.nodes[p].outputs if o]
                    if any(o in outputs for o in outs):
                        continue
                    if same_shape and not _compatible(root_shape, _shape(graph, graph.nodes[p])):
                        continue
                    if all(all(c in members for c in graph.consumers(o)) for o in outs):
                        members.add(p)
                        grew = True
        if len(members) >= min_size:
            groups.append(tuple(sorted(members)))
            busy.update(members)
    return groups


Shape = tuple[int | str | None, ...] | None


def _shape(graph: GraphSpec, node: NodeSpec) -> Shape:
    name = node.outputs[0] if node.outputs else ""
    return graph.value_type(name).shape if name else None


def _compatible(a: Shape, b: Shape) -> bool:
    """Same shape (symbolic dims compared by name), or either not fully known."""
    if a is None or b is None or None in a or None in b:
        return True
    return tuple(a) == tuple(b)
