"""Runs that reuse the shape arithmetic of an earlier run with the same input shapes.

``epoxy.plan.shape_values`` finds the steps whose results follow from the input shapes
alone (the Shape/Gather/Concat/Unsqueeze chains exporters write, masks built from Range).
This executor keys runs by the shapes of their feeds. The first run of a key runs the whole
plan; the second runs it again and snapshots what those steps produced; from the third on,
a reduced plan without them runs, given the snapshots as if they were feeds. Taking the
snapshot on the second sighting keeps workloads whose shapes never repeat (a decoder
whose past grows every step) on the plain path at no cost.

Bounded: at most :data:`MAX_SHAPES` keys (least recently used dropped) and
:data:`MAX_BYTES` of snapshots per key (a key whose values are larger is never reduced).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import replace
from functools import cached_property
from typing import Any

import numpy as np

from .executor import ExecutionPlan, SequentialExecutor, Step
from .output_safety import memory_owner

#: distinct input-shape keys remembered per session
MAX_SHAPES = 32
#: snapshot bytes per key
MAX_BYTES = 1 << 20

#: where a capturing run's wrapped steps put their snapshots (None: not capturing)
_SNAPSHOTS: ContextVar[dict[int, Any] | None] = ContextVar("epoxy_shape_snapshots", default=None)
_UNUSABLE = object()  # a snapshot that cannot be reused (not an array, or too large)


class ShapeCachingExecutor:
    """A sequential executor that skips the shape-fixed steps on input shapes it has seen."""

    def __init__(self, plan: ExecutionPlan, skip: set[int], needed: tuple[int, ...],
                 derive: Callable[[ExecutionPlan, set[int]], ExecutionPlan]) -> None:
        """``skip``/``needed``: from :func:`epoxy.plan.shape_values.skippable_steps`;
        ``derive(plan, drop)``: ``plan`` without the ``drop`` steps (``plan_builder.derive_plan``)."""
        self.plan = plan
        self.full = SequentialExecutor(plan)
        pool = self.full.pool
        self.reduced_plan = derive(plan, skip)
        self.reduced = SequentialExecutor(self.reduced_plan, pool=pool)
        self.needed = needed
        self.skipped = len(skip)
        #: key -> (snapshots as (slot, value) pairs, ids of their memory owners); None: not reducible
        self._cache: OrderedDict[tuple, tuple[list[tuple[int, Any]], set[int]] | None] = OrderedDict()
        self._seen: OrderedDict[tuple, None] = OrderedDict()
        self._lock = threading.Lock()

    @cached_property
    def _capturing(self) -> SequentialExecutor:
        """The plan with snapshotting steps, built at the first second sighting of a shape, not
        at session creation (a session whose shapes never repeat never needs it)."""
        return SequentialExecutor(_capturing_plan(self.plan, set(self.needed)), pool=self.full.pool)

    def run(self, feeds: Sequence[tuple[int, Any]], fetch: Sequence[int], stop: Any = None) -> list[Any]:
        try:
            key = tuple([(slot, value.shape) for slot, value in feeds])
        except AttributeError:  # a sequence or map feed: no shape key
            return self.full.run(feeds, fetch, stop)
        entry = self._cache.get(key)
        if entry is not None:
            with self._lock:
                if key in self._cache:
                    self._cache.move_to_end(key)
            snapshots, owners = entry
            return _detached(self.reduced.run([*feeds, *snapshots], fetch, stop), owners)
        if key in self._cache or not self._sighted_before(key):  # None: this key is not reducible
            return self.full.run(feeds, fetch, stop)
        box: dict[int, Any] = {}
        token = _SNAPSHOTS.set(box)
        try:
            results = self._capturing.run(feeds, fetch, stop)
        finally:
            _SNAPSHOTS.reset(token)
        self._remember(key, box)
        return results

    def _sighted_before(self, key: tuple) -> bool:
        with self._lock:
            if key in self._seen:
                del self._seen[key]
                return True
            self._seen[key] = None
            if len(self._seen) > MAX_SHAPES:
                self._seen.popitem(last=False)
            return False

    def _remember(self, key: tuple, box: dict[int, Any]) -> None:
        values = [box.get(slot, _UNUSABLE) for slot in self.needed]
        usable = (all(v is not _UNUSABLE for v in values)
                  and sum(int(getattr(v, "nbytes", 0)) for v in values) <= MAX_BYTES)
        owners = {id(memory_owner(v)) for v in values if isinstance(v, np.ndarray)}
        with self._lock:
            self._cache[key] = (list(zip(self.needed, values)), owners) if usable else None
            if len(self._cache) > MAX_SHAPES:
                self._cache.popitem(last=False)


def _snapshot(value: Any) -> Any:
    """A private copy of a step's result (it may live in a reused planned buffer)."""
    if isinstance(value, np.ndarray):
        return value.copy() if value.nbytes <= MAX_BYTES else _UNUSABLE
    if isinstance(value, np.generic):
        return value
    return _UNUSABLE


def _capturing(fn: Any, positions: tuple[tuple[int, int], ...], single: bool) -> Any:
    """``fn``, also snapshotting its outputs at ``positions`` ((output index, slot) pairs)
    into the capturing run's box."""

    def run(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        box = _SNAPSHOTS.get()
        if box is not None:
            for index, slot in positions:
                box[slot] = _snapshot(result if single else result[index])
        return result

    return run


def _capturing_plan(plan: ExecutionPlan, needed: set[int]) -> ExecutionPlan:
    steps: list[Step] = []
    for step in plan.steps:
        positions = tuple((i, s) for i, s in enumerate(step.outputs) if s in needed)
        if positions:
            step = replace(step, fn=_capturing(step.fn, positions, len(step.outputs) == 1))
        steps.append(step)
    return replace(plan, steps=steps)


def _detached(results: list[Any], owners: set[int]) -> list[Any]:
    """Results never share memory with a snapshot (a graph output may be a view of one, and
    the caller may write to it)."""
    return [v.copy() if isinstance(v, np.ndarray) and id(memory_owner(v)) in owners else v for v in results]
