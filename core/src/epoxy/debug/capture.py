"""Keep every value a session computes, by ONNX value name, without changing how it runs.

The session's own plan (same partition, same fusions, same kernels) runs once more with
each step's callable wrapped, as :class:`~epoxy.run.profiling.ProfilingExecutor` wraps them
for timing; each output is copied to the host as it is produced, because planned buffers
and frees reuse memory later in the run. A compiled group only exposes its outputs: those
are the values a comparison can see inside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the executor loads on the first capture, not with the CLI parser
    from ..run.executor import ExecutionPlan, Step

#: op type of the device copy steps the planner inserts: not a node of the model
COPY_OP = "MemcpyDevice"


@dataclass(frozen=True)
class Producer:
    """The step that produced a value: node (or fused group) label, op type, provider."""

    node: str
    op_type: str
    provider: str


@dataclass
class Capture:
    """Values by name in the order they were produced (a topological order), their producers,
    and the run's outputs (or the exception the run raised)."""

    values: dict[str, np.ndarray] = field(default_factory=dict)
    producers: dict[str, Producer] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    error: Exception | None = None


def _host_copy(value: Any, to_host: Any) -> np.ndarray | None:
    """A host array that later steps cannot overwrite; None for non-tensor values."""
    if to_host is not None and not isinstance(value, np.ndarray):
        try:
            value = to_host(value)
        except Exception:  # noqa: BLE001 - a value the allocator cannot read is just not compared
            return None
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True)
    if isinstance(value, np.generic):
        return np.asarray(value).copy()
    return None


def _recording(step: Step, names: list[str], capture: Capture, to_host: Any) -> Any:
    """``step.fn`` storing its outputs in ``capture`` under their value names."""
    fn = step.fn
    slots = step.outputs
    producer = Producer(step.label, step.op_type, step.provider)

    def call(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        results = result if len(slots) != 1 else (result,)
        for slot, value in zip(slots, results):
            if not 0 <= slot < len(names) or names[slot].startswith("<"):
                continue
            name = names[slot].split("@", 1)[0]
            copied = _host_copy(value, to_host if "@" in names[slot] else None)
            if copied is not None:
                capture.values[name] = copied
                capture.producers[name] = producer
        return result

    return call


def _allocators(session: Any) -> dict[str, Any]:
    """provider name -> its allocator's ``to_host`` (device values are read through it)."""
    out = {}
    for name, provider in getattr(session, "_providers", []):
        allocator = getattr(provider, "allocator", None)
        if allocator is not None and not getattr(allocator, "is_host", False):
            out[name] = allocator.to_host
    return out


def capturing_plan(plan: ExecutionPlan, capture: Capture, to_host: Mapping[str, Any]) -> ExecutionPlan:
    """``plan`` with every node step recording into ``capture``; no planned buffers (their
    reuse would not change a value, but a copy is what we keep anyway)."""
    names = plan.slot_names
    steps = [step if step.op_type == COPY_OP else
             replace(step, fn=_recording(step, names, capture, to_host.get(step.provider)))
             for step in plan.steps]
    return replace(plan, steps=steps, arena=None)


def capture_session(session: Any, feeds: Mapping[str, Any]) -> Capture:
    """Run ``session`` once on ``feeds`` keeping every intermediate value.

    The session's executor is swapped for the run (and put back), so feeds are checked and
    outputs returned exactly as ``session.run`` does. An exception is kept in
    ``Capture.error``: the values produced before it are still there."""
    from ..run.executor import SequentialExecutor

    capture = Capture()
    plan = capturing_plan(session._plan, capture, _allocators(session))
    saved = session._executor
    session._executor = SequentialExecutor(plan)
    try:
        results = session.run(None, dict(feeds))
        capture.outputs = {o.name: r for o, r in zip(session.get_outputs(), results)}
    except Exception as exc:  # noqa: BLE001 - the caller reports it (validate) or looks for it (reduce)
        capture.error = exc
    finally:
        session._executor = saved
    return capture
