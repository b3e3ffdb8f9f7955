"""A/B of an ep-cpu module constant on whole bench models, in one process.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/ab_constant.py \\
        epoxy_ep_cpu.jit.kernels_sgemm IMPLICIT_KC "256|64" --models squeezenet,resnet50 --threads 1

Why: this workplace's VMs move a model's time by up to 2x from one process to the next, and a
layer timed alone overstates what a route gains inside a model (bench/README.md, session 35).
Here one session is built under each value of the constant (the value must be read when a
layer's call is prepared, at its first run, not at every call), and the sessions are timed in
alternated blocks in the same process; the best block of each is printed with the ratio of each
value to the first.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import time
from typing import Any

import numpy as np
from models import bert_model, light_models

import epoxy


def session_under(module: Any, name: str, value: Any, path: str, threads: int, feeds: dict[str, np.ndarray]) -> Any:
    """A session of the model whose first run (where its calls are prepared) saw ``value``."""
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        options = epoxy.SessionOptions()
        options.intra_op_num_threads = threads
        session = epoxy.InferenceSession(path, options, providers=["cpu"])
        session.run(None, feeds)
    finally:
        setattr(module, name, original)
    return session


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("module", help="the module holding the constant (epoxy_ep_cpu.jit.kernels_sgemm)")
    ap.add_argument("name", help="the constant's name")
    ap.add_argument("values", help='Python literals separated by "|", the first the reference: "256|64"')
    ap.add_argument("--models", default="light", help="comma-separated bench model names or parts of them")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--blocks", type=int, default=12, help="alternated blocks per session")
    ap.add_argument("--runs", type=int, default=3, help="runs a block")
    args = ap.parse_args()
    module = importlib.import_module(args.module)
    if not hasattr(module, args.name):
        raise SystemExit(f"{args.module} has no {args.name}")
    texts = args.values.split("|")
    values = [ast.literal_eval(text) for text in texts]
    wanted = args.models.split(",")
    for bench in [*light_models(), bert_model()]:
        if not any(part in bench.name for part in wanted):
            continue
        feeds = bench.make_feeds(np.random.default_rng(0))
        sessions = [session_under(module, args.name, value, str(bench.path), args.threads, feeds) for value in values]
        best = [float("inf")] * len(sessions)
        for block in range(args.blocks):
            order = range(len(sessions)) if block % 2 == 0 else reversed(range(len(sessions)))
            for i in order:
                start = time.perf_counter()
                for _ in range(args.runs):
                    sessions[i].run(None, feeds)
                best[i] = min(best[i], (time.perf_counter() - start) / args.runs * 1e3)
        cells = ", ".join(f"{text}: {ms:.2f} ms ({ms / best[0]:.3f})" for text, ms in zip(texts, best))
        print(f"{bench.name} @{args.threads}t {args.name} {cells}", flush=True)


if __name__ == "__main__":
    main()
