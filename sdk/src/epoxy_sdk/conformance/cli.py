"""``epoxy-conformance``: run the ONNX backend suite through epoxy; summary per kind and op.

    epoxy-conformance                          # all 2033 cases on cpu
    epoxy-conformance --providers myep --no-fallback --by-op
    epoxy-conformance --op Conv --match pads -v
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence

from .backend_suite import KINDS, Case, all_cases, case_ops, load_cases, run_case


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def run_cases(cases: Sequence[Case], providers: list[str], *, disable_fallback: bool = False,
              verbose: bool = False) -> dict[str, str | None]:
    """Case name -> None when it passed, else the first line of the failure."""
    results: dict[str, str | None] = {}
    for case in cases:
        try:
            run_case(case, providers, disable_fallback=disable_fallback)
            results[case.name] = None
        except Exception as exc:  # noqa: BLE001 - a report of every failure
            results[case.name] = _first_line(exc)
            if verbose:
                unclaimed = disable_fallback and results[case.name].startswith("UnsupportedOpError:")
                print(f"{'SKIP' if unclaimed else 'FAIL'} {case.name}: {results[case.name]}", flush=True)
    return results


def summarize(cases: Sequence[Case], results: dict[str, str | None], *, by_op: bool) -> str:
    lines = []
    per_kind: dict[str, Counter[str]] = defaultdict(Counter)
    for case in cases:
        per_kind[case.kind]["pass" if results[case.name] is None else "fail"] += 1
    total = Counter()
    lines.append(f"{'kind':<20} {'passed':>7} {'failed':>7} {'total':>7}")
    for kind in KINDS:
        if kind in per_kind:
            c = per_kind[kind]
            total.update(c)
            lines.append(f"{kind:<20} {c['pass']:>7} {c['fail']:>7} {c['pass'] + c['fail']:>7}")
    lines.append(f"{'all':<20} {total['pass']:>7} {total['fail']:>7} {total['pass'] + total['fail']:>7}")
    if by_op:
        per_op: dict[str, Counter[str]] = defaultdict(Counter)
        for case in cases:
            for op in case_ops(case):
                per_op[op]["pass" if results[case.name] is None else "fail"] += 1
        lines.append("")
        lines.append(f"{'op':<32} {'passed':>7} {'failed':>7}")
        for op in sorted(per_op):
            c = per_op[op]
            lines.append(f"{op:<32} {c['pass']:>7} {c['fail']:>7}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="epoxy-conformance", description=__doc__.splitlines()[0])
    parser.add_argument("--kind", action="append", choices=KINDS, help="case kind (repeat); default all")
    parser.add_argument("--match", action="append", default=[], help="substring of the case name (repeat)")
    parser.add_argument("--op", action="append", default=[], help="only cases whose graph uses this op (repeat)")
    parser.add_argument("--providers", default="cpu", help="comma-separated, priority order")
    parser.add_argument("--no-fallback", action="store_true",
                        help="do not append cpu; cases using a node no provider claims count as not claimed")
    parser.add_argument("--by-op", action="store_true", help="also print pass/fail per op")
    parser.add_argument("--json", help="write {case: failure or null} here")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each failure as it happens")
    args = parser.parse_args(argv)
    cases = [c for k in args.kind for c in load_cases(k)] if args.kind else all_cases()
    if args.match:
        cases = [c for c in cases if any(m in c.name for m in args.match)]
    if args.op:
        cases = [c for c in cases if case_ops(c) & set(args.op)]
    results = run_cases(cases, [p for p in args.providers.split(",") if p], disable_fallback=args.no_fallback,
                        verbose=args.verbose)
    # without fallback, a case using an op the providers do not claim is not a failure of
    # theirs: count it apart, as the pytest op scope skips it
    unclaimed = {name for name, failure in results.items()
                 if args.no_fallback and failure is not None and failure.startswith("UnsupportedOpError:")}
    if not args.verbose:
        for name, failure in results.items():
            if failure is not None and name not in unclaimed:
                print(f"FAIL {name}: {failure}")
    claimed = [c for c in cases if c.name not in unclaimed]
    print(summarize(claimed, results, by_op=args.by_op))
    passed = sum(1 for r in results.values() if r is None)
    print(f"{passed} passed, {len(results) - passed - len(unclaimed)} failed"
          + (f", {len(unclaimed)} not claimed (skipped)" if unclaimed else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
