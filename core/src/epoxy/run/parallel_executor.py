"""Inter-op parallel executor: independent steps run on a thread pool.

numpy releases the GIL inside heavy kernels (matmul, conv's BLAS calls, large ufuncs), so
independent branches (inception blocks, attention heads split by the exporter) overlap.
Memory rule: a value is released when its last reader *finishes* (reference counts), so
peak memory can exceed the sequential plan's; outputs are never written into shared
buffers, so there is no reuse hazard between concurrently running steps.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import EpoxyError
from ..kit.float_errors import quiet_floats
from .executor import RUN_STOP, ExecutionPlan, output_count_error, step_error
from .run_bound import stop_error


class ParallelExecutor:
    """Runs steps as soon as the steps they depend on have finished."""

    def __init__(self, plan: ExecutionPlan, threads: int) -> None:
        self.plan = plan
        self.threads = max(1, threads)
        steps = plan.steps
        self._users: list[list[int]] = [[] for _ in steps]
        for index, step in enumerate(steps):
            for dep in step.after:
                self._users[dep].append(index)
        self._indegree = [len(s.after) for s in steps]
        self._roots = [i for i, d in enumerate(self._indegree) if d == 0]
        protected = set(plan.output_slots.values())
        readers: dict[int, int] = {}
        for step in steps:
            for slot in set(step.inputs):
                readers[slot] = readers.get(slot, 0) + 1
        initial = {i for i, v in enumerate(plan.initial) if v is not None}
        self._readers = {s: n for s, n in readers.items() if s not in protected and s not in initial}
        self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="epoxy-inter-op")

    def run(self, feeds: Sequence[tuple[int, Any]], fetch: Sequence[int], stop: Any = None) -> list[Any]:
        """As :meth:`SequentialExecutor.run`; ``stop`` is checked before each step."""
        plan = self.plan
        values = list(plan.initial)
        for slot, value in feeds:
            values[slot] = value
        pending = list(self._indegree)
        readers = dict(self._readers)
        lock = threading.Lock()
        done = threading.Event()
        remaining = [len(plan.steps)]
        failure: list[BaseException] = []

        def finish(index: int) -> None:
            ready = []
            with lock:
                for slot in set(plan.steps[index].inputs):
                    if slot in readers:
                        readers[slot] -= 1
                        if readers[slot] == 0:
                            values[slot] = None
                for user in self._users[index]:
                    pending[user] -= 1
                    if pending[user] == 0:
                        ready.append(user)
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()
            for user in ready:
                submit(user)

        def submit(index: int) -> None:
            if stop is None:
                self._pool.submit(execute, index)
            else:  # kernels' own loops (Loop, Scan) read the stop flag from the context
                self._pool.submit(contextvars.copy_context().run, execute, index)

        def execute(index: int) -> None:
            if failure:
                return
            step = plan.steps[index]
            try:
                if stop is not None and stop.is_set():
                    raise stop_error(stop, f"before node {step.label!r} ({step.op_type})")
                with quiet_floats():
                    result = step.fn(*[values[i] for i in step.inputs])
                if len(step.outputs) == 1:
                    values[step.outputs[0]] = result
                else:
                    wrong = output_count_error(result, len(step.outputs))
                    if wrong is not None:
                        raise wrong
                    for slot, value in zip(step.outputs, result):
                        values[slot] = value
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                failure.append(exc if isinstance(exc, EpoxyError) or not isinstance(exc, Exception)
                               else step_error(step, exc, plan.slot_names))
                failure[-1].__cause__ = exc if failure[-1] is not exc else None
                done.set()
                return
            finish(index)

        if not plan.steps:
            return [values[s] for s in fetch]
        token = RUN_STOP.set(stop) if stop is not None else None
        try:
            for root in self._roots:
                submit(root)
        finally:
            if token is not None:
                RUN_STOP.reset(token)
        done.wait()
        if failure:
            raise failure[0]
        return [values[s] for s in fetch]
