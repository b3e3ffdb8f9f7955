"""Soak: run one model many times and report how the process's resident memory grows.

    python tests/reliability/soak.py                  # 100,000 runs of the conv model
    python tests/reliability/soak.py --runs 20000 --seed mlp --threads 4

Not a CI test. RSS is sampled after a warm-up (allocator pools, BLAS buffers and caches
fill during the first runs); a leak shows as growth that keeps rising with the run count.
Exit status 1 when the growth after warm-up exceeds ``--max-growth-mb``.
"""

from __future__ import annotations

import argparse
import gc
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))  # the seed models live with the fuzzer

import seeds  # noqa: E402

import epoxy  # noqa: E402


def rss_mb() -> float:
    """Current resident set size (Linux /proc; falls back to peak RSS elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        import os

        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--seed", default="conv", choices=sorted(seeds.SEEDS), help="model from seeds.py")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=2_000)
    parser.add_argument("--new-sessions", type=int, default=0, help="also create and drop this many sessions")
    parser.add_argument("--max-growth-mb", type=float, default=5.0)
    args = parser.parse_args(argv)

    session = epoxy.InferenceSession(seeds.SEEDS[args.seed](), providers=["cpu"])
    feeds = {}
    for arg in session.get_inputs():
        shape = [2 if not isinstance(d, int) else d for d in arg.shape or []]
        feeds[arg.name] = np.random.default_rng(0).standard_normal(shape).astype(arg.dtype or np.float32)

    def run(count: int) -> None:
        per_thread = count // args.threads

        def work() -> None:
            for _ in range(per_thread):
                session.run(None, feeds)

        threads = [threading.Thread(target=work) for _ in range(args.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    run(args.warmup)
    gc.collect()
    base = rss_mb()
    start = time.monotonic()
    print(f"model {args.seed}, {args.threads} thread(s); RSS after {args.warmup:,} warm-up runs: {base:.1f} MB")
    done, step = 0, max(args.runs // 10, 1)
    samples = []
    while done < args.runs:
        run(min(step, args.runs - done))
        done += min(step, args.runs - done)
        gc.collect()
        samples.append(rss_mb())
        print(f"  {done:>9,} runs  RSS {samples[-1]:8.1f} MB  (+{samples[-1] - base:.2f} MB)  "
              f"{done / (time.monotonic() - start):,.0f} runs/s", flush=True)
    for i in range(args.new_sessions):
        s = epoxy.InferenceSession(seeds.SEEDS[args.seed](), providers=["cpu"])
        s.run(None, feeds)
        del s
        if (i + 1) % max(args.new_sessions // 5, 1) == 0:
            gc.collect()
            print(f"  {i + 1:>9,} sessions created and dropped  RSS {rss_mb():8.1f} MB", flush=True)
    growth = rss_mb() - base
    print(f"RSS growth after warm-up: {growth:+.2f} MB over {args.runs:,} runs")
    return 1 if growth > args.max_growth_mb else 0


if __name__ == "__main__":
    raise SystemExit(main())
