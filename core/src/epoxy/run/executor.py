"""The compiled plan and the sequential executor that runs it.

Everything is resolved at session creation: each step holds its callable, the integer
slots it reads and writes, and the slots to release after it. A run is a loop over tuples
with no lookups by name. A parallel executor can run the same plan: steps carry their
dependencies (``Step.after``) so independent steps can be dispatched concurrently.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ..contract import KernelFn
from ..errors import EpoxyError, KernelError, RunTerminatedError
from ..plan.arena import ArenaPool
from ..plan.placement import IOPlacement

#: the stop flag (a ``threading.Event``) of the run in progress in this context, if any:
#: loops inside kernels (Loop, Scan) read it through :func:`check_terminated`
RUN_STOP: ContextVar[Any] = ContextVar("epoxy_run_stop", default=None)


def check_terminated(where: str) -> None:
    """Raise :class:`RunTerminatedError` when the current run was asked to stop."""
    stop = RUN_STOP.get()
    if stop is not None and stop.is_set():
        raise RunTerminatedError(f"run terminated (RunOptions.terminate was set) in {where}")


def output_count_error(result: Any, expected: int) -> TypeError | None:
    """Why a multi-output step's ``result`` cannot be stored: every executor refuses a kernel
    that returns fewer outputs than its node has (instead of an IndexError or silent Nones)."""
    if isinstance(result, tuple) and len(result) >= expected:
        return None
    got = f"a tuple of {len(result)}" if isinstance(result, tuple) else type(result).__name__
    return TypeError(f"kernel returned {got}, expected a tuple of {expected} outputs")


@dataclass(frozen=True)
class Step:
    """One call: a kernel, a compiled group, or a device copy."""

    fn: KernelFn
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]  # -1 marks an output nobody reads
    provider: str
    label: str
    op_type: str
    after: tuple[int, ...] = ()  # indices of steps this one depends on


@dataclass
class ExecutionPlan:
    """Steps in order plus the slot table they index."""

    steps: list[Step]
    slot_names: list[str]
    initial: list[Any]  # constants preloaded (on their device), None elsewhere
    input_slots: dict[str, int]
    output_slots: dict[str, int]
    frees: list[tuple[int, ...]] = field(default_factory=list)
    #: planned buffers for outputs of ``out=``-capable kernels (None: nothing planned)
    arena: Any = None
    #: public description of where graph inputs are read and outputs produced (per device,
    #: with the copy steps and device slots): what device bindings build on
    io: IOPlacement = field(default_factory=IOPlacement)


class SequentialExecutor:
    """Runs a plan's steps one after another, releasing values after their last use."""

    def __init__(self, plan: ExecutionPlan) -> None:
        self.plan = plan
        self._pool = ArenaPool(plan.arena, len(plan.initial)) if plan.arena is not None else None
        planned = {slot for slot, *_ in plan.arena.views} if plan.arena is not None else set()
        self._program = [
            (s.fn, s.inputs, s.outputs[0] if len(s.outputs) == 1 else None, s.outputs, frees,
             len(s.outputs) == 1 and s.outputs[0] in planned)
            for s, frees in zip(plan.steps, plan.frees)
        ]

    def run(self, feeds: Sequence[tuple[int, Any]], fetch: Sequence[int], stop: Any = None) -> list[Any]:
        """Run with ``feeds`` as (slot, value) pairs; return the values of ``fetch`` slots.

        ``stop``: a ``threading.Event``; once set (from any thread) the run ends before its
        next step with :class:`RunTerminatedError`."""
        token = RUN_STOP.set(stop) if stop is not None else None
        try:
            if self._pool is None:
                return self._run(feeds, fetch, None, stop)
            arena = self._pool.acquire()
            try:
                return self._run(feeds, fetch, arena, stop)
            finally:
                self._pool.release(arena)
        finally:
            if token is not None:
                RUN_STOP.reset(token)

    def _run(self, feeds: Sequence[tuple[int, Any]], fetch: Sequence[int], arena: list[Any] | None,
             stop: Any = None) -> list[Any]:
        values = list(self.plan.initial)
        for slot, value in feeds:
            values[slot] = value
        index = 0
        try:
            for index, (fn, ins, single, outs, frees, use_out) in enumerate(self._program):
                if stop is not None and stop.is_set():
                    step = self.plan.steps[index]
                    raise RunTerminatedError(
                        f"run terminated (RunOptions.terminate was set) before node {step.label!r} ({step.op_type})")
                if use_out:
                    result = fn(*[values[i] for i in ins], out=arena[single])  # type: ignore[index]
                else:
                    result = fn(*[values[i] for i in ins])
                if single is not None:
                    values[single] = result
                else:
                    wrong = output_count_error(result, len(outs))
                    if wrong is not None:
                        raise wrong
                    for slot, value in zip(outs, result):
                        if slot >= 0:
                            values[slot] = value
                for slot in frees:
                    values[slot] = None
        except EpoxyError:
            raise
        except Exception as exc:
            step = self.plan.steps[index]
            raise KernelError(
                f"node {step.label!r} ({step.op_type}) failed on provider {step.provider!r}: "
                f"{type(exc).__name__}: {exc}",
                node=step.label, op_type=step.op_type, provider=step.provider,
            ) from exc
        return [values[s] for s in fetch]
