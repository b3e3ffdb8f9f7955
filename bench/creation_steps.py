"""Where warm session creation goes, step by step, against onnxruntime's whole creation.

A timer wraps each loading step (``epoxy.load.loader``'s checks, shape inference, onnx_ir's
deserializer...) and each optimizer pass; the session's own stage timings (load, optimize,
partition, plan) come from ``InferenceSession.timings``. Per model the fastest of
``--creations`` warm creations is kept (onnxruntime's too, created alternately), and each step
is printed as a share of onnxruntime's creation time, averaged over the models: the column to
read is which steps sum to the gap (``TOTAL`` is epoxy / onnxruntime).

    python bench/creation_steps.py --set exporter          # the exporter-made files (dynamic dims)
    python bench/creation_steps.py --set light --models shufflenet,densenet121 --per-model

Steps nest (a pass inside ``optimize``, ``_infer_shapes`` inside ``load``): only the stage rows
add up to ``TOTAL``. Not a benchmark of record (the timers add ~1 us a call); see compare.py.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: (module, function) pairs timed when present (outermost call only: recursion is not counted twice)
LOADING_STEPS = [
    ("epoxy.load.loader", name) for name in (
        "_read_proto", "_first_bad_text", "_load_external_data", "_skeleton", "_checker_complaint", "vet_model",
        "check_attributes", "_infer_shapes", "apply_early_passes", "model_has_maps", "take_plain_types",
        "apply_plain_types", "attach_fills", "_own_initializer_data")
] + [("epoxy.run.limits", name) for name in ("check_declared_ranks", "check_proto_sizes", "check_proto_data")] + [
    ("onnx_ir.serde", "deserialize_model")]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=("light", "exporter"), default="exporter")
    ap.add_argument("--models", default=None, help="comma-separated filter, as compare.py's")
    ap.add_argument("--creations", type=int, default=5, help="warm creations per runtime and model (fastest kept)")
    ap.add_argument("--top", type=int, default=30, help="rows of the step table")
    ap.add_argument("--per-model", action="store_true", help="also print each model's stages and largest steps")
    return ap.parse_args(argv)


class StepTimer:
    """Accumulates seconds per step name for the creation being timed."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self._depth: dict[str, int] = collections.defaultdict(int)

    def wrap(self, owner: Any, name: str, label: str) -> None:
        real = getattr(owner, name)
        timer = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            timer._depth[label] += 1
            start = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                timer._depth[label] -= 1
                if not timer._depth[label]:
                    timer.seconds[label] += time.perf_counter() - start

        setattr(owner, name, timed)

    def install(self) -> None:
        for module_name, name in LOADING_STEPS:
            module = importlib.import_module(module_name)
            if hasattr(module, name):
                self.wrap(module, name, name)
        pipeline = importlib.import_module("epoxy.optimize.pipeline")
        run_passes, registration = pipeline._run_passes, pipeline.PassRegistration

        def timed_passes(model: Any, passes: Any, *rest: Any) -> Any:
            wrapped = []
            for entry in passes:
                wrapped.append(registration(self._timed_pass(entry), entry.level, entry.providers,
                                            entry.gradient_safe, entry.plugin))
            return run_passes(model, wrapped, *rest)

        pipeline._run_passes = timed_passes

    def _timed_pass(self, entry: Any) -> Callable[[Any], Any]:
        label = f"pass:{entry.name}"

        def run(model: Any) -> Any:
            start = time.perf_counter()
            try:
                return entry.pass_(model)
            finally:
                self.seconds[label] += time.perf_counter() - start

        run.name = entry.name  # type: ignore[attr-defined]
        return run


def model_paths(args: argparse.Namespace) -> list[Path]:
    if args.set == "exporter":
        from exporter_models import exporter_models

        found = exporter_models(args.models)
    else:
        from models import select_models

        found = select_models(args.models)
    paths: list[Path] = []
    for model in found:  # the exporter set lists each dynamic file once per batch point
        if model.path not in paths:
            paths.append(model.path)
    return paths


def measure(path: Path, creations: int, timer: StepTimer) -> tuple[float, float, dict[str, float]]:
    """(epoxy s, onnxruntime s, steps of the fastest epoxy creation incl. its stages)."""
    import onnxruntime as ort

    import epoxy

    options = epoxy.SessionOptions()
    options.intra_op_num_threads = 1
    ort_options = ort.SessionOptions()
    ort_options.intra_op_num_threads = 1
    ort_options.log_severity_level = 3
    for _ in range(2):  # both runtimes warm: imports, kernels in the cache, first-touch of their code
        epoxy.InferenceSession(str(path), options, providers=["cpu"])
        ort.InferenceSession(str(path), ort_options, providers=["CPUExecutionProvider"])
    best, best_ort, steps = math.inf, math.inf, {}
    for _ in range(creations):
        timer.seconds.clear()
        start = time.perf_counter()
        session = epoxy.InferenceSession(str(path), options, providers=["cpu"])
        took = time.perf_counter() - start
        start = time.perf_counter()
        ort.InferenceSession(str(path), ort_options, providers=["CPUExecutionProvider"])
        best_ort = min(best_ort, time.perf_counter() - start)
        if took < best:
            best = took
            steps = {**timer.seconds, **{f"stage:{k}": v for k, v in session.timings.items()}}
    return best, best_ort, steps


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    timer = StepTimer()
    timer.install()
    paths = model_paths(args)
    if not paths:
        print("no models matched", file=sys.stderr)
        return 1
    shares: dict[str, float] = collections.defaultdict(float)
    ratios = []
    for path in paths:
        took, took_ort, steps = measure(path, args.creations, timer)
        ratios.append(took / took_ort)
        for name, seconds in steps.items():
            shares[name] += seconds / took_ort
        shares["TOTAL"] += took / took_ort
        if args.per_model:
            largest = sorted(((s, n) for n, s in steps.items() if not n.startswith("stage:")), reverse=True)[:6]
            stages = " ".join(f"{n[6:]} {s * 1e3:.1f}" for n, s in steps.items() if n.startswith("stage:"))
            print(f"{path.stem}: {took * 1e3:.1f} ms (onnxruntime {took_ort * 1e3:.1f}, {took / took_ort:.2f}x) | "
                  f"{stages} | " + ", ".join(f"{n} {s * 1e3:.2f}" for s, n in largest))
    count = len(paths)
    print(f"\n{count} model file(s), {args.set} set; epoxy / onnxruntime warm creation geomean "
          f"{math.exp(sum(map(math.log, ratios)) / count):.2f}\n")
    print("| step | mean share of onnxruntime's creation |\n|---|---|")
    for name, total in sorted(shares.items(), key=lambda item: -item[1])[:args.top]:
        print(f"| {name} | {total / count:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
