"""What the session cache (#17, ``SessionOptions.session_cache_dir``) saves at session creation.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/session_cache.py
    EPOXY_BENCH_TORCH_PYTHON=/tmp/tvenv/bin/python env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \\
        .venv/bin/python bench/session_cache.py --set exporter --providers cpu,openvino

Per model file and provider set, in one process (runtimes imported and warmed first), the
fastest of ``--creations`` of: a session without the cache (*fresh*), the first session with
an empty cache folder (*miss*: prepared and stored), later ones (*hit*), and onnxruntime's CPU
session; ratios to onnxruntime. Then the fresh and the cached session run the same feed
interleaved (``--runs``): the outputs must be bit-identical and the ratio of median
latencies says the cache changes nothing at run time. ``openvino`` is epoxy with
``providers=[("openvino", f32, LATENCY, 1 stream), "cpu"]``.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

PROVIDER_SETS = {"cpu": lambda threads: ["cpu"],
                 "openvino": lambda threads: [("openvino", {"num_threads": threads, "performance_hint": "LATENCY",
                                                            "num_streams": 1, "precision": "f32"}), "cpu"]}


def models(set_name: str, wanted: str | None) -> list[Any]:
    """One entry per model file (the exporter set's batch sizes share a file)."""
    found: list[Any] = []
    if set_name in ("light", "all"):
        import models as bench_models

        found += bench_models.select_models(wanted)
    if set_name in ("exporter", "all"):
        import exporter_models

        seen: set[str] = set()
        for m in exporter_models.exporter_models(wanted):
            if str(m.path) not in seen:
                seen.add(str(m.path))
                found.append(m)
    return found


def fastest(make: Any, count: int) -> tuple[float, Any]:
    best, made = float("inf"), None
    for _ in range(count):
        t0 = time.perf_counter()
        made = make()
        best = min(best, time.perf_counter() - t0)
    return best, made


def geomean(values: list[float]) -> float:
    return float(np.exp(np.mean(np.log(values)))) if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=("light", "exporter", "all"), default="light")
    ap.add_argument("--models", default=None, help="comma-separated filter")
    ap.add_argument("--providers", default="cpu", help="comma-separated: cpu, openvino")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--creations", type=int, default=3)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()

    import onnxruntime as ort

    import epoxy

    folder = tempfile.mkdtemp(prefix="epoxy-session-cache-")

    def epoxy_session(path: str, kind: str, cache: bool) -> Any:
        options = epoxy.SessionOptions(intra_op_num_threads=args.threads)
        if cache:
            options.session_cache_dir = folder
        return epoxy.InferenceSession(path, options, providers=PROVIDER_SETS[kind](args.threads))

    def ort_session(path: str) -> Any:
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.log_severity_level = args.threads, 3
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    chosen = models(args.set, args.models)
    kinds = args.providers.split(",")
    warm = str(chosen[0].path)  # imports, plugin discovery, OpenVINO's core: paid before timing
    for kind in kinds:
        epoxy_session(warm, kind, False)
    ort_session(warm)
    print(f"# session cache: {len(chosen)} model files, providers {kinds}, {args.threads} thread(s), "
          f"fastest of {args.creations} creations, ms")
    print("| model | providers | fresh | miss | hit | onnxruntime | fresh/ort | hit/ort | hit/fresh | run cached/fresh "
          "| identical |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    ratios: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind in kinds}
    for m in chosen:
        path = str(m.path)
        feeds = m.make_feeds(np.random.default_rng(0))
        ort_s, _ = fastest(functools.partial(ort_session, path), args.creations)
        for kind in kinds:
            fresh_s, fresh = fastest(functools.partial(epoxy_session, path, kind, False), args.creations)
            t0 = time.perf_counter()
            epoxy_session(path, kind, True)
            miss_s = time.perf_counter() - t0
            hit_s, cached = fastest(functools.partial(epoxy_session, path, kind, True), args.creations)
            if not any(n.startswith("prepared from the session cache") for n in cached.partition_report().notes):
                raise SystemExit(f"{m.name} ({kind}): the second session did not come from the cache")
            same = all(np.array_equal(a, b) for a, b in zip(fresh.run(None, feeds), cached.run(None, feeds)))
            times: dict[str, list[float]] = {"fresh": [], "cached": []}
            for _ in range(args.runs):
                for name, session in (("fresh", fresh), ("cached", cached)):
                    t0 = time.perf_counter()
                    session.run(None, feeds)
                    times[name].append(time.perf_counter() - t0)
            run_ratio = float(np.median(times["cached"]) / np.median(times["fresh"]))
            ratios[kind].append((fresh_s / ort_s, hit_s / ort_s, run_ratio))
            print(f"| {m.name} | {kind} | {fresh_s * 1e3:.1f} | {miss_s * 1e3:.1f} | {hit_s * 1e3:.1f} | "
                  f"{ort_s * 1e3:.1f} | {fresh_s / ort_s:.2f} | {hit_s / ort_s:.2f} | {hit_s / fresh_s:.2f} | "
                  f"{run_ratio:.3f} | {same} |", flush=True)
    for kind, rows in ratios.items():
        print(f"| geomean | {kind} | | | | | {geomean([r[0] for r in rows]):.2f} | {geomean([r[1] for r in rows]):.2f} "
              f"| {geomean([r[1] / r[0] for r in rows]):.2f} | {geomean([r[2] for r in rows]):.3f} | |")


if __name__ == "__main__":
    main()
