"""``epoxy bench MODEL``: warm-up, timed runs with a progress bar, percentiles. Several
provider sets side by side (``--providers cpu --providers openvino,cpu``), onnxruntime and
OpenVINO on their own as reference columns (``--compare``), runs interleaved in blocks so
every column sees the same machine state; a plot of the latency distributions
(``--plot``, needs matplotlib) and a per-op profile / Chrome trace."""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from importlib import import_module
from pathlib import Path
from typing import Any

import numpy as np

from ..contract import ValueType
from ..errors import InvalidArgumentError
from ..options import SessionOptions
from ..run.threads import describe_blas
from ._console import Advance, Console, console_for
from ._format import providers_arg

EXAMPLE = """example:
  epoxy bench model.onnx --providers cpu --providers openvino,cpu --compare all --runs 100
  epoxy bench model.onnx --dim batch=8 --plot latency.png        # needs: pip install 'epoxy-core[plot]'
  epoxy bench model.onnx --providers cpu --profile --trace trace.json
"""

PLOT_INSTALL = "pip install 'epoxy-core[plot]' (or: pip install matplotlib)"
STAT_ROWS = (("p50 ms", "p50"), ("p90 ms", "p90"), ("p99 ms", "p99"), ("min ms", "min"), ("mean ms", "mean"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path to an .onnx model")
    parser.add_argument("--providers", action="append", default=[], metavar="A,B",
                        help="a provider set, comma-separated in priority order; repeat to compare sets side by side "
                             "(default: one set of all available)")
    parser.add_argument("--runs", type=int, default=50, help="timed runs per column (default 50)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs first (default 5)")
    parser.add_argument("--threads", type=int, default=0, help="intra-op (BLAS) threads; 0 = library default")
    parser.add_argument("--parallel", action="store_true", help="inter-op parallel executor")
    parser.add_argument(
        "--dim", action="append", default=[], metavar="NAME=N", help="value of a symbolic dim (default 1)"
    )
    parser.add_argument("--compare", action="append", default=[], choices=[*REFERENCES, "all"],
                        help="also time this runtime on its own (repeat; all: every one installed)")
    parser.add_argument("--compare-onnxruntime", action="store_true", help="same as --compare onnxruntime")
    parser.add_argument("--plot", metavar="OUT.png", help="write a plot of the latency distributions (matplotlib)")
    parser.add_argument("--profile", action="store_true", help="print the ops taking the most time")
    parser.add_argument("--trace", help="with --profile: write a Chrome trace JSON here (one per provider set)")
    parser.add_argument("--json", action="store_true", help="machine-readable output (percentiles and samples)")
    parser.add_argument("--seed", type=int, default=0)


def parse_dims(specs: list[str]) -> dict[str, int]:
    """``--dim name=N`` values."""
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


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    """p50/p90/p99 (nearest rank), min and mean of a column's samples."""
    ordered = sorted(samples_ms)
    pick = lambda q: ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]  # noqa: E731
    return {"p50": statistics.median(ordered), "p90": pick(0.9), "p99": pick(0.99), "min": ordered[0],
            "mean": statistics.fmean(ordered)}


def time_interleaved(runners: Mapping[str, Callable[[], Any]], runs: int, advance: Advance,
                     block: int = 5) -> dict[str, list[float]]:
    """Alternate runtimes in blocks, dropping each block's first call (spinning thread pools)."""
    samples: dict[str, list[float]] = {name: [] for name in runners}
    order = list(runners)
    rounds = 0
    while min(len(s) for s in samples.values()) < runs:
        before = min(runs, min(len(s) for s in samples.values()))
        for name in order[rounds % len(order):] + order[: rounds % len(order)]:
            fn = runners[name]
            fn()
            for _ in range(block):
                start = time.perf_counter()
                fn()
                samples[name].append((time.perf_counter() - start) * 1e3)
        rounds += 1
        advance(min(runs, min(len(s) for s in samples.values())) - before)
    return {k: v[:runs] for k, v in samples.items()}


# -- reference runtimes: each timed on its own, on the host CPU --------------------------------

def _onnxruntime_runner(model: str, feeds: dict[str, np.ndarray], threads: int) -> Callable[[], Any]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    return lambda: session.run(None, feeds)


def _openvino_runner(model: str, feeds: dict[str, np.ndarray], threads: int) -> Callable[[], Any]:
    import openvino as ov

    config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY"}
    if threads:
        config["INFERENCE_NUM_THREADS"] = threads
    request = ov.Core().compile_model(model, "CPU", config).create_infer_request()
    return lambda: request.infer(feeds)


@dataclass(frozen=True)
class Reference:
    """A runtime timed next to epoxy: the module telling it is installed, how to time it."""

    module: str
    install: str
    make: Callable[[str, dict[str, np.ndarray], int], Callable[[], Any]]


REFERENCES: dict[str, Reference] = {
    "onnxruntime": Reference("onnxruntime", "pip install onnxruntime", _onnxruntime_runner),
    "openvino": Reference("openvino", "pip install openvino", _openvino_runner),
}


def references_asked(names: list[str], notes: list[str]) -> list[str]:
    """The reference runtimes to time: one asked by name must be installed; ``all`` takes
    those that are (a note names the others)."""
    chosen: list[str] = []
    for name in dict.fromkeys(names):
        candidates = list(REFERENCES) if name == "all" else [name]
        for ref in candidates:
            if ref in chosen:
                continue
            if importlib.util.find_spec(REFERENCES[ref].module) is None:
                if name != "all":
                    raise InvalidArgumentError(f"--compare {ref} needs {ref}: {REFERENCES[ref].install}")
                notes.append(f"{ref} not installed, no column ({REFERENCES[ref].install})")
                continue
            chosen.append(ref)
    return chosen


# -- epoxy columns ------------------------------------------------------------------------------

@dataclass
class EpoxyColumn:
    """One provider set's session and what its creation cost."""

    name: str
    session: Any
    created_ms: float


def column_name(providers: str | None, several: bool) -> str:
    """``epoxy`` alone; ``epoxy[openvino,cpu]`` when sets are compared."""
    return f"epoxy[{','.join(providers_arg(providers) or ['all'])}]" if several else "epoxy"


def make_columns(args: argparse.Namespace) -> list[EpoxyColumn]:
    from ..session import InferenceSession  # loads onnx_ir: only for commands that run a model

    sets: list[str | None] = list(args.providers) or [None]
    columns = []
    for providers in sets:
        options = SessionOptions(intra_op_num_threads=args.threads, enable_profiling=args.profile,
                                 execution_mode="parallel" if args.parallel else "sequential")
        start = time.perf_counter()
        session = InferenceSession(args.model, providers=providers_arg(providers), sess_options=options)
        columns.append(EpoxyColumn(column_name(providers, len(sets) > 1), session,
                                   (time.perf_counter() - start) * 1e3))
    if len({c.name for c in columns}) != len(columns):
        raise InvalidArgumentError("the same --providers set is given twice")
    return columns


def plot_latencies(samples: Mapping[str, list[float]], path: str, title: str) -> str:
    """A violin per column (with its median marked) of the latency samples, as a PNG."""
    try:  # by name: an optional dependency, absent where the type checker runs
        matplotlib = import_module("matplotlib")
    except ImportError as exc:
        raise InvalidArgumentError(f"--plot needs matplotlib: {PLOT_INSTALL}") from exc
    matplotlib.use("Agg")  # files only: no display needed
    plt = import_module("matplotlib.pyplot")

    names = list(samples)
    fig, ax = plt.subplots(figsize=(max(4.0, 1.8 * len(names) + 1.5), 4.0))
    ax.violinplot([samples[n] for n in names], showmedians=True)
    ax.set_xticks(range(1, len(names) + 1), names, rotation=15 if len(names) > 2 else 0)
    ax.set_ylabel("latency (ms)")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def ratios(stats: Mapping[str, Mapping[str, float]], epoxy: list[str], references: list[str]) -> list[str]:
    """p50 ratios: each epoxy column over each reference, later provider sets over the first."""
    lines = [f"{e} / {r} (p50): {stats[e]['p50'] / stats[r]['p50']:.2f}x" for e in epoxy for r in references]
    lines += [f"{e} / {epoxy[0]} (p50): {stats[e]['p50'] / stats[epoxy[0]]['p50']:.2f}x" for e in epoxy[1:]]
    return lines


def _trace_path(path: str, column: str, several: bool) -> str:
    if not several:
        return path
    p = Path(path)
    slug = column.removeprefix("epoxy[").rstrip("]").replace(",", "-")
    return str(p.with_name(f"{p.stem}.{slug}{p.suffix}"))


def _print(out: Console, args: argparse.Namespace, columns: list[EpoxyColumn], stats: dict[str, dict[str, float]],
           samples: dict[str, list[float]], refs: list[str], notes: list[str]) -> None:
    out.fields([("model", args.model)] + [
        (c.name, f"providers: {', '.join(c.session.get_providers())}; session created in {c.created_ms:.1f} ms; "
                 f"{len(c.session._plan.steps)} steps") for c in columns])
    if any("cpu" in c.session.get_providers() for c in columns):
        out.line(f"numpy BLAS (the cpu provider's GEMMs): {describe_blas()}")
    names = list(stats)
    rows: list[list[object]] = [[label, *[f"{stats[n][key]:.3f}" for n in names]] for label, key in STAT_ROWS]
    rows.append(["runs", *[len(samples[n]) for n in names]])
    out.table(["latency", *names], rows, numeric=tuple(range(1, len(names) + 1)))
    for line in ratios(stats, [c.name for c in columns], refs):
        out.line(line)
    for note in notes:
        out.line(f"note: {note}", kind="warn")


def _print_profiles(out: Console, args: argparse.Namespace, columns: list[EpoxyColumn]) -> None:
    for c in columns:
        top = c.session.profile_summary()
        out.table(["op", "provider", "calls", "total ms", "mean us", "share"],
                  [[r["op_type"], r["provider"], r["calls"], f"{r['total_ms']:.1f}", f"{r['mean_us']:.1f}",
                    f"{100 * r['share']:.1f}%"] for r in top],
                  title=f"\ntop ops of {c.name} (all profiled runs, incl. warm-up):", numeric=(2, 3, 4, 5))
        if args.trace:
            written = c.session.end_profiling(_trace_path(args.trace, c.name, len(columns) > 1))
            out.line(f"trace written to {written}", kind="ok")


def run(args: argparse.Namespace) -> int:
    if args.trace and not args.profile:
        raise InvalidArgumentError("--trace needs --profile")
    out = console_for(args)
    notes: list[str] = []
    refs = references_asked(args.compare + (["onnxruntime"] if args.compare_onnxruntime else []), notes)
    columns = make_columns(args)
    rng = np.random.default_rng(args.seed)
    dims = parse_dims(args.dim)
    feeds = {i.name: random_feed(i.value_type, dims, rng, i.name) for i in columns[0].session.get_inputs()}
    runners: dict[str, Callable[[], Any]] = {c.name: partial(c.session.run, None, feeds) for c in columns}
    runners.update({ref: REFERENCES[ref].make(args.model, feeds, args.threads) for ref in refs})
    runs = max(1, args.runs)
    with out.progress("warm-up", args.warmup) as advance:
        for _ in range(args.warmup):
            for fn in runners.values():
                fn()
            advance(1)
    with out.progress("timing", runs) as advance:
        samples = time_interleaved(runners, runs, advance)
    stats = {name: percentiles(s) for name, s in samples.items()}
    plot = plot_latencies(samples, args.plot, f"{Path(args.model).name}: latency over {runs} runs") \
        if args.plot else None
    if args.json:
        out.json({"model": args.model, "columns": {
            name: {"providers": next((c.session.get_providers() for c in columns if c.name == name), None),
                   **stats[name], "samples_ms": samples[name]} for name in samples},
            "ratios": ratios(stats, [c.name for c in columns], refs), "notes": notes, "plot": plot})
        return 0
    _print(out, args, columns, stats, samples, refs, notes)
    if plot:
        out.line(f"plot written to {plot}", kind="ok")
    if args.profile:
        _print_profiles(out, args, columns)
    return 0
