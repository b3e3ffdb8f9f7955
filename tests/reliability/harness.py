"""Run fuzz cases in worker subprocesses with a per-case timeout.

A case passes when creating a session and running it either works or raises an
``epoxy.EpoxyError`` subclass. It fails when the worker raises any other exception type
(``foreign``), dies (``crash``: segfault, abort, killed for memory) or does not answer
within the timeout (``hang``). A crashed or hung worker is replaced and the run goes on.

    python harness.py --worker     # what the pool starts; reads cases on stdin
"""

from __future__ import annotations

import json
import os
import pickle
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, Queue
from typing import Any

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
#: the memory cap every fuzzed session runs under (session option), and the worker's address-space cap
SESSION_MEMORY_LIMIT = 256 << 20
SESSION_MAX_LOOP_ITERATIONS = 100_000
WORKER_ADDRESS_SPACE = 6 << 30
DEFAULT_TIMEOUT = 30.0
FAILURES = ("foreign", "crash", "hang")


@dataclass
class Result:
    name: str
    outcome: str  # ok | error | foreign | crash | hang
    detail: str
    description: str
    seconds: float

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURES


# -- worker side -----------------------------------------------------------------------------
def _feeds(session: Any, rng: Any) -> dict[str, Any] | None:
    import numpy as np

    feeds: dict[str, Any] = {}
    for arg in session.get_inputs():
        value = _value_for(arg.value_type, rng, np)
        if value is _SKIP:
            return None
        feeds[arg.name] = value
    return feeds


_SKIP = object()


def _value_for(vt: Any, rng: Any, np: Any) -> Any:
    if vt.kind == "optional":
        return None
    if vt.kind == "sequence":
        element = vt.element
        if element is None or element.kind != "tensor":
            return _SKIP
        items = [_value_for(element, rng, np) for _ in range(2)]
        return _SKIP if any(i is _SKIP for i in items) else items
    if vt.kind != "tensor":
        return _SKIP
    shape = tuple(2 if not isinstance(d, int) else d for d in (vt.shape or ()))
    if vt.shape is None:
        shape = (2, 3)
    if any(d < 0 for d in shape) or int(np.prod(shape, dtype=np.float64)) > (1 << 20):
        return _SKIP  # the fuzzer does not build absurd feeds; tests/reliability/test_limits.py does
    dtype = vt.dtype if vt.dtype is not None else np.dtype(np.float32)
    if dtype.kind == "f":
        value = rng.standard_normal(shape).astype(dtype)
        if value.size and rng.random() < 0.2:
            value.reshape(-1)[0] = rng.choice([np.nan, np.inf, -np.inf])
        return value
    if dtype.kind in "iu":
        return rng.integers(0, 3, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j).astype(dtype)
    if dtype == np.dtype(object):
        return np.full(shape, "a", dtype=object)
    return np.zeros(shape, dtype)


def execute(files: dict[str, bytes], by_path: bool, options: dict[str, Any] | None = None,
            memory_limit: int | None = SESSION_MEMORY_LIMIT) -> tuple[str, str]:
    """Create a session from the case and run it once; returns (outcome, detail)."""
    import warnings

    import numpy as np

    import epoxy

    with tempfile.TemporaryDirectory() as tmp:
        if by_path:
            for name, data in files.items():
                path = Path(tmp, name)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            source: Any = str(Path(tmp, "model.onnx"))
        else:
            source = files["model.onnx"]
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                sess_options = epoxy.SessionOptions(memory_limit_bytes=memory_limit, **(options or {}),
                                                    max_loop_iterations=SESSION_MAX_LOOP_ITERATIONS)
                session = epoxy.InferenceSession(source, providers=["cpu"], sess_options=sess_options)
                feeds = _feeds(session, np.random.default_rng(0))
                if feeds is None:
                    return "ok", "created (feeds not built)"
                session.run(None, feeds)
        except epoxy.EpoxyError as exc:
            first = str(exc).splitlines()[0] if str(exc) else ""
            return "error", f"{type(exc).__name__}: {first[:300]}"
        except BaseException as exc:  # noqa: BLE001 - what the fuzzer hunts for
            if isinstance(exc, KeyboardInterrupt):
                raise
            return "foreign", "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]
    return "ok", "ran"


def worker_main() -> None:
    import faulthandler
    import resource

    try:
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_ADDRESS_SPACE, WORKER_ADDRESS_SPACE))
    except (ValueError, OSError):
        pass
    faulthandler.enable(sys.stderr)
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything a kernel prints goes to stderr, not into the protocol
    inp = sys.stdin.buffer
    import epoxy  # noqa: F401 - import once, before the first case is timed

    channel.write(b"R")
    channel.flush()
    while True:
        header = inp.read(8)
        if len(header) < 8:
            return
        (size,) = struct.unpack("<Q", header)
        files, by_path, options = pickle.loads(inp.read(size))
        outcome, detail = execute(files, by_path, options)
        payload = json.dumps([outcome, detail]).encode()
        channel.write(struct.pack("<Q", len(payload)) + payload)
        channel.flush()


# -- parent side -----------------------------------------------------------------------------
class Worker:
    def __init__(self) -> None:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "PYTHONFAULTHANDLER": "1"}
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, str(HERE / "harness.py"), "--worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, env=env)
        self._read_exact(1, 120.0)

    def _read_exact(self, n: int, timeout: float) -> bytes | None:
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
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

    def run(self, files: dict[str, bytes], by_path: bool, options: dict[str, Any], timeout: float) -> tuple[str, str]:
        blob = pickle.dumps((files, by_path, options))
        try:
            self.proc.stdin.write(struct.pack("<Q", len(blob)) + blob)  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
            header = self._read_exact(8, timeout)
            if header is None:
                return self._died()
            (size,) = struct.unpack("<Q", header)
            payload = self._read_exact(size, timeout)
            if payload is None:
                return self._died()
        except TimeoutError:
            self.kill()
            return "hang", f"no answer within {timeout:.0f} s"
        except (BrokenPipeError, OSError):
            return self._died()
        outcome, detail = json.loads(payload)
        return outcome, detail

    def _died(self) -> tuple[str, str]:
        code = self.proc.wait()
        self.stderr.seek(0)
        tail = self.stderr.read()[-3000:].decode(errors="replace")
        return "crash", f"worker exited with code {code}\n{tail}"

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # type: ignore[union-attr]
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self.kill()


def run_cases(cases: Iterable[Any], *, workers: int = 2, timeout: float = DEFAULT_TIMEOUT) -> Iterator[Result]:
    """Run ``mutate.Case`` objects over ``workers`` subprocesses; yields results as they finish."""
    todo: Queue = Queue(maxsize=workers * 4)
    done: Queue = Queue()
    stop = object()

    def serve() -> None:
        worker: Worker | None = None
        try:
            while True:
                case = todo.get()
                if case is stop:
                    return
                if worker is None or not worker.alive:
                    worker = Worker()
                start = time.perf_counter()
                outcome, detail = worker.run(case.files, case.by_path, case.options, timeout)
                done.put(Result(case.name, outcome, detail, case.description, time.perf_counter() - start))
        except BaseException as exc:  # noqa: BLE001 - surface harness bugs to the caller
            done.put(exc)
        finally:
            if worker is not None:
                worker.close()
            done.put(stop)

    threads = [threading.Thread(target=serve, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    iterator = iter(cases)
    pending = 0
    exhausted = False
    finished = 0
    while finished < workers:
        while not exhausted and not todo.full():
            try:
                todo.put_nowait(next(iterator))
                pending += 1
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
            pending -= 1
            yield item


# -- corpus ----------------------------------------------------------------------------------
def save_to_corpus(case: Any, result: Result, directory: Path = CORPUS) -> Path:
    """Store a failing case as ``corpus/<name>/`` (its files plus case.json)."""
    target = directory / case.name
    target.mkdir(parents=True, exist_ok=True)
    for name, data in case.files.items():
        (target / name).write_bytes(data)
    meta = {"description": case.description, "by_path": case.by_path, "options": case.options,
            "found": result.outcome,
            "detail": result.detail.splitlines()[-1] if result.detail else ""}
    (target / "case.json").write_text(json.dumps(meta, indent=2) + "\n")
    return target


def load_corpus(directory: Path = CORPUS) -> list[Any]:
    from mutate import Case

    cases = []
    for entry in sorted(p for p in directory.iterdir() if p.is_dir()) if directory.is_dir() else []:
        meta = json.loads((entry / "case.json").read_text())
        files = {p.name: p.read_bytes() for p in entry.iterdir() if p.name != "case.json"}
        cases.append(Case(entry.name, meta.get("description", ""), files, by_path=bool(meta.get("by_path")),
                          options=dict(meta.get("options") or {})))
    return cases


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        worker_main()
    else:
        raise SystemExit("usage: harness.py --worker (see fuzz.py for the fuzzer)")
