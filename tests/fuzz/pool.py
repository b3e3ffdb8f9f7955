"""Parent side: long-lived worker processes per runtime, replaced when they die or hang.

``run_cases`` hands cases to ``workers`` threads; each thread owns one worker process per
runtime and runs every case through each runtime in turn (epoxy first; onnxruntime in its
own processes, so that its crashes never count against epoxy). A worker that does not answer
within the timeout is asked for its Python stacks (SIGUSR1, faulthandler), then killed; the
case is a ``hang`` and the next case gets a fresh worker.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty, Queue
from typing import Any

from case import Case
from outcome import FAILURES, classify_death, first_frame, signature

HERE = Path(__file__).resolve().parent
DEFAULT_TIMEOUT = 20.0
DEFAULT_MEMORY_MB = 1024
DEFAULT_RUN_TIMEOUT = 2.0
START_TIMEOUT = 180.0


@dataclass
class RunResult:
    """How one runtime did on one case."""

    outcome: str
    detail: str
    seconds: float
    create_seconds: float | None = None
    outputs: Any = None

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURES

    @property
    def signature(self) -> str:
        return signature(self.outcome, self.detail)

    def record(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "detail": self.detail[:2000], "seconds": round(self.seconds, 4),
                "create_seconds": None if self.create_seconds is None else round(self.create_seconds, 4)}


@dataclass
class Settings:
    """What every worker of a run shares (worker.py reads them)."""

    timeout: float = DEFAULT_TIMEOUT
    memory_mb: int = DEFAULT_MEMORY_MB
    max_loop_iterations: int | None = None
    #: epoxy's own run bound (session option run_timeout_s), far below the per-case timeout so
    #: that an endless Loop ends as epoxy's RunTerminatedError; None: the default, 0: none
    run_timeout: float | None = None
    scratch: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def for_worker(self) -> dict[str, Any]:
        # the session's cap: a quarter of what the worker may allocate, so the cap is what trips
        run_timeout = min(self.timeout / 4, DEFAULT_RUN_TIMEOUT) if self.run_timeout is None else self.run_timeout
        return {"memory_mb": self.memory_mb, "session_memory": (self.memory_mb << 20) // 4,
                "max_loop_iterations": self.max_loop_iterations, "run_timeout_s": run_timeout or None,
                "scratch": self.scratch, **self.extra}


class Worker:
    """One worker process of one runtime."""

    def __init__(self, runtime: str, settings: Settings) -> None:
        self.runtime = runtime
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "MALLOC_ARENA_MAX": "2", "PYTHONFAULTHANDLER": "1", "PYTHONWARNINGS": "ignore"}
        self.stderr = tempfile.TemporaryFile(dir=settings.scratch or None)
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "worker.py"), runtime, json.dumps(settings.for_worker())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env, cwd=str(HERE))
        try:
            ready = self._read_exact(1, START_TIMEOUT)
        except TimeoutError:
            ready = None
        if ready != b"R":
            self.kill()
            raise RuntimeError(f"{runtime} worker did not start:\n{self._stderr_since(0)}")

    def _read_exact(self, n: int, timeout: float) -> bytes | None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        data = b""
        deadline = time.monotonic() + timeout
        while len(data) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise TimeoutError
            chunk = os.read(fd, n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def _stderr_since(self, offset: int) -> str:
        self.stderr.seek(offset)
        text = self.stderr.read()[-20000:].decode(errors="replace")
        self.stderr.seek(0, os.SEEK_END)
        return text

    def run(self, case: Case, timeout: float) -> RunResult:
        offset = self.stderr.seek(0, os.SEEK_END)
        blob = pickle.dumps(case.payload())
        start = time.perf_counter()
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(struct.pack("<Q", len(blob)) + blob)
            self.proc.stdin.flush()
            header = self._read_exact(8, timeout)
            payload = None if header is None else self._read_exact(struct.unpack("<Q", header)[0], timeout)
        except TimeoutError:
            return self._hung(offset, timeout, time.perf_counter() - start)
        except OSError:
            payload = None
        if payload is None:
            code = self.proc.wait()
            outcome, detail = classify_death(code, self._stderr_since(offset))
            return RunResult(outcome, detail, time.perf_counter() - start)
        answer = pickle.loads(payload)
        return RunResult(answer["outcome"], answer["detail"], answer["seconds"], answer["create_seconds"],
                         answer["outputs"])

    def _hung(self, offset: int, timeout: float, seconds: float) -> RunResult:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)  # faulthandler dumps every thread's stack
            time.sleep(0.5)
        self.kill()
        dump = self._stderr_since(offset)
        return RunResult("hang", f"no answer within {timeout:g} s\nat {first_frame(dump)}\n{dump[-6000:]}", seconds)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - a worker that will not stop is killed
            self.kill()
        self.stderr.close()


def judged(case: Case, result: RunResult) -> RunResult:
    """A run that worked although the case's external data escapes its folder is an ``escape``."""
    if case.must_refuse and result.outcome == "ok":
        result.outcome = "escape"
        result.detail = f"worked, reading external data from outside the model's folder ({result.detail})"
    return result


def run_cases(cases: Iterable[Case], *, runtimes: Sequence[str] = ("epoxy",), workers: int = 1,
              settings: Settings | None = None) -> Iterator[tuple[Case, dict[str, RunResult]]]:
    """Run ``cases`` through each of ``runtimes``; yields (case, {runtime: result}) as they finish."""
    settings = settings or Settings()
    own_scratch = not settings.scratch
    if own_scratch:
        settings.scratch = tempfile.mkdtemp(prefix="epoxy-fuzz-")
    todo: Queue[Any] = Queue(maxsize=workers * 4)
    done: Queue[Any] = Queue()
    stop = object()

    def serve() -> None:
        pool: dict[str, Worker] = {}
        try:
            while True:
                case = todo.get()
                if case is stop:
                    return
                results = {}
                for runtime in runtimes:
                    worker = pool.get(runtime)
                    if worker is None or not worker.alive:
                        worker = pool[runtime] = Worker(runtime, settings)
                    results[runtime] = judged(case, worker.run(case, settings.timeout))
                done.put((case, results))
        except BaseException as exc:  # noqa: BLE001 - a harness bug surfaces in the caller
            done.put(exc)
        finally:
            for worker in pool.values():
                worker.close()
            done.put(stop)

    threads = [threading.Thread(target=serve, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    iterator = iter(cases)
    exhausted = False
    finished = 0
    try:
        while finished < workers:
            while not exhausted and not todo.full():
                try:
                    todo.put_nowait(next(iterator))
                except StopIteration:
                    exhausted = True
                    for _ in threads:
                        todo.put(stop)
            try:
                item = done.get(timeout=0.05)
            except Empty:
                continue
            if item is stop:
                finished += 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        if own_scratch:
            shutil.rmtree(settings.scratch, ignore_errors=True)
