"""GPU check: epoxy's cuda provider vs onnxruntime on the light models and the BERT encoder.

Run by gpu_check.sh (python3 plugins/ep-cuda/gpu_bench.py [--budget S] [--models a,b]).
For each model and batch (1, 8): outputs checked against onnxruntime's CPU provider, then
median latency of epoxy-cuda (session.run, host numpy in/out, as onnxruntime is timed),
epoxy-cuda with cuda_graph=True (resnet50 and bert), and onnxruntime-CUDA when available.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))


def batched(path: Path, batch: int) -> bytes:
    import onnx

    m = onnx.load(str(path))
    if batch != 1:
        for v in m.graph.input:
            dims = v.type.tensor_type.shape.dim
            if dims:
                dims[0].ClearField("dim_value")
                dims[0].dim_param = "N"
        for v in m.graph.output:
            dims = v.type.tensor_type.shape.dim
            if dims:
                dims[0].ClearField("dim_value")
                dims[0].dim_param = "N"
        del m.graph.value_info[:]
        # the zoo models reshape to [1, -1]: make the leading 1 copy the batch dim instead
        from onnx import numpy_helper

        inits = {t.name: t for t in m.graph.initializer}
        for node in m.graph.node:
            if node.op_type == "Reshape" and len(node.input) > 1 and node.input[1] in inits:
                t = inits[node.input[1]]
                arr = numpy_helper.to_array(t).copy()
                if arr.ndim == 1 and arr.size and arr[0] == 1:
                    arr[0] = 0
                    t.CopyFrom(numpy_helper.from_array(arr, t.name))
    return m.SerializeToString()


def timeit(fn, budget: float, max_runs: int = 50) -> float:  # type: ignore[no-untyped-def]
    for _ in range(3):
        fn()
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < max_runs and (time.perf_counter() - start < budget or len(samples) < 5):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="light,bert")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls per runtime and case")
    args = ap.parse_args()
    import models
    import onnxruntime as ort

    import epoxy

    has_ort_cuda = "CUDAExecutionProvider" in ort.get_available_providers()
    print(
        f"onnxruntime {ort.__version__}; CUDA provider {'available' if has_ort_cuda else 'NOT available'}", flush=True
    )
    rows = []
    failures = 0
    for bm in models.select_models(args.models):
        for batch in [int(b) for b in args.batches.split(",")]:
            label = f"{bm.name} b{batch}"
            try:
                if bm.name == "bert":
                    cfg = {"batch": batch}
                    data = models.build_bert(cfg).SerializeToString() if batch != 1 else bm.path.read_bytes()
                    feeds = models.bert_feeds_factory(cfg)(np.random.default_rng(0))
                else:
                    data = batched(bm.path, batch)
                    one = bm.make_feeds(np.random.default_rng(0))
                    feeds = {k: np.concatenate([v] * batch) if batch != 1 else v for k, v in one.items()}
                so = ort.SessionOptions()
                ref = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
                want = ref.run(None, feeds)
                ref = None
                t = time.perf_counter()
                s = epoxy.InferenceSession(data, providers=["cuda", "cpu"])
                load = time.perf_counter() - t
                placed = [d.provider for d in s.partition_report().nodes]
                got = s.run(None, feeds)
                err = max(float(np.abs(g.astype(np.float64) - w).max()) for g, w in zip(got, want))
                scale = max(float(np.abs(w).max()) for w in want) or 1.0
                ok = err <= 1e-3 * max(scale, 1.0) or (bm.name != "bert" and err <= 2e-3)
                if not ok:
                    failures += 1
                row = {"case": label, "max|d|": f"{err:.1e}", "ok": "ok" if ok else "MISMATCH",
                       "on_cuda": f"{placed.count('cuda')}/{len(placed)}", "load_s": f"{load:.1f}",
                       "epoxy_ms": f"{timeit(lambda: s.run(None, feeds), args.budget):.2f}"}  # noqa: B023 - called at once
                s = None
                if bm.name in ("bert", "light_resnet50"):
                    g = epoxy.InferenceSession(data, providers=[("cuda", {"cuda_graph": True}), "cpu"])
                    gerr = max(float(np.abs(a - b).max()) for a, b in zip(g.run(None, feeds), want))
                    row["graph_ms"] = f"{timeit(lambda: g.run(None, feeds), args.budget):.2f}"  # noqa: B023 - called at once
                    runners = dict(g._providers)["cuda"].graph_runners
                    why = [r.fallback_reason for r in runners if r.fallback_reason]
                    row["graph_note"] = f"max|d| {gerr:.1e}" + (f"; eager: {why[0][:60]}" if why else "")
                    g = None
                if has_ort_cuda:
                    oc = ort.InferenceSession(
                        data, ort.SessionOptions(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"]
                    )
                    row["ort_cuda_ms"] = f"{timeit(lambda: oc.run(None, feeds), args.budget):.2f}"  # noqa: B023 - called at once
                    row["ratio"] = f"{float(row['epoxy_ms']) / float(row['ort_cuda_ms']):.2f}"
                    oc = None
            except Exception as exc:  # keep going: one failing case must not hide the others
                failures += 1
                row = {"case": label, "ok": f"FAIL {type(exc).__name__}: {str(exc).splitlines()[0][:150]}"}
            rows.append(row)
            print(" | ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    cols = ["case", "ok", "max|d|", "on_cuda", "load_s", "epoxy_ms", "graph_ms", "ort_cuda_ms", "ratio", "graph_note"]
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
