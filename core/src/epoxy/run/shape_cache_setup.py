"""Build a session's shape-caching executor (``shape_cache``) from its graph and plan."""

from __future__ import annotations

from typing import Any

from ..graph.graph_spec import CoreGraph
from ..plan.plan_builder import derive_plan
from ..plan.shape_values import shape_fixed_values, skippable_steps
from .executor import ExecutionPlan
from .shape_cache import ShapeCachingExecutor


def shape_caching_executor(plan: ExecutionPlan, graph: CoreGraph) -> ShapeCachingExecutor | None:
    """The executor that skips ``plan``'s shape-fixed steps on repeated input shapes, or
    None when no step can be skipped (the plain executor then runs)."""
    constants = graph.constants()
    fixed = shape_fixed_values(graph, [name for name in graph.inputs if name in constants])
    if not fixed:
        return None
    skip, needed = skippable_steps(plan.steps, plan.slot_names, fixed, plan.output_slots)
    if not skip:
        return None

    def derive(full: ExecutionPlan, drop: set[int]) -> Any:
        return derive_plan(full, drop | unread_after(full, drop), full.output_slots)

    return ShapeCachingExecutor(plan, skip, needed, derive)


def unread_after(plan: ExecutionPlan, skipped: set[int]) -> set[int]:
    """The steps whose results only ``skipped`` steps read (directly or through other such
    steps) and that make no graph output: once the skipped steps' results are cached, they
    compute for nothing. Why: an exporter's view read both by a fused kernel (which makes the
    view itself) and by a ``Shape`` (cached) would otherwise still run in every run."""
    outputs = set(plan.output_slots.values())
    readers: dict[int, list[int]] = {}
    for index, step in enumerate(plan.steps):
        for slot in step.inputs:
            readers.setdefault(slot, []).append(index)
    dead: set[int] = set()
    for index in range(len(plan.steps) - 1, -1, -1):  # steps are in topological order
        step = plan.steps[index]
        if index in skipped or step.provider == "copy" or any(slot in outputs for slot in step.outputs):
            continue
        if all(reader in skipped or reader in dead for slot in step.outputs for reader in readers.get(slot, ())):
            dead.add(index)
    return dead
