"""Per-step profiling: timings of every kernel call, a top-ops summary and a Chrome trace.

Enabled with ``SessionOptions(enable_profiling=True)``; ``session.end_profiling()`` writes
a trace loadable in chrome://tracing or Perfetto, as onnxruntime's profiler does.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .executor import ExecutionPlan, SequentialExecutor


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
    """Collects events; thread-safe so parallel runs can record into it."""

    def __init__(self) -> None:
        self.origin = time.perf_counter()
        self.events: list[StepEvent] = []
        self.runs = 0
        self._lock = threading.Lock()

    def next_run(self) -> int:
        with self._lock:
            self.runs += 1
            return self.runs

    def record(self, event: StepEvent) -> None:
        with self._lock:
            self.events.append(event)

    def top_ops(self, limit: int = 15) -> list[dict[str, Any]]:
        """Time per op type over all profiled runs, largest first."""
        total: dict[tuple[str, str], list[float]] = defaultdict(list)
        for e in self.events:
            total[(e.op_type, e.provider)].append(e.duration_us)
        grand = sum(sum(v) for v in total.values()) or 1.0
        rows = [
            {"op_type": op, "provider": prov, "calls": len(v), "total_ms": sum(v) / 1e3,
             "mean_us": sum(v) / len(v), "share": sum(v) / grand}
            for (op, prov), v in total.items()
        ]
        return sorted(rows, key=lambda r: -r["total_ms"])[:limit]

    def chrome_trace(self) -> dict[str, Any]:
        return {
            "traceEvents": [
                {"name": e.label, "cat": e.op_type, "ph": "X", "ts": e.start_us, "dur": e.duration_us,
                 "pid": os.getpid(), "tid": e.thread, "args": {"op_type": e.op_type, "provider": e.provider, "run": e.run}}
                for e in self.events
            ],
            "displayTimeUnit": "ms",
        }

    def write(self, path: str) -> str:
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)
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

    return call


class ProfilingExecutor(SequentialExecutor):
    """The sequential executor with every step timed."""

    def __init__(self, plan: ExecutionPlan, profiler: Profiler) -> None:
        super().__init__(plan)
        self.profiler = profiler
        self._run_id = [0]
        self._program = [
            (timed(fn, step, profiler, self._run_id), ins, single, outs, frees, use_out)
            for (fn, ins, single, outs, frees, use_out), step in zip(self._program, plan.steps)
        ]

    def run(self, feeds: Sequence[tuple[int, Any]], fetch: Sequence[int]) -> list[Any]:
        self._run_id[0] = self.profiler.next_run()
        return super().run(feeds, fetch)
