"""Offline batch inference on Ray Data (issue #21): ``epoxy_serve.predict_batches`` over a dataset
of images with a pool of 1 and of 2 actors, epoxy against the same pool running onnxruntime.

The model is ``serving.py``'s small CNN (input ``image`` [N, 3, 32, 32], dynamic batch axis). The
dataset is ``ray.data.range(N)`` mapped to seeded images (``--blocks`` read tasks: each image made
by numpy from its id, so the reads are real tasks that need a CPU, as reading files would); an
``id`` column passes through the predictor, and every output row is checked against a direct
epoxy session's (within 1e-5). Each setting runs ``--repeats`` times, the settings interleaved.
Figures per run: wall time from the first pull to the last row (actor start included: a pool's
actors start with each execution), and the steady rate (rows after the first output batch /
time from it to the last). Needs a venv with ``epoxy-serve[ray]`` and onnxruntime, numpy<2 with
pyarrow<26 (bench/README.md, "Serving (#21)"):

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /tmp/servevenv/bin/python bench/serving_data.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from serving import SIZE, TOLERANCE, OrtServedModel, log, make_cnn

import epoxy


def images_for(ids: np.ndarray) -> np.ndarray:
    """The image of each id: seeded by the id, so any task makes the same one."""
    return np.stack([np.random.default_rng(int(i)).standard_normal((3, SIZE, SIZE), dtype=np.float32)
                     for i in ids]) if len(ids) else np.zeros((0, 3, SIZE, SIZE), np.float32)


def make_images(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"id": batch["id"], "image": images_for(batch["id"])}


def settle(timeout_s: float = 30.0) -> float:
    """Wait until the last run's actors gave their CPUs back (they linger a few seconds after a
    dataset ends, and ``predict_batches`` sizes its actors from the free CPUs); the seconds waited."""
    import ray

    start = time.perf_counter()
    while time.perf_counter() - start < timeout_s:
        if ray.available_resources().get("CPU", 0.0) >= ray.cluster_resources().get("CPU", 0.0):
            break
        time.sleep(0.25)
    return time.perf_counter() - start


def run_once(path: str, runtime: str, actors: int, args: argparse.Namespace, wanted: np.ndarray) -> dict[str, Any]:
    import ray.data

    settle()

    from epoxy_serve import EpoxyPredictor, predict_batches
    from epoxy_serve.ray_data import _actor_cpus

    class OrtPredictor(EpoxyPredictor):
        """``EpoxyPredictor`` with onnxruntime's session: the same column handling and batching."""

        def __init__(self, model: str, providers: Any = None, threads: int = 0) -> None:
            self.model = OrtServedModel("predictor", model, threads=threads)
            self._inputs = [spec.name for spec in self.model.inputs]

    ds = ray.data.range(args.rows, override_num_blocks=args.blocks).map_batches(make_images, batch_format="numpy")
    if runtime == "epoxy":
        out = predict_batches(ds, path, concurrency=actors, batch_size=args.batch_size)
    else:  # what predict_batches does, with the onnxruntime predictor
        cpus = _actor_cpus(actors, 1.0)
        out = ds.map_batches(OrtPredictor, fn_constructor_kwargs={"model": path, "threads": max(1, int(cpus))},
                             batch_size=args.batch_size, batch_format="numpy",
                             compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=cpus)
    rows = mismatches = 0
    first_at = None
    first_rows = 0
    start = time.perf_counter()
    for batch in out.iter_batches(batch_size=None, batch_format="numpy"):
        now = time.perf_counter()
        ids = batch["id"]
        mismatches += int(np.sum(~np.all(np.isclose(batch["logits"], wanted[ids], rtol=TOLERANCE, atol=TOLERANCE),
                                         axis=1)))
        rows += len(ids)
        if first_at is None:
            first_at, first_rows = now, len(ids)
    end = time.perf_counter()
    steady = (rows - first_rows) / (end - first_at) if first_at is not None and end > first_at else 0.0
    return {"runtime": runtime, "actors": actors, "rows": rows, "mismatches": mismatches, "wall_s": end - start,
            "rows_per_s": rows / (end - start), "steady_rows_per_s": steady,
            "first_batch_s": (first_at - start) if first_at is not None else 0.0}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtimes", default="epoxy,onnxruntime")
    parser.add_argument("--actors", default="1,2", help="pool sizes to compare (the ratio is last / first)")
    parser.add_argument("--rows", type=int, default=4096, help="images in the dataset")
    parser.add_argument("--blocks", type=int, default=16, help="read tasks (blocks) the images are made in")
    parser.add_argument("--batch-size", type=int, default=64, help="map_batches batch size")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=0, help="ray.init num_cpus (0: the machine's cores)")
    parser.add_argument("--json", help="write every run here")
    args = parser.parse_args(argv)
    runtimes = [r for r in args.runtimes.split(",") if r]
    pools = [int(a) for a in args.actors.split(",")]
    started = time.perf_counter()
    try:
        import ray
    except ImportError as exc:
        log(f"ray is not importable ({exc}); install epoxy-serve[ray]")
        return 1

    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "cnn.onnx")
        onnx.save(make_cnn(), path)
        session = epoxy.InferenceSession(path)
        all_images = images_for(np.arange(args.rows))
        wanted = np.concatenate([np.asarray(session.run(None, {"image": all_images[i:i + 256]})[0])
                                 for i in range(0, args.rows, 256)])
        # the workers import serving.py (OrtServedModel, make_images) by name
        bench = str(Path(__file__).resolve().parent)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (bench, os.environ.get("PYTHONPATH")) if p)
        t = time.perf_counter()
        ray.init(num_cpus=args.cpus or os.cpu_count(), include_dashboard=False, log_to_driver=False)
        log(f"ray.init: {time.perf_counter() - t:.1f} s, {ray.available_resources().get('CPU')} CPUs")
        runs: list[dict[str, Any]] = []
        try:
            import ray.data

            ray.data.DataContext.get_current().enable_progress_bars = False
            run_once(path, runtimes[0], 1, argparse.Namespace(**{**vars(args), "rows": 256}), wanted)  # warm
            for repeat in range(args.repeats):
                for runtime in runtimes:
                    for actors in pools:
                        run = run_once(path, runtime, actors, args, wanted)
                        run["repeat"] = repeat
                        runs.append(run)
                        log(f"{runtime} {actors} actor(s): {run['rows']} rows in {run['wall_s']:.2f} s "
                            f"({run['rows_per_s']:.0f} rows/s; steady {run['steady_rows_per_s']:.0f}; first batch "
                            f"after {run['first_batch_s']:.2f} s), {run['mismatches']} mismatches")
        finally:
            ray.shutdown()

    print("| runtime | actors | runs | rows | mismatches | wall s (median) | rows/s (median) "
          "| steady rows/s (median) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    med: dict[tuple[str, int], tuple[float, float]] = {}
    for runtime in runtimes:
        for actors in pools:
            mine = [r for r in runs if r["runtime"] == runtime and r["actors"] == actors]
            wall = statistics.median(r["wall_s"] for r in mine)
            rate = statistics.median(r["rows_per_s"] for r in mine)
            steady = statistics.median(r["steady_rows_per_s"] for r in mine)
            med[runtime, actors] = (rate, steady)
            print(f"| {runtime} | {actors} | {len(mine)} | {mine[0]['rows']} | {sum(r['mismatches'] for r in mine)} "
                  f"| {wall:.2f} | {rate:.0f} | {steady:.0f} |")
    print()
    low, high = pools[0], pools[-1]
    for runtime in runtimes:
        (r1, s1), (r2, s2) = med[runtime, low], med[runtime, high]
        print(f"{runtime:11} {high} actors / {low}: rows/s {r2 / r1:.2f}x, steady {s2 / s1 if s1 else 0:.2f}x")
    if "epoxy" in runtimes and "onnxruntime" in runtimes:
        for actors in pools:
            print(f"epoxy / onnxruntime, {actors} actor(s): rows/s "
                  f"{med['epoxy', actors][0] / med['onnxruntime', actors][0]:.2f}x")
    bad = sum(r["mismatches"] for r in runs)
    print(f"\n{bad} rows off by more than {TOLERANCE:g}; {time.perf_counter() - started:.0f} s; "
          f"{platform.machine()}, {os.cpu_count()} cores")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "args": vars(args)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
