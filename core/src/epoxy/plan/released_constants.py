"""Constants whose kernels keep their own copy: found while the plan is built, dropped once
the session no longer needs the originals.

Why: a kernel that prepacks a weight holds a second copy of it (ep-cpu's one-thread dense
layers pack theirs for their GEMM: BERT-base's 85 MB of layer weights, twice). When every
step that reads a constant declares it never reads the plan's value again
(``contract.RELEASED_INPUTS``), and nothing else can use it (no other node, no group of
another provider, no graph output, no feed that may override it, no copy to a device), the
session drops the plan's, the graph spec's and the model's references: the process then
holds the kernels' copies only, as onnxruntime does with the weights its kernels prepack.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..contract import RELEASED_INPUTS
from ..graph.graph_spec import CoreGraph
from ..run.executor import ExecutionPlan


class ReleaseLedger:
    """What the plan's steps said about their constant inputs, gathered step by step."""

    def __init__(self) -> None:
        self._kept_by: dict[int, set[int]] = {}  # constant slot -> nodes whose kernels keep a copy
        self._read_by_plan: set[int] = set()  # constant slots some step reads at run time

    def note(self, fn: Any, nodes: Sequence[int], in_slots: Sequence[int], constant_slots: Mapping[int, Any]) -> None:
        """One step: ``fn`` reading ``in_slots`` (a single node's kernel when ``nodes`` has one)."""
        released = getattr(fn, RELEASED_INPUTS, None) if len(nodes) == 1 else None
        for position, slot in enumerate(in_slots):
            if slot not in constant_slots:
                continue
            if released and position in released:
                self._kept_by.setdefault(slot, set()).add(nodes[0])
            else:
                self._read_by_plan.add(slot)

    def releasable(self, graph: CoreGraph, host_slots: Mapping[str, int], other_slots: Iterable[str],
                   outputs: Iterable[str]) -> tuple[int, ...]:
        """Host slots of constants (``host_slots``: name -> slot) every consumer node keeps a
        copy of; ``other_slots``: names with a slot elsewhere too (a device copy reads them)."""
        excluded = set(graph.inputs) | set(outputs) | set(other_slots)
        found = []
        for name, slot in host_slots.items():
            kept = self._kept_by.get(slot)
            if not kept or name in excluded or slot in self._read_by_plan:
                continue
            if set(graph.consumers(name)) == kept:  # no folded node, no group of another provider
                found.append(slot)
        return tuple(sorted(found))


def release(plan: ExecutionPlan, graph: CoreGraph) -> list[str]:
    """Drop the references to ``plan.releasable``'s constants (the plan's value becomes None,
    the graph spec and its ``onnx_ir`` model forget the data); their names."""
    names = []
    for slot in plan.releasable:
        if plan.initial[slot] is None:
            continue
        name = plan.slot_names[slot]
        plan.initial[slot] = None
        graph.release_constant(name)
        names.append(name)
    return names
