"""Per-step profiling: timings of every kernel call, a top-ops summary and a Chrome trace.

Enabled with ``SessionOptions(enable_profiling=True)``; ``session.end_profiling()`` writes
the trace in the format onnxruntime's profiler writes (a JSON list of complete events:
``Session`` events for model loading, session initialization and each ``model_run``,
``Node`` events named ``<node>_kernel_time`` with ``op_name`` and ``provider`` in ``args``),
so scripts that read onnxruntime profiles read epoxy's; chrome://tracing and Perfetto open it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..contract import OUT_PARTS
from .executor import ExecutionPlan


@dataclass(frozen=True)
class StepEvent:
    """One step's execution: what ran where, when (µs since profiling started) and how long."""

    run: int
    label: str
    op_type: str
    provider: str
    start_us: float
    duration_us: float
    thread: int


class Profiler:
    """Collects events; thread-safe so parallel runs can record into it.

    ``origin``: the ``perf_counter`` time events count from (the session's start);
    ``session_phases``: seconds spent in each creation phase (load, optimize, ...), shown as
    onnxruntime's ``model_loading_uri`` and ``session_initialization`` events."""

    def __init__(self, origin: float | None = None, session_phases: dict[str, float] | None = None) -> None:
        self.origin = time.perf_counter() if origin is None else origin
        self.session_phases = dict(session_phases or {})
        self.events: list[StepEvent] = []
        self.run_spans: list[tuple[int, float, float]] = []  # (run, start us, duration us)
        self.runs = 0
        self._lock = threading.Lock()

    def next_run(self) -> int:
        with self._lock:
            self.runs += 1
            return self.runs

    def record_run(self, run: int, start: float, end: float) -> None:
        with self._lock:
            self.run_spans.append((run, (start - self.origin) * 1e6, (end - start) * 1e6))

    def record(self, event: StepEvent) -> None:
        with self._lock:
            self.events.append(event)

    def top_ops(self, limit: int = 15) -> list[dict[str, Any]]:
        """Time per op type over all profiled runs, largest first."""
        total: dict[tuple[str, str], list[float]] = defaultdict(list)
        for e in self.events:
            total[(e.op_type, e.provider)].append(e.duration_us)
        grand = sum(sum(v) for v in total.values()) or 1.0
        rows: list[dict[str, Any]] = [
            {"op_type": op, "provider": prov, "calls": len(v), "total_ms": sum(v) / 1e3,
             "mean_us": sum(v) / len(v), "share": sum(v) / grand}
            for (op, prov), v in total.items()
        ]
        return sorted(rows, key=lambda r: -r["total_ms"])[:limit]

    def trace_events(self, provider_names: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """onnxruntime's profile: complete events in microseconds since the session began.
        ``provider_names``: epoxy name -> the name to show (the alias the user asked with)."""
        names = provider_names or {}
        pid = os.getpid()
        tid = threading.get_ident()

        def event(cat: str, name: str, ts: float, dur: float, thread: int, args: dict[str, Any]) -> dict[str, Any]:
            return {"cat": cat, "pid": pid, "tid": thread, "dur": int(round(dur)), "ts": int(round(ts)), "ph": "X",
                    "name": name, "args": args}

        load = self.session_phases.get("load", 0.0) * 1e6
        init = sum(v for k, v in self.session_phases.items() if k != "load") * 1e6
        events = [event("Session", "model_loading_uri", 0.0, load, tid, {}),
                  event("Session", "session_initialization", load, init, tid, {})]
        events += [event("Session", "model_run", start, dur, tid, {"run": run}) for run, start, dur in self.run_spans]
        events += [event("Node", f"{e.label}_kernel_time", e.start_us, e.duration_us, e.thread,
                         {"op_name": e.op_type, "provider": names.get(e.provider, e.provider), "run": e.run})
                   for e in self.events]
        return sorted(events, key=lambda e: e["ts"])

    def write(self, path: str, provider_names: dict[str, str] | None = None) -> str:
        with open(path, "w") as f:
            json.dump(self.trace_events(provider_names), f)
        return path


def timed(fn: Any, step: Any, profiler: Profiler, run_id: Any) -> Any:
    """Wrap a step's callable so each call records a StepEvent."""

    def call(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            end = time.perf_counter()
            profiler.record(StepEvent(run_id[0], step.label, step.op_type, step.provider,
                                      (start - profiler.origin) * 1e6, (end - start) * 1e6, threading.get_ident()))

    if getattr(fn, "supports_out", False):
        call.supports_out = True  # type: ignore[attr-defined]
        if getattr(fn, OUT_PARTS, None) is not None:
            setattr(call, OUT_PARTS, getattr(fn, OUT_PARTS))
    return call


class ProfilingExecutor:
    """Any executor (sequential or parallel) over a plan whose steps are timed, with each
    run's span recorded: profiling never changes how the session runs."""

    def __init__(self, plan: ExecutionPlan, profiler: Profiler,
                 make_executor: Callable[[ExecutionPlan], Any]) -> None:
        self.profiler = profiler
        self._run_id = [0]
        timed_steps = [replace(step, fn=timed(step.fn, step, profiler, self._run_id)) for step in plan.steps]
        self.plan = plan
        self._inner = make_executor(replace(plan, steps=timed_steps))

    def run(self, feeds: Sequence[tuple[int, Any]], fetch: Sequence[int], stop: Any = None) -> list[Any]:
        run = self._run_id[0] = self.profiler.next_run()
        start = time.perf_counter()
        try:
            return self._inner.run(feeds, fetch, stop)
        finally:
            self.profiler.record_run(run, start, time.perf_counter())
