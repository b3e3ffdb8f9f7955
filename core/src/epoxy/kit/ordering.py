"""Stable topological order of graph nodes, shared by the loader's graph checks and providers
that regroup nodes (one Kahn's algorithm, not a copy per caller)."""

from __future__ import annotations

import heapq
from collections.abc import Collection, Sequence


def stable_topological_order(after: Sequence[Collection[int]]) -> list[int]:
    """Node indices with every node after those in ``after[i]``, smallest index first (so a
    graph already in order keeps its order). Nodes on a cycle are left out: a result shorter
    than ``after`` means the graph has one."""
    users: list[list[int]] = [[] for _ in after]
    waiting = [len(deps) for deps in after]
    for index, deps in enumerate(after):
        for dep in deps:
            users[dep].append(index)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for user in users[index]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    return order
