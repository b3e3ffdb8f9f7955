"""A plan turned into one generated Python function: the executor's hot loop unrolled.

Interpreting a plan costs a loop iteration per step (unpack the step tuple, test which of
its forms it has, fetch its arguments through a reader); on graphs of tiny tensors that is
as much time as the kernels. The plan never changes after session creation, so it can be
written out once as straight-line code: each step is a line ``v[7] = f3(v[2], v[5])``
calling its kernel through a module global, with its slot numbers as literals and its
frees after it. No step index is kept while running: when a step raises, the line number
of the generated frame in the traceback says which step it was (:meth:`Program.step_at`).

Two variants are generated, each on first use: one for runs without a stop condition and
one that tests the stop condition before every step.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from types import CodeType, TracebackType
from typing import TYPE_CHECKING, Any

from ..errors import EpoxyError
from .run_bound import stop_error
from .step_errors import output_count_error

if TYPE_CHECKING:
    from .executor import ExecutionPlan, Step

_serial = itertools.count()


@dataclass(frozen=True)
class Program:
    """A generated run function and the map from its source lines back to plan steps."""

    run: Any  # (values, arena, stop, pool) -> None
    code: CodeType
    line_steps: tuple[int, ...]  # line number (1-based) -> step index, -1 outside any step

    def step_at(self, tb: TracebackType | None) -> int | None:
        """The index of the step that was running when the traceback ``tb`` was raised."""
        while tb is not None:
            if tb.tb_frame.f_code is self.code:
                line = tb.tb_lineno
                if 0 < line < len(self.line_steps) and self.line_steps[line] >= 0:
                    return self.line_steps[line]
            tb = tb.tb_next
        return None


class _Writer:
    """Source lines, each tagged with the step it belongs to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.steps: list[int] = [-1]  # line numbers are 1-based: index 0 is no line

    def add(self, text: str, step: int = -1, indent: int = 1) -> None:
        self.lines.append("    " * indent + text)
        self.steps.append(step)


def _args(step: Step) -> str:
    return ", ".join(f"v[{slot}]" for slot in step.inputs)


def _store(w: _Writer, index: int, step: Step, call: str, indent: int) -> None:
    """The call and where its result goes, for a step without a planned view."""
    outs = step.outputs
    if len(outs) == 1:
        target = f"v[{outs[0]}]" if outs[0] >= 0 else "_"
        w.add(f"{target} = {call}", index, indent)
        return
    w.add(f"r = {call}", index, indent)
    w.add(f"if r.__class__ is not tuple or len(r) < {len(outs)}: wrong_count(r, {len(outs)})", index, indent)
    stores = [(slot, k) for k, slot in enumerate(outs) if slot >= 0]
    if stores:
        w.add("; ".join(f"v[{slot}] = r[{k}]" for slot, k in stores), index, indent)


def _viewed(w: _Writer, index: int, step: Step, fn: str, args: str) -> None:
    """A step whose single output has a planned buffer: offer it as ``out=``, and keep the
    retry and drop rules of :class:`~epoxy.run.executor.SequentialExecutor`."""
    slot = step.outputs[0]
    sep = ", " if args else ""
    w.add(f"view = arena[{slot}]", index)
    w.add("if view is None:", index)
    w.add(f"v[{slot}] = {fn}({args})", index, 2)
    w.add("else:", index)
    w.add("try:", index, 2)
    w.add(f"r = {fn}({args}{sep}out=view)", index, 3)
    w.add("except EpoxyError:", index, 2)
    w.add("raise", index, 3)
    w.add("except Exception:", index, 2)
    packed = f"({args},)" if len(step.inputs) == 1 else f"({args})"
    w.add(f"r = retry({fn}, {packed}, {slot}, pool)", index, 3)
    w.add("else:", index, 2)
    w.add("if r is not view and getattr(r, 'shape', None) != view.shape: pool.drop(" f"{slot})", index, 3)
    w.add(f"v[{slot}] = r", index, 2)


def generate(plan: ExecutionPlan, planned: set[int], *, checked: bool) -> Program:
    """Write ``plan`` as one function; ``planned``: output slots that have arena views;
    ``checked``: test the stop condition before each step."""
    w = _Writer()
    w.add("def run(v, arena, stop, pool):", indent=0)
    scope: dict[str, Any] = {"EpoxyError": EpoxyError, "wrong_count": _wrong_count, "retry": _retry}
    for index, (step, frees) in enumerate(zip(plan.steps, plan.frees)):
        fn = f"f{index}"
        scope[fn] = step.fn
        if checked:
            w.add(f"if stop.is_set(): halt(stop, {index})", index)
        args = _args(step)
        if len(step.outputs) == 1 and step.outputs[0] in planned:
            _viewed(w, index, step, fn, args)
        else:
            _store(w, index, step, f"{fn}({args})", 1)
        if frees:
            w.add(" = ".join(f"v[{slot}]" for slot in frees) + " = None", index)
    if not plan.steps:
        w.add("pass")
    scope["halt"] = _halter(plan.steps)
    filename = f"<epoxy plan {next(_serial)}>"
    code = compile("\n".join(w.lines) + "\n", filename, "exec")
    exec(code, scope)  # noqa: S102 - source generated above from slot numbers only
    run = scope["run"]
    return Program(run=run, code=run.__code__, line_steps=tuple(w.steps))


def _wrong_count(result: Any, expected: int) -> None:
    error = output_count_error(result, expected)
    if error is not None:
        raise error


def _retry(fn: Any, args: tuple[Any, ...], slot: int, pool: Any) -> Any:
    """A kernel refused its planned view (sized from a wrong declared shape): run it without,
    and never offer that slot a view again; a real failure raises here."""
    result = fn(*args)
    pool.drop(slot)
    return result


def _halter(steps: Sequence[Step]) -> Any:
    def halt(stop: Any, index: int) -> None:
        step = steps[index]
        raise stop_error(stop, f"before node {step.label!r} ({step.op_type})")

    return halt
