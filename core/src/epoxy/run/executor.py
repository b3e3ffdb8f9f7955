"""The compiled plan and the sequential executor that runs it.

Everything is resolved at session creation: each step holds its callable, the integer
slots it reads and writes, and the slots to release after it. A run is a loop over tuples
with no lookups by name. A parallel executor can run the same plan: steps carry their
dependencies (``Step.after``) so independent steps can be dispatched concurrently.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from ..contract import KernelFn
from ..errors import EpoxyError
from ..kit.float_errors import quiet_floats
from ..plan.arena import ArenaPool
from ..plan.placement import IOPlacement
from .run_bound import stop_error
from .step_errors import output_count_error, step_error

#: the stop condition of the run in progress in this context, if any (the terminate flag, a
#: ``threading.Event``, or a :class:`~epoxy.run.run_bound.RunBound` with a deadline): loops
#: inside kernels (Loop, Scan, SequenceMap) read it through :func:`check_terminated`, and
#: control-flow bodies run their steps under it
RUN_STOP: ContextVar[Any] = ContextVar("epoxy_run_stop", default=None)


def check_terminated(where: str) -> None:
    """Raise :class:`~epoxy.errors.RunTerminatedError` when the current run was asked to
    stop or ran past its time bound; ``where`` names the node and iteration."""
    stop = RUN_STOP.get()
    if stop is not None and stop.is_set():
        raise stop_error(stop, f"in {where}")


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
    #: constant slots every reader keeps its own copy of (``contract.RELEASED_INPUTS``): the
    #: session may set them to None once it no longer needs the originals
    releasable: tuple[int, ...] = ()


def _reader(inputs: tuple[int, ...]) -> Any:
    """How a step reads its arguments from the slot table: one C call (``itemgetter``)
    returning a tuple, instead of a Python list comprehension per step and run."""
    if not inputs:
        return lambda values: ()
    if len(inputs) == 1:
        only = itemgetter(inputs[0])
        return lambda values: (only(values),)
    return itemgetter(*inputs)


class SequentialExecutor:
    """Runs a plan's steps one after another, releasing values after their last use.

    The first run interprets the plan; later runs call it as generated straight-line code
    (:mod:`epoxy.run.straight_line`), which saves about a third of the per-step cost on
    graphs of tiny tensors. A session that runs once never pays for the generation.
    ``EPOXY_STRAIGHT_LINE=0`` keeps the interpreter (a debugging aid); ``=always`` generates
    the code before the first run."""

    #: interpreted runs before the plan is generated as code
    interpreted_runs = 1

    def __init__(self, plan: ExecutionPlan, pool: ArenaPool | None = None) -> None:
        """``pool``: share another executor's planned buffers (a variant of the same plan
        with steps left out, never run at the same time as it on one arena)."""
        self.plan = plan
        if pool is None and plan.arena is not None:
            pool = ArenaPool(plan.arena, len(plan.initial))
        self._pool = pool if plan.arena is not None else None
        planned = {slot for slot, *_ in plan.arena.views} if plan.arena is not None else set()
        # per step: (fn, first input slot or -1 when the step has not exactly one input, the
        # argument reader, single output slot or None, outputs, frees, planned out= view):
        # the one-input case (most shape ops) is read inline, without a call
        self._program = [
            (s.fn, s.inputs[0] if len(s.inputs) == 1 else -1, _reader(s.inputs),
             s.outputs[0] if len(s.outputs) == 1 else None, s.outputs, frees,
             len(s.outputs) == 1 and s.outputs[0] in planned)
            for s, frees in zip(plan.steps, plan.frees)
        ]
        self._planned = planned
        self._runs = 0
        self._programs: dict[bool, Any] = {}  # checked (stop tested per step) -> Program
        mode = os.environ.get("EPOXY_STRAIGHT_LINE", "").strip().lower()
        self._generate = mode not in ("0", "off", "false", "no")
        if mode == "always":  # generated from the first run (the conformance session tests it so)
            self.interpreted_runs = 0

    @property
    def pool(self) -> ArenaPool | None:
        """The planned buffers' pool (None: nothing planned)."""
        return self._pool

    def run(self, feeds: Sequence[tuple[int, Any]], fetch: Sequence[int], stop: Any = None) -> list[Any]:
        """Run with ``feeds`` as (slot, value) pairs; return the values of ``fetch`` slots.

        ``stop``: a ``threading.Event`` or a :class:`~epoxy.run.run_bound.RunBound`; once set
        (from any thread, or at its deadline) the run ends before its next step, or at the next
        iteration of a control-flow node, with :class:`~epoxy.errors.RunTerminatedError`."""
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

    def _program_for(self, checked: bool) -> Any:
        """The generated program (made on first use), or None while the plan is still
        interpreted."""
        program = self._programs.get(checked)
        if program is None and self._generate:
            if self._runs < self.interpreted_runs:
                self._runs += 1
                return None
            from .straight_line import generate

            program = self._programs[checked] = generate(self.plan, self._planned, checked=checked)
        return program

    def _run(self, feeds: Sequence[tuple[int, Any]], fetch: Sequence[int], arena: list[Any] | None,
             stop: Any = None) -> list[Any]:
        values = list(self.plan.initial)
        for slot, value in feeds:
            values[slot] = value
        program = self._program_for(stop is not None)
        if program is not None:
            try:
                with quiet_floats():
                    program.run(values, arena, stop, self._pool)
            except EpoxyError:
                raise
            except Exception as exc:
                index = program.step_at(exc.__traceback__)
                if index is None:
                    raise
                raise step_error(self.plan.steps[index], exc, self.plan.slot_names) from exc
            return [values[s] for s in fetch]
        index = 0
        try:
            with quiet_floats():  # one errstate for the run, not one per step
                for index, (fn, first, read, single, outs, frees, use_out) in enumerate(self._program):
                    if stop is not None and stop.is_set():
                        step = self.plan.steps[index]
                        raise stop_error(stop, f"before node {step.label!r} ({step.op_type})")
                    if use_out and (view := arena[single]) is not None:  # type: ignore[index]
                        try:  # the planned view, sized from the declared shape (which may be wrong)
                            result = fn(*read(values), out=view)
                        except EpoxyError:
                            raise
                        except Exception:  # noqa: BLE001 - retried without the view; a real failure raises there
                            result = self._retry_without_view(fn, read(values), single)  # type: ignore[arg-type]
                        else:
                            if result is not view and getattr(result, "shape", None) != view.shape:
                                self._pool.drop(single)  # type: ignore[union-attr,arg-type]
                    elif first >= 0:
                        result = fn(values[first])
                    else:
                        result = fn(*read(values))
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
            raise step_error(self.plan.steps[index], exc, self.plan.slot_names) from exc
        return [values[s] for s in fetch]

    def _retry_without_view(self, fn: KernelFn, args: Sequence[Any], slot: int) -> Any:
        """A kernel refused its planned view (it was sized from a wrong declared shape): run it
        without, and do not offer that slot a view again; a real failure raises here."""
        result = fn(*args)
        self._pool.drop(slot)  # type: ignore[union-attr]  # a view implies a pool
        return result
