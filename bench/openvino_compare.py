"""epoxy with providers=["openvino", "cpu"] against native OpenVINO, same process.

Both sides compile the same model with the same OpenVINO properties (threads, LATENCY hint,
one stream, f32); calls are interleaved in blocks (first call of each block dropped, order
rotated each round) and the median is reported, with epoxy / native as the ratio.

    python bench/openvino_compare.py                       # light_* models, 2 threads
    python bench/openvino_compare.py --models light,bert --threads 1,2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import max_abs_diff, time_interleaved
from models import select_models


def ov_config(threads: int) -> dict:
    return {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
            "INFERENCE_PRECISION_HINT": "f32"}


def load_native(path: Path, threads: int):
    """Native OpenVINO the usual way: read the file, compile, one infer request."""
    from epoxy_ep_openvino.runtime import shared_core

    core = shared_core()
    compiled = core.compile_model(core.read_model(str(path)), "CPU", ov_config(threads))
    request = compiled.create_infer_request()
    outputs = list(compiled.outputs)
    index = {name: i for i, port in enumerate(compiled.inputs) for name in port.get_names()}

    def run(feeds):
        res = request.infer({index[n]: v for n, v in feeds.items()}, share_inputs=True, share_outputs=False)
        return [res[o] for o in outputs]

    return run, {}


def load_epoxy(path: Path, threads: int):
    import epoxy

    options = {"num_threads": threads, "performance_hint": "LATENCY", "num_streams": 1, "precision": "f32"}
    sess = epoxy.InferenceSession(str(path), providers=[("openvino", options), "cpu"])
    report = sess.partition_report()
    info = {"summary": report.summary(), "groups": len(report.groups)}

    def run(feeds):
        return sess.run(None, feeds)

    return run, info


def bench(model, threads: int, args) -> dict:
    import numpy as np

    feeds = model.make_feeds(np.random.default_rng(0))
    rec: dict = {"model": model.name, "threads": threads}
    fns = {}
    outs = {}
    for name, loader in (("native", load_native), ("epoxy", load_epoxy)):
        t0 = time.perf_counter()
        fn, info = loader(model.path, threads)
        rec[f"{name}_load_s"] = round(time.perf_counter() - t0, 3)
        rec.update({f"{name}_{k}": v for k, v in info.items()})
        outs[name] = [np.asarray(o) for o in fn(dict(feeds))]
        fns[name] = fn
    rec["max_abs_diff"] = max_abs_diff(outs["epoxy"], outs["native"])
    medians, samples, errors = time_interleaved(fns, feeds, runs=args.runs, block=args.block, warmup=2,
                                                budget=args.budget, min_runs=5)
    if errors:
        rec["errors"] = errors
    for name, med in medians.items():
        rec[f"{name}_ms"] = round(med * 1e3, 3)
        rec[f"{name}_n"] = len(samples[name])
    if "epoxy" in medians and "native" in medians:
        rec["ratio"] = round(medians["epoxy"] / medians["native"], 3)
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="light", help="comma-separated filter (light, bert, resnet50...)")
    ap.add_argument("--threads", default="2", help="comma-separated thread counts")
    ap.add_argument("--runs", type=int, default=60, help="timed calls per runtime (at most)")
    ap.add_argument("--block", type=int, default=5, help="calls per block before switching runtime")
    ap.add_argument("--budget", type=float, default=6.0, help="seconds of timed calls per runtime and model")
    ap.add_argument("--json", help="write the records here")
    args = ap.parse_args(argv)
    records = []
    print(f"{'model':<22} {'thr':>3} {'native ms':>10} {'epoxy ms':>10} {'ratio':>6} {'groups':>6}  max|diff|")
    for model in select_models(args.models):
        for threads in [int(t) for t in args.threads.split(",")]:
            rec = bench(model, threads, args)
            records.append(rec)
            print(f"{rec['model']:<22} {threads:>3} {rec.get('native_ms', float('nan')):>10.2f} "
                  f"{rec.get('epoxy_ms', float('nan')):>10.2f} {rec.get('ratio', float('nan')):>6.3f} "
                  f"{rec.get('epoxy_groups', '-'):>6}  {rec['max_abs_diff']}", flush=True)
    ratios = [r["ratio"] for r in records if "ratio" in r]
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"geomean epoxy/native: {geo:.3f}   worst: {max(ratios):.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
