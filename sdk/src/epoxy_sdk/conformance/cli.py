"""``epoxy-conformance``: run the ONNX backend suite through epoxy; summary per kind and op.

    epoxy-conformance                          # all 2033 cases on cpu
    epoxy-conformance --providers myep --no-fallback --by-op --json report.json
    epoxy-conformance --providers myep --provider-option device_type=GPU --op Conv -v

``--json`` writes the schema'd report of :mod:`epoxy_sdk.conformance.report`. Output checks
are on: a provider returning the wrong dtype or shape fails at its node.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from . import report as reports
from .backend_suite import KINDS, Case, all_cases, case_op_versions, case_ops, load_cases, run_case


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def run_cases(cases: Sequence[Case], providers: list[str], *, disable_fallback: bool = False,
              verbose: bool = False, provider_options: Mapping[str, Mapping[str, Any]] | None = None,
              ) -> list[reports.CaseResult]:
    """Every case run, timed and classified (see :func:`report.classify`)."""
    results = []
    for case in cases:
        start = time.perf_counter()
        ran_on: dict[str, int] = {}
        try:
            ran_on = run_case(case, providers, disable_fallback=disable_fallback,
                              provider_options=provider_options).summary()
            failure: BaseException | None = None
        except Exception as exc:  # noqa: BLE001 - a report of every failure
            failure = exc
        outcome = reports.classify(failure, fallback=not disable_fallback)
        message = None if failure is None else _first_line(failure)
        results.append(reports.CaseResult(case.name, case.kind, case_op_versions(case), outcome, message,
                                          round(time.perf_counter() - start, 4), ran_on))
        if verbose and outcome != "pass":
            print(f"{outcome.upper()} {case.name}: {message}", flush=True)
    return results


def summarize(cases: Sequence[Case], results: Sequence[reports.CaseResult], *, by_op: bool) -> str:
    """The terminal table: outcomes per kind (and per op)."""
    outcome_of = {r.name: r.outcome for r in results}
    columns = reports.OUTCOMES
    header = f"{'kind':<20} " + " ".join(f"{c:>11}" for c in columns) + f" {'total':>7}"
    lines = [header]
    per_kind: dict[str, Counter[str]] = defaultdict(Counter)
    for case in cases:
        per_kind[case.kind][outcome_of[case.name]] += 1
    total: Counter[str] = Counter()
    for kind in KINDS:
        if kind in per_kind:
            c = per_kind[kind]
            total.update(c)
            lines.append(f"{kind:<20} " + " ".join(f"{c[o]:>11}" for o in columns) + f" {sum(c.values()):>7}")
    lines.append(f"{'all':<20} " + " ".join(f"{total[o]:>11}" for o in columns) + f" {sum(total.values()):>7}")
    if by_op:
        per_op: dict[str, Counter[str]] = defaultdict(Counter)
        for case in cases:
            for op in case_ops(case):
                per_op[op][outcome_of[case.name]] += 1
        lines.append("")
        lines.append(f"{'op':<32} " + " ".join(f"{c:>11}" for c in columns))
        for op in sorted(per_op):
            lines.append(f"{op:<32} " + " ".join(f"{per_op[op][o]:>11}" for o in columns))
    return "\n".join(lines)


def _options(pairs: Sequence[str], provider: str) -> dict[str, dict[str, str]]:
    found: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"epoxy-conformance: --provider-option takes KEY=VALUE, got {pair!r}")
        found[key.strip()] = value
    return {provider: found} if found else {}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="epoxy-conformance", description=__doc__.splitlines()[0])
    parser.add_argument("--kind", action="append", choices=KINDS, help="case kind (repeat); default all")
    parser.add_argument("--match", action="append", default=[], help="substring of the case name (repeat)")
    parser.add_argument("--op", action="append", default=[], help="only cases whose graph uses this op (repeat)")
    parser.add_argument("--providers", default="cpu", help="comma-separated, priority order")
    parser.add_argument("--provider-option", action="append", default=[], metavar="KEY=VALUE",
                        help="an option of the first listed provider (repeat)")
    parser.add_argument("--no-fallback", action="store_true",
                        help="do not append cpu; cases using a node no provider claims count as not claimed")
    parser.add_argument("--by-op", action="store_true", help="also print outcomes per op")
    parser.add_argument("--json", help="write the schema'd report (epoxy-conformance-report/1) here")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each failure as it happens")
    args = parser.parse_args(argv)
    cases = [c for k in args.kind for c in load_cases(k)] if args.kind else all_cases()
    if args.match:
        cases = [c for c in cases if any(m in c.name for m in args.match)]
    if args.op:
        cases = [c for c in cases if case_ops(c) & set(args.op)]
    providers = [p for p in args.providers.split(",") if p]
    options = _options(args.provider_option, providers[0])
    results = run_cases(cases, providers, disable_fallback=args.no_fallback, verbose=args.verbose,
                        provider_options=options)
    if not args.verbose:
        for r in results:
            if r.outcome in ("fail", "error"):
                print(f"{r.outcome.upper()} {r.name}: {r.message}")
    print(summarize(cases, results, by_op=args.by_op))
    count = Counter(r.outcome for r in results)
    print(f"{count['pass']} passed, {count['fail']} failed, {count['error']} errors"
          + (f", {count['not-claimed']} not claimed (skipped)" if count["not-claimed"] else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports.build(results, providers, options, fallback=not args.no_fallback), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
