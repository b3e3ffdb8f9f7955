"""Per-op time profile of epoxy's cpu provider on the bench models (optionally next to onnxruntime's).

    /work/venv/bin/python bench/profile_ops.py                         # every model, 1 thread
    /work/venv/bin/python bench/profile_ops.py --models resnet50,bert --runs 10 --top 15
    /work/venv/bin/python bench/profile_ops.py --models bert --ort     # + onnxruntime's per-op profile

Every step of the session's plan is wrapped with a timer (``perf_counter``, or ``process_time``
with ``--clock cpu``, around the call);
after warm-up the model runs ``--runs`` times and the per-op-type totals (ms per run, share
of the run, calls per run) are printed, plus the slowest single nodes. ``--ort`` also runs
onnxruntime with its profiler on and prints its per-op-type kernel times the same way (ORT
fuses nodes, so its op types differ: FusedConv, FusedMatMul...). Not a benchmark (the timers
add ~1 µs a step); compare shares and the op types that dominate.

``--alone N`` also calls each step on its last run's arguments, alone in a loop (best of 5 x
20 calls), and lists the N steps whose time inside the model (median) exceeds that the most:
where the model's run is more than its steps (data or weights out of the cache, a tensor the
other core wrote), as the convolutions' table of ``model_convs.py`` but for every op.

    ... bench/profile_ops.py --models squeezenet --threads 2 --runs 30 --alone 12
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=None, help="comma-separated filter (resnet50, bert, light...)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--top", type=int, default=12, help="rows per table")
    ap.add_argument("--nodes", type=int, default=8, help="slowest single nodes to list (0: none)")
    ap.add_argument("--ort", action="store_true", help="also profile onnxruntime (per op type)")
    ap.add_argument("--alone", type=int, default=0, metavar="N",
                    help="also time each step alone on its captured arguments and list the N steps "
                         "that take longest more inside the model than alone")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="per-step timer: wall (perf_counter) or this process's CPU time (process_time: "
                         "steadier on a busy machine at 1 thread; sums all threads' time at more)")
    return ap.parse_args(argv)


def profile_epoxy(path, feeds, threads, runs, warmup, clock=time.perf_counter, alone=False):
    """(per node: seconds a run, op type, label; the median wall time of a run; with
    ``alone``, per node: (median seconds inside the model, seconds alone, op type, label))."""
    import epoxy

    opts = epoxy.SessionOptions(intra_op_num_threads=threads)
    sess = epoxy.InferenceSession(str(path), providers=["cpu"], sess_options=opts)
    # with the shape cache (epoxy.run.shape_cache), runs after the second of one input shape
    # take its reduced plan: time that one (warm-up must be >= 2 runs to reach it)
    ex = getattr(sess._executor, "reduced", sess._executor)
    steps = ex.plan.steps
    warmup = max(warmup, 2) if ex is not sess._executor else warmup
    totals = [0.0] * len(steps)
    samples: list[list[float]] = [[] for _ in steps]
    captured: dict[int, tuple] = {}
    program = []
    for i, (entry, _step) in enumerate(zip(ex._program, steps)):
        fn = entry[0]

        def timed(*args, _fn=fn, _i=i, _pc=clock, **kwargs):
            t0 = _pc()
            r = _fn(*args, **kwargs)
            took = _pc() - t0
            totals[_i] += took
            samples[_i].append(took)
            captured[_i] = (args, kwargs)
            return r

        program.append((timed,) + tuple(entry[1:]))
    for _ in range(warmup):
        sess.run(None, feeds)
    walls = []  # the wall time as the session runs (plan generated as code), before timing nodes
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        walls.append(time.perf_counter() - t0)
    # per-node times through the interpreted plan with timed callables
    original = ex._program
    ex._program = program
    ex._generate = False
    ex._programs.clear()
    for _ in range(runs):
        sess.run(None, feeds)
    per_node = [(t / runs, s.op_type, s.label) for t, s in zip(totals, steps)]
    if not alone:
        return per_node, statistics.median(walls), None
    import timeit

    side = []
    for i, (entry, step) in enumerate(zip(original, steps)):
        call_args, call_kwargs = captured[i]
        best = min(timeit.repeat(lambda f=entry[0], a=call_args, k=call_kwargs: f(*a, **k), number=20, repeat=5)) / 20
        side.append((statistics.median(samples[i]), best, step.op_type, step.label))
    return per_node, statistics.median(walls), side


def profile_ort(path, feeds, threads, runs, warmup):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    for _ in range(warmup):
        sess.run(None, feeds)
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        walls.append(time.perf_counter() - t0)
    prof = sess.end_profiling()
    with open(prof) as f:
        events = json.load(f)
    acc = collections.defaultdict(float)
    op_of = {}
    for ev in events:
        if ev.get("cat") == "Node" and ev.get("name", "").endswith("_kernel_time"):
            name = ev["name"][: -len("_kernel_time")]
            acc[name] += ev["dur"] * 1e-6
            op_of[name] = ev.get("args", {}).get("op_name", "?")
    n_total = warmup + runs
    per_node = [(t / n_total, op_of[n], n) for n, t in acc.items()]
    return per_node, statistics.median(walls)


def table(title, per_node, wall, top, nodes):
    by_op = collections.defaultdict(lambda: [0.0, 0])
    for t, op, _ in per_node:
        by_op[op][0] += t
        by_op[op][1] += 1
    total = sum(v[0] for v in by_op.values())
    print(f"\n#### {title}: run {wall * 1e3:.1f} ms (median), kernels {total * 1e3:.1f} ms, {len(per_node)} steps")
    print("| op | ms/run | share | calls |")
    print("|---|---|---|---|")
    for op, (t, n) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"| {op} | {t * 1e3:.2f} | {t / max(total, 1e-12):.1%} | {n} |")
    if nodes:
        print("\nslowest nodes: " + ", ".join(
            f"{label} ({op}) {t * 1e3:.2f}" for t, op, label in sorted(per_node, key=lambda r: -r[0])[:nodes]))


def alone_table(title, side, wall, top):
    """The steps that take longest more inside the model than alone, and the sums."""
    inside, alone = sum(r[0] for r in side), sum(r[1] for r in side)
    print(f"\n#### {title}: steps inside the model {inside * 1e3:.2f} ms (medians), alone {alone * 1e3:.2f} ms, "
          f"the run {wall * 1e3:.2f} ms")
    print("| node | op | inside us | alone us | more us |")
    print("|---|---|---|---|---|")
    for t_in, t_alone, op, label in sorted(side, key=lambda r: r[1] - r[0])[:top]:
        print(f"| {label} | {op} | {t_in * 1e6:.1f} | {t_alone * 1e6:.1f} | {(t_in - t_alone) * 1e6:.1f} |")


def main(argv=None) -> int:
    args = parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import models as bench_models
    import numpy as np
    from threadpoolctl import threadpool_limits

    for model in bench_models.select_models(args.models):
        feeds = model.make_feeds(np.random.default_rng(args.seed))
        with threadpool_limits(limits=args.threads):
            clock = time.process_time if args.clock == "cpu" else time.perf_counter
            per_node, wall, side = profile_epoxy(model.path, dict(feeds), args.threads, args.runs, args.warmup,
                                                 clock, alone=args.alone > 0)
            table(f"{model.name} epoxy", per_node, wall, args.top, args.nodes)
            if side:
                alone_table(f"{model.name} epoxy", side, wall, args.alone)
            if args.ort:
                per_node, wall = profile_ort(model.path, dict(feeds), args.threads, args.runs, args.warmup)
                table(f"{model.name} onnxruntime", per_node, wall, args.top, args.nodes)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
