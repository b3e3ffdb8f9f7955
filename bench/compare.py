"""Batch-1 latency of epoxy (cpu provider) against onnxruntime (CPU EP) and OpenVINO (CPU).

    /work/venv/bin/python bench/compare.py                       # every model, 1 and 2 threads
    /work/venv/bin/python bench/compare.py --models resnet50,bert --threads 2 --runs 20
    /work/venv/bin/python bench/compare.py --json bench/results.json

For each model and thread count: load every runtime, run once (outputs compared with
onnxruntime's: max abs diff), warm up, then time the runtimes interleaved in blocks, dropping
the first call of each block (onnxruntime's worker threads keep spinning after a run and slow
whatever runs next) and rotating the order of runtimes between rounds. Reported: the median.

Threads: onnxruntime gets ``intra_op_num_threads``; OpenVINO ``INFERENCE_NUM_THREADS``;
epoxy runs numpy kernels, so numpy's BLAS/OpenMP pools are limited with threadpoolctl (and
the ``*_NUM_THREADS`` variables are set before numpy loads), and epoxy's own
``SessionOptions.intra_op_num_threads`` is set too.

A model epoxy (or any runtime) cannot load or run is reported in the table with the error's
first line; the run goes on.

``--set exporter`` (or ``--models exporter``) runs the exporter-made models of
``exporter_models.py`` instead (the torch zoo's families through both torch.onnx exporters,
at batch 1 and a larger size; issue #17) with five runtimes: epoxy cpu, epoxy cpu on the
same model with its dims fixed (``epoxy-fixed``), epoxy openvino+cpu (``epoxy-ov``),
onnxruntime and native OpenVINO; it adds the symbolic/fixed ratio, a "max" row, session
creation cold and warm (``--creations``) and, with ``--profile N``, epoxy's top N op types.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

_THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
               "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")

RUNTIMES = ("epoxy", "onnxruntime", "openvino")
#: every runtime name --runtimes takes: ``epoxy-ov`` is epoxy with providers=["openvino", "cpu"]
#: (f32), ``epoxy-fixed`` epoxy cpu on the model's fixed-dims twin (exporter set only)
KNOWN_RUNTIMES = RUNTIMES + ("epoxy-ov", "epoxy-fixed")
EXPORTER_RUNTIMES = ("epoxy", "epoxy-fixed", "epoxy-ov", "onnxruntime", "openvino")
SHORT = {"epoxy": "epoxy", "onnxruntime": "ort", "openvino": "ov", "epoxy-ov": "epoxy-ov",
         "epoxy-fixed": "fixed"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=None,
                    help="comma-separated filter, e.g. resnet50,bert or light (default: all 10); "
                         "'exporter' alone selects the exporter-made set")
    ap.add_argument("--set", choices=("light", "exporter"), default=None,
                    help="light: the 9 light models + bert (default); exporter: exporter_models.py's "
                         "set, --models then filters it (e.g. ts-bert,llama-b1)")
    ap.add_argument("--creations", type=int, default=None,
                    help="extra session creations per runtime and model, timed as 'warm' (default 2 "
                         "for the exporter set, 0 for light)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after timing, profile epoxy cpu per op (bench/profile_ops.py) at the first "
                         "thread count and list its N costliest op types per model (default 0: off)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--runs", type=int, default=10, help="timed runs per runtime (default 10)")
    ap.add_argument("--block", type=int, default=4, help="timed calls per block; +1 dropped (default 4)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls after load (default 2)")
    ap.add_argument("--budget", type=float, default=5.0,
                    help="seconds of timed calls per runtime, model and thread count; fewer runs "
                         "(at least --min-runs) when one call is slow (default 5)")
    ap.add_argument("--min-runs", type=int, default=3)
    ap.add_argument("--runtimes", default=None,
                    help="comma-separated subset of epoxy,onnxruntime,openvino (default: those three; "
                         "the exporter set adds epoxy-fixed and epoxy-ov)")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="statistic shown in the tables (both are in --json; default median)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    ap.add_argument("--settle", type=float, default=0.5,
                    help="seconds to sleep before each block, so the previous runtime's spinning "
                         "worker threads are asleep (default 0.5; 0 for none)")
    ap.add_argument("--json", default=None, metavar="OUT.json", help="also write every measurement here")
    args = ap.parse_args(argv)
    args.thread_list = sorted({int(t) for t in args.threads.split(",") if t.strip()})
    if not args.thread_list or min(args.thread_list) < 1:
        ap.error("--threads needs positive integers")
    if args.set is None:
        args.set = "exporter" if (args.models or "").strip().lower() == "exporter" else "light"
    if args.runtimes is None:
        args.runtimes = ",".join(EXPORTER_RUNTIMES if args.set == "exporter" else RUNTIMES)
    if args.creations is None:
        args.creations = 2 if args.set == "exporter" else 0
    args.runtime_list = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    bad = [r for r in args.runtime_list
           if base_runtime(r) not in KNOWN_RUNTIMES or (":" in r and base_runtime(r) != "epoxy")]
    if bad:
        ap.error(f"unknown runtime(s) {bad}; choose from {KNOWN_RUNTIMES} (cpu provider options as "
                 "epoxy:NAME=VALUE+NAME=VALUE)")
    if "epoxy-fixed" in args.runtime_list and args.set != "exporter":
        ap.error("epoxy-fixed needs --set exporter (only those models have fixed-dims twins)")
    if args.runs < 1 or args.block < 1:
        ap.error("--runs and --block must be >= 1")
    return args


def limit_thread_env(max_threads: int) -> None:
    """Cap the BLAS/OpenMP pools before numpy is imported (threadpoolctl can lower, not raise)."""
    for var in _THREAD_ENV:
        os.environ[var] = str(max_threads)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- runtime adapters: load(path, threads) -> run(feeds) -> list of arrays ----------------------
def base_runtime(spec: str) -> str:
    """``epoxy:conv_algo_search=heuristic`` -> ``epoxy``."""
    return spec.split(":", 1)[0]


def cpu_options(spec: str) -> dict[str, str]:
    """The cpu provider options of a runtime spec ``epoxy:NAME=VALUE+NAME=VALUE``."""
    if ":" not in spec:
        return {}
    pairs = [p.split("=", 1) for p in spec.split(":", 1)[1].split("+") if p]
    return {k: v for k, v in pairs}


def load_epoxy(path, threads, options=None):
    """``options``: cpu provider options; ``session.NAME`` keys are SessionOptions fields
    (``epoxy:session.shape_cache=0``)."""
    import epoxy

    options = dict(options or {})
    session_fields = {k.split(".", 1)[1]: v for k, v in options.items() if k.startswith("session.")}
    opts = epoxy.SessionOptions(intra_op_num_threads=threads)
    for name, value in session_fields.items():
        setattr(opts, name, int(value) if value.lstrip("-").isdigit() else value)
    provider_options = {k: v for k, v in options.items() if not k.startswith("session.")}
    sess = epoxy.InferenceSession(str(path), providers=[("cpu", provider_options)], sess_options=opts)

    def run(feeds):
        return sess.run(None, feeds)

    return run


def load_epoxy_openvino(path, threads):
    """epoxy with providers=["openvino", "cpu"], OpenVINO at f32 with native OpenVINO's properties."""
    import epoxy

    options = {"num_threads": threads, "performance_hint": "LATENCY", "num_streams": 1, "precision": "f32"}
    opts = epoxy.SessionOptions(intra_op_num_threads=threads)
    sess = epoxy.InferenceSession(str(path), providers=[("openvino", options), "cpu"], sess_options=opts)
    nodes = sess.partition_report().nodes

    def run(feeds):
        return sess.run(None, feeds)

    run.info = {"openvino_nodes": sum(d.provider == "openvino" for d in nodes), "nodes": len(nodes)}
    return run


def load_onnxruntime(path, threads):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])

    def run(feeds):
        return sess.run(None, feeds)

    return run


def openvino_available() -> str | None:
    """None when OpenVINO can be imported, else the reason."""
    try:
        import openvino  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install
        return first_line(exc)
    return None


_OV_CORE = None


def load_openvino(path, threads):
    import openvino as ov

    global _OV_CORE
    if _OV_CORE is None:
        _OV_CORE = ov.Core()
    core = _OV_CORE
    model = core.read_model(str(path))
    config = {
        "INFERENCE_NUM_THREADS": threads,
        "PERFORMANCE_HINT": "LATENCY",
        "NUM_STREAMS": 1,
        "INFERENCE_PRECISION_HINT": "f32",
    }
    compiled = core.compile_model(model, "CPU", config)
    request = compiled.create_infer_request()
    outputs = list(compiled.outputs)
    # ONNX input names -> port index (OpenVINO keeps the tensor names).
    index = {}
    for i, port in enumerate(compiled.inputs):
        for name in port.get_names():
            index[name] = i

    def run(feeds):
        bound = {index.get(name, name): value for name, value in feeds.items()}
        res = request.infer(bound, share_inputs=True, share_outputs=False)
        return [res[o] for o in outputs]

    return run


LOADERS = {"epoxy": load_epoxy, "onnxruntime": load_onnxruntime, "openvino": load_openvino,
           "epoxy-ov": load_epoxy_openvino, "epoxy-fixed": load_epoxy}


def model_path(model, rt):
    """The file a runtime loads: ``epoxy-fixed`` takes the model's fixed-dims twin."""
    return model.fixed_path if rt == "epoxy-fixed" else model.path


def load_runtime(rt, path, threads):
    base = base_runtime(rt)
    return LOADERS[base](path, threads, cpu_options(rt)) if base == "epoxy" else LOADERS[base](path, threads)


def prewarm(runtimes, threads) -> None:
    """Create each runtime once on a one-node model, so imports, plugin discovery and
    OpenVINO's core are paid before the first creation that is timed as cold."""
    import tempfile

    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "prewarm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "prewarm.onnx")
        onnx.save(model, path)
        for rt in runtimes:
            try:
                load_runtime(rt, path, threads)({"x": np.ones((1, 4), np.float32)})
            except Exception as exc:  # noqa: BLE001 - the real model reports its own failure
                log(f"prewarm {rt}: {first_line(exc)}")


_CREATED: set[tuple[str, str]] = set()  # (runtime, file) already created once in this process


# -- measuring ------------------------------------------------------------------------------------
def max_abs_diff(got, ref):
    """Largest |got - ref| over all outputs; a string when they cannot be compared."""
    import numpy as np

    if len(got) != len(ref):
        return f"{len(got)} outputs, onnxruntime gave {len(ref)}"
    worst = 0.0
    for g, r in zip(got, ref):
        g = np.asarray(g)
        r = np.asarray(r)
        if g.shape != r.shape:
            return f"shape {g.shape} vs {r.shape}"
        if g.size == 0:
            continue
        if g.dtype.kind in "fc" or r.dtype.kind in "fc":
            g64 = g.astype(np.float64)
            r64 = r.astype(np.float64)
            both_nan = np.isnan(g64) & np.isnan(r64)
            d = np.where(both_nan, 0.0, np.abs(g64 - r64))
            d = np.where(np.isnan(d), np.inf, d)
            worst = max(worst, float(d.max()))
        elif g.dtype.kind in "iub":
            worst = max(worst, float(np.abs(g.astype(np.int64) - r.astype(np.int64)).max()))
        else:
            if not np.array_equal(g, r):
                return "values differ"
    return worst


#: seconds of extra warm-up calls a runtime may take while its calls keep getting faster
WARM_UP_LIMIT_S = 60.0


def warm_estimate(fn, feeds, est):
    """One call's seconds once ``fn`` is warm: calls continue while each takes under half the
    one before (a cold kernel cache compiles over several calls: ep-cpu prepares a layer's
    call at its first run and may compile that call's kernel at its second), up to
    ``WARM_UP_LIMIT_S``. Without this a 1-second budget ended inside the compiles and a 0.06-ms
    model read 2.1 ms (bench/README.md, "Session 28")."""
    spent = 0.0
    while spent < WARM_UP_LIMIT_S:
        t0 = time.perf_counter()
        fn(feeds)
        took = time.perf_counter() - t0
        spent += took
        if est is None or took > 0.5 * est:
            return took if est is None else min(est, took)
        est = took
    return est


def time_interleaved(fns, feeds, *, runs, block, warmup, budget, min_runs, first_call=None, settle=0.0):
    """Median seconds per runtime, interleaving runtimes in blocks.

    ``fns``: {name: run}. Each block calls one runtime ``1 + k`` times and keeps the last ``k``
    (the first absorbs whatever the previous runtime left behind: spinning threads, cold
    caches). The order of runtimes rotates each round. A runtime whose call is slow gets fewer
    runs (``budget`` seconds of timed calls; at least ``min_runs`` unless one call alone takes
    more than budget / min_runs) and, past 1 s a call, no dropped call and no second warm-up.
    Before each block the process sleeps ``settle`` seconds, so that worker threads the
    previous runtime left spinning (OpenBLAS's, onnxruntime's, OpenVINO's) have gone to sleep
    and this block starts on idle cores. (This machine also has phases, minutes long, in
    which everything runs ~25% slower: compare runtimes within one run, not across runs.)
    Returns ({name: median s}, {name: [seconds]}, {name: error}).
    """
    import gc
    import statistics

    first_call = first_call or {}
    errors = {}
    estimate = {}
    for name, fn in list(fns.items()):
        try:
            est = first_call.get(name)
            for done in range(max(1, warmup)):
                if done and est is not None and est > 1.0:
                    break
                t0 = time.perf_counter()
                fn(feeds)
                est = time.perf_counter() - t0
            estimate[name] = warm_estimate(fn, feeds, est)
        except Exception as exc:
            errors[name] = first_line(exc)
    live = [n for n in fns if n not in errors]
    target = {}
    for n in live:
        fit = int(budget / max(estimate[n], 1e-9))
        floor = min_runs if estimate[n] * min_runs <= 2 * budget else 1
        target[n] = max(1, min(runs, max(floor, fit)))
    samples = {n: [] for n in live}
    order = list(live)
    while order and any(len(samples[n]) < target[n] for n in live):
        for name in order:
            need = target[name] - len(samples[name])
            if need <= 0:
                continue
            fn = fns[name]
            gc.collect()
            if settle:
                time.sleep(settle)
            try:
                if estimate[name] <= 1.0:
                    fn(feeds)  # dropped
                for _ in range(min(block, need)):
                    t0 = time.perf_counter()
                    fn(feeds)
                    samples[name].append(time.perf_counter() - t0)
            except Exception as exc:
                errors[name] = first_line(exc)
                target[name] = len(samples[name])
        order = order[1:] + order[:1]
    medians = {n: statistics.median(s) for n, s in samples.items() if s and n not in errors}
    return medians, samples, errors


def bench_model(model, threads, runtimes, args):
    """One model at one thread count: a dict of results per runtime."""
    import gc

    import numpy as np
    from threadpoolctl import threadpool_limits

    feeds = model.make_feeds(np.random.default_rng(args.seed))
    result = {rt: {"runtime": rt, "model": model.name, "threads": threads} for rt in runtimes}
    fns = {}
    first_outputs = {}
    first_call = {}
    with threadpool_limits(limits=threads):
        for rt in runtimes:
            rec = result[rt]
            path = model_path(model, rt)
            try:
                t0 = time.perf_counter()
                fn = load_runtime(rt, path, threads)
                rec["load_s"] = time.perf_counter() - t0
                if (rt, str(path)) not in _CREATED:
                    rec["load_cold_s"] = rec["load_s"]  # first creation of this file here
                    _CREATED.add((rt, str(path)))
                warm = []
                for _ in range(args.creations):
                    t0 = time.perf_counter()
                    load_runtime(rt, path, threads)
                    warm.append(time.perf_counter() - t0)
                    gc.collect()
                if warm:
                    rec["load_warm_s"] = min(warm)
                rec.update(getattr(fn, "info", {}))
            except Exception as exc:
                rec["error"] = "load: " + first_line(exc)
                continue
            try:
                t0 = time.perf_counter()
                first_outputs[rt] = [np.asarray(o) for o in fn(dict(feeds))]
                first_call[rt] = time.perf_counter() - t0
            except Exception as exc:
                rec["error"] = "run: " + first_line(exc)
                continue
            fns[rt] = fn
        ref = first_outputs.get("onnxruntime")
        for rt, outs in first_outputs.items():
            if rt != "onnxruntime" and ref is not None:
                result[rt]["max_abs_diff"] = max_abs_diff(outs, ref)
        first_outputs.clear()
        medians, samples, errors = time_interleaved(
            fns, feeds, runs=args.runs, block=args.block, warmup=args.warmup,
            budget=args.budget, min_runs=args.min_runs, first_call=first_call, settle=args.settle,
        )
    for rt, msg in errors.items():
        result[rt]["error"] = "run: " + msg
    for rt, med in medians.items():
        result[rt]["median_ms"] = med * 1e3
        result[rt]["n"] = len(samples[rt])
        result[rt]["min_ms"] = min(samples[rt]) * 1e3
        result[rt]["samples_ms"] = [round(x * 1e3, 4) for x in samples[rt]]
    fns.clear()
    gc.collect()
    return result


# -- reporting ------------------------------------------------------------------------------------
STAT_KEY = "median_ms"


def fmt_ms(rec):
    if rec is None:
        return "-"
    if "error" in rec:
        return "FAIL"
    ms = rec.get(STAT_KEY)
    if ms is None:
        return "-"
    if ms < 1:  # the exporter set's tiny models
        return f"{ms:.3f}"
    return f"{ms:.1f}" if ms < 1000 else f"{ms:.0f}"


def fmt_diff(rec):
    if rec is None or "max_abs_diff" not in rec:
        return "-"
    d = rec["max_abs_diff"]
    return d if isinstance(d, str) else f"{d:.1e}"


def ratio(rec, base):
    if not rec or not base or STAT_KEY not in rec or STAT_KEY not in base or "error" in rec or "error" in base:
        return None
    return rec[STAT_KEY] / base[STAT_KEY]


def geomean(values):
    import math

    values = [v for v in values if v]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def ratio_pairs(runtimes):
    """(numerator, denominator, column) of each ratio column: every runtime over onnxruntime,
    except the fixed twin, which is the denominator of epoxy's symbolic/fixed ratio."""
    pairs = []
    if "onnxruntime" in runtimes:
        pairs += [(r, "onnxruntime", f"{short(r)}/ort") for r in runtimes if r not in ("onnxruntime", "epoxy-fixed")]
    if "epoxy" in runtimes and "epoxy-fixed" in runtimes:
        pairs.append(("epoxy", "epoxy-fixed", "sym/fixed"))
    return pairs


def print_table(results, threads, runtimes, out=sys.stdout, title=None, worst=False):
    """One thread count: time per runtime, the ratios, max|Δ| against onnxruntime, the
    geomean of each ratio (and with ``worst`` its largest)."""
    others = [r for r in runtimes if r != "onnxruntime"]
    has_ort = "onnxruntime" in runtimes
    pairs = ratio_pairs(runtimes)
    head = ["model"] + [f"{r} ms" for r in runtimes] + [p[2] for p in pairs]
    if has_ort:
        head += [f"{short(r)} max|Δ|" for r in others]
    rows = []
    ratios = {p: [] for p in pairs}
    notes = []
    for name, per_rt in results.items():
        recs = per_rt.get(threads)
        if recs is None:
            continue
        row = [name] + [fmt_ms(recs.get(r)) for r in runtimes]
        for p in pairs:
            q = ratio(recs.get(p[0]), recs.get(p[1]))
            ratios[p].append(q)
            row.append("-" if q is None else f"{q:.2f}")
        if has_ort:
            row += [fmt_diff(recs.get(r)) for r in others]
        rows.append(row)
        for r in runtimes:
            rec = recs.get(r)
            if rec and "error" in rec:
                notes.append(f"{name} [{r}]: {rec['error']}")
    tail = [""] * (len(others) if has_ort else 0)
    if pairs:
        gm_row = ["geomean"] + [""] * len(runtimes)
        for p in pairs:
            g = geomean(ratios[p])
            ok = sum(1 for q in ratios[p] if q)
            gm_row.append("-" if g is None else f"{g:.2f} ({ok})")
        rows.append(gm_row + tail)
        if worst:
            rows.append(["max"] + [""] * len(runtimes) + [
                "-" if not any(ratios[p]) else f"{max(q for q in ratios[p] if q):.2f}" for p in pairs] + tail)
    stat = STAT_KEY.split("_")[0]
    title = title or "batch 1"
    print(f"\n### {threads} thread{'s' if threads > 1 else ''} — {title}, {stat} ms", file=out)
    print("| " + " | ".join(head) + " |", file=out)
    print("|" + "|".join("---" for _ in head) + "|", file=out)
    for row in rows:
        print("| " + " | ".join(row) + " |", file=out)
    if notes:
        print("\nfailures:", file=out)
        for n in notes:
            print(f"- {n}", file=out)
    out.flush()


def print_summary(results, threads_list, runtimes, profiled, out=sys.stdout):
    """One row per model: each runtime's time and each ratio at every thread count ("1t / 2t"),
    and epoxy's costliest op types from ``--profile``: the README's table of the exporter set."""
    pairs = ratio_pairs(runtimes)
    shown = [r for r in runtimes if r != "epoxy-fixed"]
    tag = "/".join(f"{t}t" for t in threads_list)
    head = (["model"] + [f"{short(r)} ms {tag}" for r in shown] + [f"{p[2]} {tag}" for p in pairs] +
            (["epoxy's top op types (share)"] if profiled else []))
    print(f"\n### summary ({STAT_KEY.split('_')[0]} ms; ratios per thread count)", file=out)
    print("| " + " | ".join(head) + " |", file=out)
    print("|" + "|".join("---" for _ in head) + "|", file=out)
    ratios = {(p, t): [] for p in pairs for t in threads_list}
    for name, per_t in results.items():
        cells = [name]
        for r in shown:
            cells.append(" / ".join(fmt_ms(per_t.get(t, {}).get(r)) for t in threads_list))
        for p in pairs:
            qs = []
            for t in threads_list:
                recs = per_t.get(t, {})
                q = ratio(recs.get(p[0]), recs.get(p[1]))
                ratios[(p, t)].append(q)
                qs.append("-" if q is None else f"{q:.2f}")
            cells.append(" / ".join(qs))
        if profiled:
            info = profiled.get(name, {})
            tops = ", ".join(f"{op} {share:.0%}" for op, _, share in info.get("top", []))
            cells.append(info.get("error", "") or tops)
        print("| " + " | ".join(cells) + " |", file=out)
    for label, agg in (("geomean", geomean), ("max", lambda v: max((q for q in v if q), default=None))):
        cells = [label] + [""] * len(shown)
        for p in pairs:
            vals = [agg(ratios[(p, t)]) for t in threads_list]
            cells.append(" / ".join("-" if v is None else f"{v:.2f}" for v in vals))
        print("| " + " | ".join(cells + ([""] if profiled else [])) + " |", file=out)
    out.flush()


def creation_key(model) -> str:
    """Creation is per file: the exporter set's two sizes of one model share theirs."""
    return f"{model.exporter}-{model.family}" if getattr(model, "family", "") else model.name


def print_creation(results, models, threads, runtimes, out=sys.stdout):
    """Session creation per model file and runtime: cold (its first creation in this process,
    runtimes already imported) and warm (fastest of the ``--creations`` that followed), ms;
    epoxy's ratios to onnxruntime and their geomean."""
    rows = {}
    for model in models:
        recs = results.get(model.name, {}).get(threads, {})
        row = rows.setdefault(creation_key(model), {})
        for rt in runtimes:
            rec = recs.get(rt) or {}
            for kind in ("cold", "warm"):
                value = rec.get(f"load_{kind}_s")
                if value is not None:
                    old = row.get((rt, kind))
                    row[(rt, kind)] = value if old is None else min(old, value)
    if not rows:
        return
    epoxies = [r for r in runtimes if base_runtime(r) in ("epoxy", "epoxy-ov", "epoxy-fixed")]
    has_ort = "onnxruntime" in runtimes
    head = ["model file"] + [f"{short(r)} cold/warm ms" for r in runtimes]
    if has_ort:
        head += [f"{short(r)}/ort {kind}" for r in epoxies for kind in ("cold", "warm")]
    ratios = {(r, kind): [] for r in epoxies for kind in ("cold", "warm")}
    print(f"\n### session creation ({threads} thread{'s' if threads > 1 else ''}), ms", file=out)
    print("| " + " | ".join(head) + " |", file=out)
    print("|" + "|".join("---" for _ in head) + "|", file=out)

    def ms(v):
        return "-" if v is None else f"{v * 1e3:.0f}" if v >= 0.1 else f"{v * 1e3:.1f}"

    for name, row in rows.items():
        cells = [name] + [f"{ms(row.get((r, 'cold')))} / {ms(row.get((r, 'warm')))}" for r in runtimes]
        if has_ort:
            for r in epoxies:
                for kind in ("cold", "warm"):
                    a, b = row.get((r, kind)), row.get(("onnxruntime", kind))
                    q = a / b if a and b else None
                    ratios[(r, kind)].append(q)
                    cells.append("-" if q is None else f"{q:.2f}")
        print("| " + " | ".join(cells) + " |", file=out)
    if has_ort:
        gm = [geomean(ratios[k]) for k in ratios]
        print("| geomean | " + " | ".join("" for _ in runtimes) + " | " +
              " | ".join("-" if g is None else f"{g:.2f}" for g in gm) + " |", file=out)
    out.flush()


def profile_models(models, threads, top, runs=10):
    """epoxy cpu's costliest op types per model (bench/profile_ops.py's timers): {name: info}."""
    import collections

    import numpy as np
    import profile_ops
    from threadpoolctl import threadpool_limits

    found = {}
    for model in models:
        feeds = model.make_feeds(np.random.default_rng(0))
        try:
            with threadpool_limits(limits=threads):
                per_node, wall = profile_ops.profile_epoxy(model.path, dict(feeds), threads, runs, 2)
        except Exception as exc:  # noqa: BLE001 - a report line
            found[model.name] = {"error": first_line(exc)}
            continue
        by_op = collections.defaultdict(float)
        for t, op, _ in per_node:
            by_op[op] += t
        total = sum(by_op.values())
        ops = sorted(by_op.items(), key=lambda kv: -kv[1])[:top]
        found[model.name] = {"run_ms": wall * 1e3, "kernels_ms": total * 1e3, "steps": len(per_node),
                             "top": [(op, t * 1e3, t / max(total, 1e-12)) for op, t in ops]}
    return found


def print_profile(found, threads, out=sys.stdout):
    print(f"\n### where epoxy cpu's time goes ({threads} thread{'s' if threads > 1 else ''}; "
          "bench/profile_ops.py timers around each step)", file=out)
    print("| model | run ms (median) | in kernels ms (mean) | steps | costliest op types (ms, share) |", file=out)
    print("|---|---|---|---|---|", file=out)
    for name, info in found.items():
        if "error" in info:
            print(f"| {name} | FAIL | | | {info['error']} |", file=out)
            continue
        tops = ", ".join(f"{op} {ms:.2f} ({share:.0%})" for op, ms, share in info["top"])
        print(f"| {name} | {info['run_ms']:.2f} | {info['kernels_ms']:.2f} | {info['steps']} | {tops} |", file=out)
    out.flush()


def short(spec: str) -> str:
    base = base_runtime(spec)
    return SHORT[base] + spec[len(base):]


def loadavg() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "?"


def machine_note() -> dict:
    import platform

    info = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions = {}
    for mod in ("numpy", "onnx", "onnxruntime", "openvino", "epoxy"):
        try:
            m = __import__(mod)
            versions[mod] = getattr(m, "__version__", "?")
        except Exception:
            versions[mod] = None
    info["versions"] = versions
    try:
        from epoxy.run.threads import describe_blas

        info["blas"] = describe_blas()
    except Exception as exc:  # noqa: BLE001 - a report line, never a reason to stop
        info["blas"] = f"unknown ({type(exc).__name__})"
    return info


def main(argv: list[str] | None = None) -> int:
    global STAT_KEY
    args = parse_args(argv)
    STAT_KEY = f"{args.stat}_ms"
    limit_thread_env(max(args.thread_list))

    import warnings

    warnings.filterwarnings("ignore", category=RuntimeWarning, module="epoxy")

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from models import select_models

    runtimes = list(args.runtime_list)
    if "openvino" in runtimes or "epoxy-ov" in runtimes:
        why = openvino_available()
        if why:
            print(f"note: OpenVINO not importable ({why}); skipped. `pip install openvino` to include it.")
            runtimes = [r for r in runtimes if r not in ("openvino", "epoxy-ov")]

    started = time.time()
    info = machine_note()
    print(f"# epoxy benchmark — {time.strftime('%Y-%m-%d %H:%M', time.localtime(started))}")
    print(f"cpu: {info.get('cpu', '?')} ×{info['cpus']}; " +
          ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v))
    print(f"numpy BLAS (epoxy's cpu GEMMs): {info['blas']}")
    print(f"threads {args.thread_list}; up to {args.runs} timed runs per runtime "
          f"(budget {args.budget:g} s, blocks of {args.block} + 1 dropped); runtimes {runtimes}")

    print(f"load average at start: {loadavg()}")
    if args.set == "exporter":
        from exporter_models import exporter_models

        models = exporter_models(args.models)
    else:
        models = select_models(args.models)
    if args.creations:
        prewarm(runtimes, args.thread_list[0])
    results: dict[str, dict[int, dict]] = {}
    records = []
    for model in models:
        results[model.name] = {}
        for threads in args.thread_list:
            t0 = time.perf_counter()
            per_rt = bench_model(model, threads, runtimes, args)
            results[model.name][threads] = per_rt
            records.extend(per_rt.values())
            summary = ", ".join(
                f"{rt} {fmt_ms(rec)}" + (f" (load {rec['load_s']:.2f}s)" if "load_s" in rec else "")
                for rt, rec in per_rt.items()
            )
            log(f"  {model.name} @{threads}t: {summary}  [{time.perf_counter() - t0:.1f}s]")

    exporter_set = args.set == "exporter"
    for threads in args.thread_list:
        print_table(results, threads, runtimes, title="exporter-made models" if exporter_set else None,
                    worst=exporter_set)
    if args.creations:
        print_creation(results, models, args.thread_list[0], runtimes)
    profiled = {}
    if args.profile and any(base_runtime(r) == "epoxy" for r in runtimes):
        log("profiling epoxy cpu per op ...")
        profiled = profile_models(models, args.thread_list[0], args.profile)
        print_profile(profiled, args.thread_list[0])
    if exporter_set:
        print_summary(results, args.thread_list, runtimes, profiled)
    elapsed = time.time() - started
    print(f"\n(total {elapsed:.0f} s; load average at end: {loadavg()})")

    if args.json:
        payload = {
            "date": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
            "argv": sys.argv[1:] if argv is None else argv,
            "machine": info,
            "runtimes": runtimes,
            "threads": args.thread_list,
            "results": records,
            "profile": profiled,
            "elapsed_s": elapsed,
        }
        write_json(args.json, payload)
    return 0


def write_json(path: str, payload: dict) -> None:
    """A run's record as indented JSON (what ``--json`` writes; ``tune.py`` shares it)."""
    import json

    with open(path, "w") as fh:
        json.dump(payload, fh, indent=1, default=str)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
