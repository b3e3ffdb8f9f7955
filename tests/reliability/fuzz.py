"""Fuzz epoxy with mutated models (long-running mode; CI runs a bounded sample, see test_fuzz.py).

    python tests/reliability/fuzz.py --cases 10000 --seed 1 --workers 4
    python tests/reliability/fuzz.py --cases 10000 --save     # failing cases -> corpus/

Every case must either work or raise an ``epoxy.EpoxyError``; a foreign exception, a crash
or a hang is a failure. ``--save`` stores failing cases in ``corpus/`` where
``test_fuzz.py::test_corpus_case`` replays them forever.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import DEFAULT_TIMEOUT, Result, run_cases, save_to_corpus  # noqa: E402
from mutate import Case, make_case  # noqa: E402
from seeds import all_seeds  # noqa: E402


def generate(seed: int, count: int) -> Iterator[Case]:
    """Cases ``0..count-1`` of ``seed``: case i depends only on (seed, i)."""
    seeds = all_seeds()
    for i in range(count):
        yield make_case(random.Random(f"{seed}:{i}"), seeds, f"s{seed}-{i:06d}")


def fuzz(seed: int, count: int, workers: int, timeout: float, save: bool, verbose: bool) -> list[Result]:
    outcomes: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    failures: list[Result] = []
    cases = {}
    start = time.monotonic()

    def tracked() -> Iterator[Case]:
        for case in generate(seed, count):
            cases[case.name] = case
            yield case

    for n, result in enumerate(run_cases(tracked(), workers=workers, timeout=timeout), 1):
        case = cases.pop(result.name)
        outcomes[result.outcome] += 1
        if result.outcome == "error":
            errors[result.detail.split(":", 1)[0]] += 1
        if result.failed:
            failures.append(result)
            print(f"\n[{result.outcome}] {result.name}: {result.description}\n{result.detail}", flush=True)
            if save:
                print(f"  saved to {save_to_corpus(case, result)}", flush=True)
        elif verbose:
            print(f"{result.name} {result.outcome} {result.seconds:.2f}s {result.description} :: {result.detail}")
        if n % 500 == 0:
            rate = n / (time.monotonic() - start)
            print(f"{n}/{count} cases, {rate:.1f}/s, {dict(outcomes)}", flush=True)
    took = time.monotonic() - start
    print(f"\n{sum(outcomes.values())} cases in {took:.0f} s (seed {seed}): {dict(outcomes)}")
    print("epoxy errors raised:", dict(errors.most_common()))
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per case")
    parser.add_argument("--save", action="store_true", help="store failing cases in corpus/")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    failures = fuzz(args.seed, args.cases, args.workers, args.timeout, args.save, args.verbose)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
