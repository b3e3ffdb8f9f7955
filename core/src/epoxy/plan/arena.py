"""Planned output buffers: kernels that accept ``out=`` write into reused arena buffers.

A kernel callable that sets ``supports_out = True`` accepts ``out=`` (an array of its
output's static shape and dtype), writes its result there and returns it. The planner
(``planner.plan_memory``) assigns such outputs to buffers reused by liveness; this module
turns that assignment into arenas: one set of buffers plus ready-made views per slot.

Safety rules (why a value may or may not live in the arena):
- Outputs of kernels *without* ``out=`` may be views of their inputs (Reshape, Slice...),
  so an input's buffer stays reserved while any such alias is alive.
- Graph outputs, and whatever they may alias, are never arena memory: the caller keeps
  them after the run and the next run would overwrite the buffer.
- Each concurrent run takes its own arena from a pool, so runs never share buffers.

A plan is only as good as the shapes it was sized from. A buffer the process cannot allocate
is left out (its slots get ``None``: those kernels allocate), and a slot whose kernel turned
out not to fit its planned view (``ArenaPool.drop``, called by the executor) is not offered
again, so a wrong declared shape costs one fallback allocation, never a failed run.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..kit.aligned import aligned_empty
from .planner import DevicePlan


@dataclass(frozen=True)
class ArenaLayout:
    """Buffer sizes and, per planned slot, (buffer index, dtype, shape); ``offsets``: the byte
    offsets of slots that are parts of another's buffer (``placed_parts``), 0 for the rest."""

    buffer_sizes: tuple[int, ...]
    views: tuple[tuple[int, int, np.dtype, tuple[int, ...]], ...]  # (slot, buffer, dtype, shape)
    offsets: Mapping[int, int] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(self.buffer_sizes)


def layout_from_plan(plan: DevicePlan, specs: dict[int, tuple[np.dtype, tuple[int, ...]]],
                     parts: Mapping[int, tuple[int, int]] | None = None) -> ArenaLayout:
    """The arena of ``plan``'s assignment; ``parts`` (slot -> (root slot, byte offset)) put
    slots inside their root's buffer."""
    parts = parts or {}
    buffer_of = dict(plan.assignment)
    buffer_of.update({slot: plan.assignment[root] for slot, (root, _) in parts.items() if root in plan.assignment})
    views = tuple((slot, buf, specs[slot][0], specs[slot][1]) for slot, buf in sorted(buffer_of.items()))
    offsets = {slot: at for slot, (root, at) in parts.items() if root in plan.assignment}
    return ArenaLayout(tuple(plan.buffer_sizes), views, offsets)


class ArenaPool:
    """Arenas for concurrent runs: take one for a run, give it back after."""

    def __init__(self, layout: ArenaLayout, n_slots: int) -> None:
        self.layout = layout
        self.n_slots = n_slots
        self._free: list[list[np.ndarray | None]] = []
        self._lock = threading.Lock()
        #: slots whose planned view did not fit what their kernel produced: never offered again
        self.dropped: set[int] = set()

    def _new(self) -> list[np.ndarray | None]:
        buffers: list[np.ndarray | None] = []
        for size in self.layout.buffer_sizes:
            try:
                buffers.append(aligned_empty(max(1, size), np.uint8))  # views start on cache lines
            except (MemoryError, ValueError):  # more than the process can get: those kernels allocate
                buffers.append(None)
        views: list[np.ndarray | None] = [None] * self.n_slots
        offsets = self.layout.offsets
        for slot, buf, dtype, shape in self.layout.views:
            buffer = buffers[buf]
            start = offsets.get(slot, 0)
            end = start + math.prod(shape) * dtype.itemsize
            if buffer is None or slot in self.dropped or end > buffer.size:
                continue
            views[slot] = buffer[start:end].view(dtype).reshape(shape)
        return views

    def acquire(self) -> list[np.ndarray | None]:
        with self._lock:
            if self._free:
                views = self._free.pop()
                for slot in self.dropped:
                    views[slot] = None
                return views
        return self._new()

    def drop(self, slot: int) -> None:
        """Stop offering ``slot``'s planned view (its kernel produced another shape)."""
        with self._lock:
            self.dropped.add(slot)

    def release(self, views: list[np.ndarray | None]) -> None:
        with self._lock:
            self._free.append(views)


def alias_extended_last_use(
    step_inputs: Sequence[Sequence[int]],
    step_outputs: Sequence[Sequence[int]],
    may_alias: Sequence[bool],
    last: dict[int, int],
) -> dict[int, int]:
    """Last use of each slot, extended through steps whose outputs may view their inputs."""
    extended = dict(last)
    for index in range(len(step_inputs) - 1, -1, -1):
        if not may_alias[index]:
            continue
        reach = max((extended.get(o, index) for o in step_outputs[index]), default=index)
        for slot in step_inputs[index]:
            if extended.get(slot, -1) < reach:
                extended[slot] = reach
    return extended


def aliases_of_outputs(
    step_inputs: Sequence[Sequence[int]],
    step_outputs: Sequence[Sequence[int]],
    may_alias: Sequence[bool],
    outputs: set[int],
) -> set[int]:
    """Graph outputs plus every slot they may be views of (never arena memory)."""
    protected = set(outputs)
    for index in range(len(step_inputs) - 1, -1, -1):
        if may_alias[index] and protected.intersection(step_outputs[index]):
            protected.update(step_inputs[index])
    return protected
