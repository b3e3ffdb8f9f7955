"""Per call position after a pause: epoxy and onnxruntime, blocks of calls after each kind of pause.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/pause_calls.py --model squeezenet --threads 1

Why: ``compare.py`` sleeps before each block so that the previous runtime's spinning workers are
asleep, and on these VMs memory goes cold within ~0.1 s whatever the process does, so a block's
first calls are slower; epoxy's more than onnxruntime's (bench/README.md, session 38). This
prints the median time of each call position within a block after: nothing, ``gc.collect()``,
a touch of every cache line of 64 MB (evicts the caches), and a sleep.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable

import numpy as np
import onnxruntime as ort
from models import bert_model, light_models

import epoxy


def pauses() -> dict[str, Callable[[], None]]:
    """The steps taken before each block, by name."""
    big = np.ones(64 << 20, np.uint8)

    def touch() -> None:
        big[::64] += 1

    return {"nothing": lambda: None, "gc.collect": gc.collect, "touch 64 MB": touch,
            "sleep 0.5 s": lambda: time.sleep(0.5)}


def positions(run: Callable[[], object], pause: Callable[[], None], blocks: int, calls: int) -> list[float]:
    """Median ms of each call position over ``blocks`` blocks, each after ``pause``."""
    seen: list[list[float]] = [[] for _ in range(calls)]
    for _ in range(blocks):
        pause()
        for i in range(calls):
            t0 = time.perf_counter()
            run()
            seen[i].append(time.perf_counter() - t0)
    return [statistics.median(s) * 1e3 for s in seen]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="squeezenet")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--blocks", type=int, default=15)
    ap.add_argument("--calls", type=int, default=5)
    args = ap.parse_args()
    model = next(m for m in [*light_models(), bert_model()] if args.model in m.name)
    feeds = model.make_feeds(np.random.default_rng(0))
    options = epoxy.SessionOptions(intra_op_num_threads=args.threads)
    mine = epoxy.InferenceSession(str(model.path), options, providers=["cpu"])
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = args.threads, 1
    theirs = ort.InferenceSession(str(model.path), so, providers=["CPUExecutionProvider"])
    runs = {"epoxy": lambda: mine.run(None, feeds), "onnxruntime": lambda: theirs.run(None, feeds)}
    for run in runs.values():
        for _ in range(20):
            run()
    print(f"### {model.name}, {args.threads} thread(s): median ms per call position, {args.blocks} blocks")
    print("| before each block | " + " | ".join(f"{name} calls 1-{args.calls}" for name in runs) + " |")
    print("|---|" + "---|" * len(runs))
    for name, pause in pauses().items():
        cells = [" ".join(f"{t:.2f}" for t in positions(run, pause, args.blocks, args.calls)) for run in runs.values()]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
