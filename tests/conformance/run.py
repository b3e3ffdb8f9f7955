"""Developer tool: run backend cases and print failures (the pytest suite is the real check).

    python tests/conformance/run.py --kind node --match conv -v
    python tests/conformance/run.py --op Conv --op MaxPool
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from harness import KINDS, all_cases, case_ops, load_cases, run_case  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", action="append", choices=KINDS)
    parser.add_argument("--match", action="append", default=[], help="substring of the case name")
    parser.add_argument("--op", action="append", default=[], help="only cases whose graph has this op")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--providers", default="cpu")
    args = parser.parse_args()
    cases = [c for k in args.kind for c in load_cases(k)] if args.kind else all_cases()
    if args.match:
        cases = [c for c in cases if any(m in c.name for m in args.match)]
    if args.op:
        cases = [c for c in cases if case_ops(c) & set(args.op)]
    results: Counter[str] = Counter()
    failures = []
    for case in cases:
        try:
            run_case(case, args.providers.split(","))
            results["pass"] += 1
        except Exception as exc:  # noqa: BLE001 - a tool reporting every failure
            results["fail"] += 1
            msg = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            failures.append((case.name, msg))
            if args.verbose:
                print(f"FAIL {case.name}: {msg}")
                if args.verbose and len(cases) < 5:
                    traceback.print_exc()
    if not args.verbose:
        for name, msg in failures:
            print(f"FAIL {name}: {msg[:200]}")
    print(f"{results['pass']} passed, {results['fail']} failed of {len(cases)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
