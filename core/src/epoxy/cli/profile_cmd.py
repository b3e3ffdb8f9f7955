"""``epoxy profile MODEL``: run a model with profiling on, write a Chrome/Perfetto trace and
print the op types taking the most time.

The trace is the session's own profile (onnxruntime's format: ``Node`` events named
``<node>_kernel_time``) made easier to read: every thread gets a named track (the inter-op
workers of ``--parallel`` each on their own), a fused group's event lists the nodes it ran,
and warm-up runs are marked so the top-ops table and a reader can leave them out."""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from ..options import SessionOptions
from ._console import Console, console_for
from ._format import providers_arg

EXAMPLE = """example:
  epoxy profile model.onnx --providers openvino,cpu --random --runs 20 -o trace.json --top 10
  epoxy profile model.onnx --inputs pixels=batch.npy --parallel   # inter-op threads as separate tracks
then open trace.json in https://ui.perfetto.dev or chrome://tracing
"""

MAIN_TRACK = "main"
WORKER_TRACK = "inter-op worker {}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path to an .onnx model")
    parser.add_argument("--providers", help="comma-separated, priority order (default: all available)")
    parser.add_argument("--inputs", "-i", action="append", default=[], metavar="NAME=FILE.npy",
                        help="an input (repeat); inputs not given are random")
    parser.add_argument("--random", action="store_true", help="random inputs (the default when no --inputs)")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                        help="value of a symbolic dim for random inputs (default 1)")
    parser.add_argument("--runs", type=int, default=10, help="profiled runs (default 10)")
    parser.add_argument("--warmup", type=int, default=1, help="runs first, marked warm-up and left out of the table")
    parser.add_argument("--parallel", action="store_true", help="inter-op parallel executor")
    parser.add_argument("--threads", type=int, default=0, help="intra-op (BLAS) threads; 0 = library default")
    parser.add_argument("--output", "-o", help="trace file (default: MODEL_profile.json next to the model)")
    parser.add_argument("--top", type=int, default=15, metavar="K", help="op types shown (default 15)")
    parser.add_argument("--json", action="store_true", help="print the top ops and the trace path as JSON")
    parser.add_argument("--seed", type=int, default=0)


def make_feeds(session: Any, specs: Sequence[str], dims: Mapping[str, int], seed: int) -> dict[str, Any]:
    """``--inputs`` files, and random values for every input they leave out."""
    from .bench_cmd import random_feed
    from .run_cmd import parse_inputs

    feeds: dict[str, Any] = parse_inputs(list(specs))
    declared = {i.name: i for i in session.get_inputs()}
    unknown = sorted(set(feeds) - set(declared))
    if unknown:
        raise InvalidArgumentError(f"--inputs {unknown[0]!r}: the model has no such input; inputs: {sorted(declared)}")
    rng = np.random.default_rng(seed)
    for name, arg in declared.items():
        if name not in feeds:
            feeds[name] = random_feed(arg.value_type, dict(dims), rng, name)
    return feeds


def _thread_tracks(events: list[dict[str, Any]]) -> dict[int, tuple[int, str]]:
    """Original tid -> (small tid, track name): the thread of the session events is main,
    the others are inter-op workers numbered by first appearance."""
    main = next((e["tid"] for e in events if e.get("cat") == "Session"), None)
    tracks: dict[int, tuple[int, str]] = {}
    if main is not None:
        tracks[main] = (0, MAIN_TRACK)
    for e in events:
        if e["tid"] not in tracks:
            n = len(tracks) + (0 if main is not None else 1)
            tracks[e["tid"]] = (n, WORKER_TRACK.format(n))
    return tracks


def enrich_trace(events: list[dict[str, Any]], groups: Mapping[str, Sequence[str]], warmup: int,
                 process_name: str) -> list[dict[str, Any]]:
    """The session's trace with named thread tracks, group members and warm-up marks."""
    tracks = _thread_tracks(events)
    pid = events[0]["pid"] if events else 0
    out: list[dict[str, Any]] = [{"ph": "M", "pid": pid, "tid": 0, "name": "process_name",
                                  "args": {"name": process_name}}]
    for small, name in sorted(tracks.values()):
        out.append({"ph": "M", "pid": pid, "tid": small, "name": "thread_name", "args": {"name": name}})
        out.append({"ph": "M", "pid": pid, "tid": small, "name": "thread_sort_index", "args": {"sort_index": small}})
    for e in events:
        e = {**e, "tid": tracks[e["tid"]][0], "args": dict(e.get("args", {}))}
        if e.get("cat") == "Node":
            label = e["name"].removesuffix("_kernel_time")
            if label in groups:
                e["args"]["group_nodes"] = list(groups[label])
            if e["args"].get("run", warmup + 1) <= warmup:
                e["args"]["warmup"] = True
        elif e.get("name") == "model_run" and e["args"].get("run", warmup + 1) <= warmup:
            e["args"]["warmup"] = True
        out.append(e)
    return out


def top_ops(events: Sequence[Mapping[str, Any]], limit: int) -> list[dict[str, Any]]:
    """Time per (op type, provider) over the node events not marked warm-up, largest first."""
    spent: dict[tuple[str, str], list[float]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and not e["args"].get("warmup"):
            spent[(e["args"]["op_name"], e["args"]["provider"])].append(float(e["dur"]))
    grand = sum(sum(v) for v in spent.values()) or 1.0
    ordered = sorted(spent.items(), key=lambda kv: -sum(kv[1]))[:limit]
    return [{"op_type": op, "provider": provider, "calls": len(v), "total_ms": sum(v) / 1e3,
             "mean_us": sum(v) / len(v), "share": sum(v) / grand} for (op, provider), v in ordered]


def _print(out: Console, args: argparse.Namespace, session: Any, rows: list[dict[str, Any]], path: str,
           tracks: int) -> None:
    out.fields([("model", args.model), ("providers", ", ".join(session.get_providers())),
                ("runs", f"{args.runs} profiled after {args.warmup} warm-up"),
                ("threads", f"{tracks} track(s) in the trace")])
    out.table(["op", "provider", "calls", "total ms", "mean us", "share"],
              [[r["op_type"], r["provider"], r["calls"], f"{r['total_ms']:.3f}", f"{r['mean_us']:.1f}",
                f"{100 * r['share']:.1f}%"] for r in rows],
              title=f"top {len(rows)} ops by total time", numeric=(2, 3, 4, 5))
    out.line(f"trace written to {path} (open it in https://ui.perfetto.dev or chrome://tracing)", kind="ok")


def run(args: argparse.Namespace) -> int:
    from ..session import InferenceSession  # loads onnx_ir: only for commands that run a model
    from .bench_cmd import parse_dims

    if args.runs < 1 or args.warmup < 0 or args.top < 1:
        raise InvalidArgumentError("--runs and --top must be at least 1, --warmup at least 0")
    out = console_for(args)
    options = SessionOptions(enable_profiling=True, intra_op_num_threads=args.threads,
                             execution_mode="parallel" if args.parallel else "sequential")
    session = InferenceSession(args.model, providers=providers_arg(args.providers), sess_options=options)
    feeds = make_feeds(session, args.inputs, parse_dims(args.dim), args.seed)
    with out.progress("profiling", args.warmup + args.runs) as advance:
        for _ in range(args.warmup + args.runs):
            session.run(None, feeds)
            advance(1)
    path = args.output or str(Path(args.model).with_name(f"{Path(args.model).stem}_profile.json"))
    raw_path = session.end_profiling(f"{path}.{time.monotonic_ns()}.tmp")
    try:
        events = json.loads(Path(raw_path).read_text())
    finally:
        Path(raw_path).unlink(missing_ok=True)
    trace = enrich_trace(events, session.partition_report().groups, args.warmup, f"epoxy {Path(args.model).name}")
    Path(path).write_text(json.dumps(trace))
    rows = top_ops(trace, args.top)
    tracks = sum(1 for e in trace if e.get("name") == "thread_name")
    if args.json:
        out.json({"trace": path, "providers": session.get_providers(), "runs": args.runs, "warmup": args.warmup,
                  "threads": tracks, "top_ops": rows})
    else:
        _print(out, args, session, rows, path, tracks)
    return 0
