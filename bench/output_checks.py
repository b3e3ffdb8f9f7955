"""What output checks cost: the same sessions with and without ``check_outputs``.

    .venv/bin/python bench/output_checks.py            # dispatch chain + light models, 1 thread
    .venv/bin/python bench/output_checks.py --runs 50

Two worst-to-typical cases: the 1000-node ``Add`` chain of ``dispatch.py`` (tiny tensors: the
per-node cost of a check is all there is to see), and the ``light_*`` models from
``models.py`` (real layers). Reported: median ms per run without and with checks, their
ratio, and µs added per checked node. Runs are interleaved (off, on, off, on ...) so machine
noise falls on both alike. Not a test: nothing fails on slow numbers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _sessions(source):  # type: ignore[no-untyped-def]
    """Two sessions of one model (a path, or serialized bytes): checks off, then on."""
    import epoxy

    return [epoxy.InferenceSession(source, epoxy.SessionOptions(check_outputs=flag), providers=["cpu"])
            for flag in (False, True)]


def _interleaved(sessions, feeds, runs: int) -> list[list[float]]:  # type: ignore[no-untyped-def]
    times: list[list[float]] = [[] for _ in sessions]
    for session in sessions:  # warm up
        session.run(None, feeds)
    for _ in range(runs):
        for k, session in enumerate(sessions):
            start = time.perf_counter()
            session.run(None, feeds)
            times[k].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=1000)
    args = parser.parse_args()
    from dispatch import build_chain

    chain, _ = build_chain(args.nodes)
    x = np.zeros((1, 16), np.float32)
    cases = [(f"add chain x{args.nodes}", chain.SerializeToString(), {"x": x})]
    try:
        from models import light_models

        rng = np.random.default_rng(0)
        cases += [(m.name, str(m.path), m.make_feeds(rng)) for m in light_models()]
    except Exception as exc:  # noqa: BLE001 - the chain alone still says what a check costs
        print(f"light models skipped: {type(exc).__name__}: {exc}")
    print(f"{'model':<28} {'nodes':>6} {'off ms':>9} {'on ms':>9} {'ratio':>7} {'us/node':>8}")
    for name, source, feeds in cases:
        sessions = _sessions(source)
        off, on = (statistics.median(t) for t in _interleaved(sessions, feeds, args.runs))
        steps = len(sessions[1]._plan.steps)
        print(f"{name:<28} {steps:>6} {off * 1e3:>9.3f} {on * 1e3:>9.3f} {on / off:>7.3f} "
              f"{(on - off) / max(steps, 1) * 1e6:>8.2f}")


if __name__ == "__main__":
    main()
