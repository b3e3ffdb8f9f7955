"""The worker process: runs fuzz cases through one runtime, under an address-space cap.

    python worker.py RUNTIME SETTINGS_JSON     (started by pool.py; cases come on stdin)

Each case is written to a fresh folder when it is loaded by path (the model's folder ``m/``,
``..`` files beside it, and ``cwd/``, the working directory during the case), created, fed
and run once. The answer is the outcome class (outcome.py), a detail, the seconds spent
creating and running, and the outputs for the comparison (when small). Settings: ``memory_mb``
(what the worker may allocate beyond its size after imports: RLIMIT_AS), ``session_memory``
(epoxy's ``memory_limit_bytes``), ``max_loop_iterations`` (None: epoxy's default),
``run_timeout_s`` (epoxy's run time bound, where it has one; None: none), ``scratch``
(the folder the pool removes at the end, where case folders are made).

Runtimes are registered in ``RUNTIMES``: ``epoxy`` (cpu provider), ``onnxruntime`` (CPU, one
thread) and ``probe``, which does what the model bytes say (segfault, hang, oom...) so that the
harness's own classification is tested.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import feedspec  # noqa: E402
from outcome import classify_exception  # noqa: E402

#: outputs larger than this are not sent back (and not compared)
OUTPUT_LIMIT = 8 << 20


class EpoxyRuntime:
    name = "epoxy"

    def load(self) -> None:
        # ep-cpu's jit tier compiles a kernel at its first call (seconds, cold cache), which the
        # run bound (run_timeout_s) would count as a hang; the numpy kernels, the reference
        # path, are what is fuzzed here unless the caller asks for the jit (EPOXY_CPU_JIT=1)
        os.environ.setdefault("EPOXY_CPU_JIT", "0")
        import epoxy

        self.epoxy = epoxy
        # the session time bound (epoxy.run_timeout_s) where this epoxy has it
        self.bounded = hasattr(epoxy.SessionOptions(), "run_timeout_s")
        self._warm_up()

    def _warm_up(self) -> None:
        """One tiny session before the first timed case: what a session imports lazily (onnx_ir
        and sympy, the optimizer, the kernels) takes seconds on a loaded machine and belongs to
        no case (two CI cases once 'hung' at 30 s importing sympy)."""
        import numpy as np
        import onnx_ir  # noqa: F401
        from onnx import TensorProto, helper

        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
        graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "warm_up", [x], [y])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        session = self.epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"])
        session.run(None, {"x": np.ones(2, np.float32)})

    def owns(self, exc: BaseException) -> bool:
        return isinstance(exc, self.epoxy.EpoxyError)

    def create(self, source: Any, options: dict[str, Any], settings: dict[str, Any]) -> Any:
        extra = {k: settings[k] for k in ("max_loop_iterations", "run_timeout_s") if settings.get(k)}
        if not self.bounded:
            extra.pop("run_timeout_s", None)
        so = self.epoxy.SessionOptions(memory_limit_bytes=settings.get("session_memory"), **options, **extra)
        return self.epoxy.InferenceSession(source, providers=["cpu"], sess_options=so)

    def run(self, session: Any, feeds: dict[str, Any]) -> list[Any]:
        return list(session.run(None, feeds))


class OnnxruntimeRuntime:
    name = "onnxruntime"

    def load(self) -> None:
        import onnxruntime

        onnxruntime.set_default_logger_severity(4)
        self.ort = onnxruntime

    def owns(self, exc: BaseException) -> bool:
        return type(exc).__module__.startswith("onnxruntime")

    def create(self, source: Any, options: dict[str, Any], settings: dict[str, Any]) -> Any:
        so = self.ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.log_severity_level = 4
        return self.ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])

    def run(self, session: Any, feeds: dict[str, Any]) -> list[Any]:
        return list(session.run(None, feeds))


class ProbeError(Exception):
    """The probe runtime's own error type."""


class ProbeRuntime:
    """Does what the model bytes say: the harness's classification, tested without a bug to find."""

    name = "probe"

    def load(self) -> None:
        pass

    def owns(self, exc: BaseException) -> bool:
        return isinstance(exc, ProbeError)

    def create(self, source: Any, options: dict[str, Any], settings: dict[str, Any]) -> Any:
        return Path(source).read_bytes() if isinstance(source, str) else source

    def run(self, session: Any, feeds: dict[str, Any]) -> list[Any]:
        import ctypes
        import signal

        import numpy as np

        command = session.decode()
        if command == "ok":
            return [np.arange(3, dtype=np.float32)]
        if command == "error":
            raise ProbeError("refused 'x' at 12")
        if command == "foreign":
            raise ValueError("a bare ValueError")
        if command == "oom":
            return [np.ones(1 << 40, np.uint8)]
        if command == "wrapped-oom":
            try:
                np.ones(1 << 40, np.uint8)
            except MemoryError as exc:
                raise ProbeError("allocation failed") from exc
        if command == "segfault":
            ctypes.string_at(0)
        if command == "abort":
            os.abort()
        if command == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if command == "hang":
            while True:
                time.sleep(0.01)
        if command == "files":  # what the case layout put where
            return [np.array(sorted(os.listdir(".")) + sorted(os.listdir("..")), dtype=object)]
        if command == "feeds":
            return [feeds[k] for k in sorted(feeds)]
        raise ProbeError(f"unknown probe {command!r}")


RUNTIMES = {r.name: r for r in (EpoxyRuntime, OnnxruntimeRuntime, ProbeRuntime)}


def _write(root: Path, files: dict[str, bytes], cwd_files: dict[str, bytes]) -> tuple[Path, Path]:
    model_dir, cwd = root / "m", root / "cwd"
    model_dir.mkdir()
    cwd.mkdir()
    for base, group in ((model_dir, files), (cwd, cwd_files)):
        for name, data in group.items():
            path = (base / name).resolve()
            if not path.is_relative_to(root.resolve()):  # the case layout never leaves the case folder
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    return model_dir, cwd


def _pack(outputs: list[Any]) -> list[Any] | None:
    import numpy as np

    size = 0
    packed = []
    for value in outputs:
        if isinstance(value, list):
            items = _pack(value)
            if items is None:
                return None
            packed.append(items)
            continue
        if value is not None and not isinstance(value, np.ndarray | dict):
            value = np.asarray(value)
        size += getattr(value, "nbytes", 0)
        if size > OUTPUT_LIMIT:
            return None
        packed.append(value)
    return packed


def _feeds(files: dict[str, bytes], feeds: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str]:
    """The feeds to run with, built here; (None, why) when the harness cannot build them (its own
    failure, never the runtime's)."""
    import numpy as np
    import onnx

    try:
        if feeds is None:
            feeds = feedspec.declared_feeds(onnx.load_from_string(files["model.onnx"]), np.random.default_rng(0))
            if feeds is None:
                return None, "created (no feeds could be built from the declared inputs)"
        return feedspec.materialize_all(feeds), ""
    except Exception as exc:  # noqa: BLE001 - MemoryError included: a feed too large for this worker
        return None, f"created (the harness could not build the feeds: {type(exc).__name__})"


def run_case(runtime: Any, payload: tuple[Any, ...], settings: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """Create, feed and run one case; the answer sent to the parent."""
    import warnings

    import numpy as np

    files, cwd_files, by_path, options, feeds = payload
    answer: dict[str, Any] = {"outcome": "ok", "detail": "ran", "create_seconds": None, "outputs": None}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        model_dir, cwd = _write(Path(tmp), files if by_path else {}, cwd_files)
        source: Any = str(model_dir / "model.onnx") if by_path else files["model.onnx"]
        os.chdir(cwd)
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                session = runtime.create(source, options, settings)
                answer["create_seconds"] = time.perf_counter() - start
                built, why = _feeds(files, feeds)
                if built is None:
                    answer["detail"] = why
                else:
                    answer["outputs"] = _pack(runtime.run(session, built))
                    del built
        except BaseException as exc:  # noqa: BLE001 - what the fuzzer hunts for
            if isinstance(exc, KeyboardInterrupt):
                raise
            answer["outcome"], answer["detail"] = classify_exception(exc, runtime.owns(exc))
            answer["outputs"] = None
        finally:
            os.chdir(scratch)
    answer["seconds"] = time.perf_counter() - start
    return answer


def _cap_memory(headroom_mb: int) -> None:
    import resource

    with open("/proc/self/status") as f:
        size_kb = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
    cap = size_kb * 1024 + (headroom_mb << 20)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    except (ValueError, OSError):
        pass


def main(runtime_name: str, settings: dict[str, Any]) -> None:
    import faulthandler
    import signal

    faulthandler.enable(sys.stderr)
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)  # the parent asks on a hang
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything a kernel prints goes to stderr, not into the protocol
    inp = sys.stdin.buffer
    runtime = RUNTIMES[runtime_name]()
    runtime.load()
    import onnx  # noqa: F401 - import before the cap and the first timed case
    try:  # ep-cpu's jit tier imports numba at its first compiled kernel: its ~300 MB of address
        import numba  # noqa: F401  space belongs to the imports, not to a case's allowance
    except Exception:  # noqa: BLE001 - not installed, or not importable here: nothing to count
        pass
    scratch = Path(tempfile.mkdtemp(prefix=f"{runtime_name}-", dir=settings.get("scratch")))
    os.chdir(scratch)
    if settings.get("memory_mb"):
        _cap_memory(int(settings["memory_mb"]))
    channel.write(b"R")
    channel.flush()
    while True:
        header = inp.read(8)
        if len(header) < 8:
            return
        (size,) = struct.unpack("<Q", header)
        answer = run_case(runtime, pickle.loads(inp.read(size)), settings, scratch)
        try:
            blob = pickle.dumps(answer)
        except Exception:  # noqa: BLE001 - outputs that do not pickle are not compared
            answer["outputs"] = None
            blob = pickle.dumps(answer)
        channel.write(struct.pack("<Q", len(blob)) + blob)
        channel.flush()


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})
