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
        return derive_plan(full, drop, full.output_slots)

    return ShapeCachingExecutor(plan, skip, needed, derive)
