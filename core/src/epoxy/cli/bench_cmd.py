"""``epoxy bench MODEL``: warm-up, timed runs with a progress bar, percentiles; optionally
onnxruntime side by side (interleaved blocks, ratio) and a per-op profile / Chrome trace."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..contract import ValueType
from ..errors import InvalidArgumentError
from ..options import SessionOptions
from ..run.threads import describe_blas
from ._format import providers_arg, table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path to an .onnx model")
    parser.add_argument("--providers", help="comma-separated, priority order (default: all available)")
    parser.add_argument("--runs", type=int, default=50, help="timed runs (default 50)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs first (default 5)")
    parser.add_argument("--threads", type=int, default=0, help="intra-op (BLAS) threads; 0 = library default")
    parser.add_argument("--parallel", action="store_true", help="inter-op parallel executor")
    parser.add_argument(
        "--dim", action="append", default=[], metavar="NAME=N", help="value of a symbolic dim (default 1)"
    )
    parser.add_argument(
        "--compare-onnxruntime", action="store_true", help="time onnxruntime too, interleaved; print the ratio"
    )
    parser.add_argument("--profile", action="store_true", help="print the ops taking the most time")
    parser.add_argument("--trace", help="with --profile: write a Chrome trace JSON here")
    parser.add_argument("--seed", type=int, default=0)


def _dims(specs: list[str]) -> dict[str, int]:
    out = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not value.isdigit():
            raise InvalidArgumentError(f"--dim must look like name=N, got {spec!r}")
        out[name] = int(value)
    return out


def random_feed(vt: ValueType, dims: dict[str, int], rng: np.random.Generator, name: str) -> np.ndarray:
    """A random tensor matching a declared input (symbolic dims from ``dims``, else 1)."""
    if vt.kind != "tensor" or vt.dtype is None or vt.shape is None:
        raise InvalidArgumentError(
            f"input {name!r}: cannot make a random value for {vt.kind} inputs of unknown type/rank"
        )
    shape = tuple(d if isinstance(d, int) else dims.get(str(d), 1) for d in vt.shape)
    if vt.dtype.kind == "f":
        return rng.standard_normal(shape).astype(vt.dtype)
    if vt.dtype.kind in "iu":
        return rng.integers(0, 10, shape).astype(vt.dtype)
    if vt.dtype.kind == "b":
        return rng.random(shape) < 0.5
    raise InvalidArgumentError(f"input {name!r}: no random generator for dtype {vt.dtype}")


def _progress(done: int, total: int, label: str) -> None:
    if not sys.stderr.isatty():
        return
    width = 30
    filled = int(width * done / max(1, total))
    sys.stderr.write(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    pick = lambda q: ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]  # noqa: E731
    return {"p50": statistics.median(ordered), "p90": pick(0.9), "p99": pick(0.99), "min": ordered[0]}


def _time_interleaved(runners: dict[str, Callable[[], Any]], runs: int, block: int = 5) -> dict[str, list[float]]:
    """Alternate runtimes in blocks, dropping each block's first call (spinning thread pools)."""
    samples: dict[str, list[float]] = {name: [] for name in runners}
    order = list(runners)
    rounds = 0
    while min(len(s) for s in samples.values()) < runs:
        for name in order[rounds % len(order):] + order[: rounds % len(order)]:
            fn = runners[name]
            fn()
            for _ in range(block):
                start = time.perf_counter()
                fn()
                samples[name].append((time.perf_counter() - start) * 1e3)
        rounds += 1
        _progress(min(runs, min(len(s) for s in samples.values())), runs, "timing")
    return {k: v[:runs] for k, v in samples.items()}


def _onnxruntime_runner(model: str, feeds: dict[str, np.ndarray], threads: int) -> Callable[[], Any]:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise InvalidArgumentError("--compare-onnxruntime needs onnxruntime: pip install onnxruntime") from exc
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    return lambda: session.run(None, feeds)


def run(args: argparse.Namespace) -> int:
    options = SessionOptions(intra_op_num_threads=args.threads, enable_profiling=args.profile,
                             execution_mode="parallel" if args.parallel else "sequential")
    start = time.perf_counter()
    from ..session import InferenceSession  # loads onnx_ir: only for commands that run a model

    session = InferenceSession(args.model, providers=providers_arg(args.providers), sess_options=options)
    created_ms = (time.perf_counter() - start) * 1e3
    rng = np.random.default_rng(args.seed)
    dims = _dims(args.dim)
    feeds = {i.name: random_feed(i.value_type, dims, rng, i.name) for i in session.get_inputs()}
    runners: dict[str, Callable[[], Any]] = {"epoxy": lambda: session.run(None, feeds)}
    if args.compare_onnxruntime:
        runners["onnxruntime"] = _onnxruntime_runner(args.model, feeds, args.threads)
    for i in range(args.warmup):
        for fn in runners.values():
            fn()
        _progress(i + 1, args.warmup, "warm-up")
    samples = _time_interleaved(runners, max(1, args.runs))
    stats = {name: _percentiles(s) for name, s in samples.items()}
    print(f"model: {args.model}\nproviders: {', '.join(session.get_providers())}; "
          f"session created in {created_ms:.1f} ms; {len(session._plan.steps)} steps")
    if "cpu" in session.get_providers():
        print(f"numpy BLAS (the cpu provider's GEMMs): {describe_blas()}")
    rows = [[name, f"{st['p50']:.3f}", f"{st['p90']:.3f}", f"{st['p99']:.3f}", f"{st['min']:.3f}", len(samples[name])]
            for name, st in stats.items()]
    print(table(["runtime", "p50 ms", "p90 ms", "p99 ms", "min ms", "runs"], rows))
    if "onnxruntime" in stats:
        ratio = stats["epoxy"]["p50"] / stats["onnxruntime"]["p50"]
        print(f"epoxy / onnxruntime (p50): {ratio:.2f}x")
    if args.profile:
        top = session.profile_summary()
        print("\ntop ops (all profiled runs, incl. warm-up):")
        print(table(["op", "provider", "calls", "total ms", "mean us", "share"],
                    [[r["op_type"], r["provider"], r["calls"], f"{r['total_ms']:.1f}", f"{r['mean_us']:.1f}",
                      f"{100 * r['share']:.1f}%"] for r in top]))
        if args.trace:
            print(f"trace written to {session.end_profiling(args.trace)}")
    return 0
