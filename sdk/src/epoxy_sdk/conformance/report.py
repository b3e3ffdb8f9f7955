"""The conformance report ``epoxy-conformance --json`` writes: one schema, so a vendor's CI,
a dashboard and a reviewer read the same thing.

Top level: ``schema`` (:data:`SCHEMA`), ``created`` (UTC ISO time), ``providers`` (asked, in
priority order), ``options`` (per provider, as given), ``fallback`` (cpu appended or not),
``versions`` (epoxy-core, epoxy-sdk, the SDK API, onnx, and each provider's package),
``machine`` (OS, CPU, Python), ``summary`` (counts per outcome), ``cases`` (one record per
case: ``name``, ``kind``, ``ops`` (``Op-version`` at the case's opset), ``outcome``, ``message``,
``seconds``, ``ran_on`` (node count per provider)), ``by_op`` (per ``Op-version``: counts per
outcome) and ``by_provider`` (nodes run per provider over the cases that passed).

Outcomes: ``pass``; ``fail`` (wrong values, dtype or shape: an ``AssertionError`` or an
:class:`~epoxy.errors.OutputTypeError`); ``error`` (anything else raised); ``not-claimed``
(without fallback, a node no listed provider claims: not the provider's failure).
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import platform
import sys
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA = "epoxy-conformance-report/1"
OUTCOMES = ("pass", "fail", "error", "not-claimed")


@dataclass
class CaseResult:
    name: str
    kind: str
    ops: list[str]
    outcome: str
    message: str | None
    seconds: float
    ran_on: dict[str, int] = field(default_factory=dict)


def classify(exc: BaseException | None, *, fallback: bool) -> str:
    """The outcome of a case that raised ``exc`` (``None``: it passed)."""
    from epoxy.errors import OutputTypeError, UnsupportedOpError

    if exc is None:
        return "pass"
    if isinstance(exc, UnsupportedOpError) and not fallback:
        return "not-claimed"
    if isinstance(exc, (AssertionError, OutputTypeError)):
        return "fail"
    return "error"


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions(providers: Sequence[str]) -> dict[str, Any]:
    from epoxy.plugins import default_registry
    from epoxy.sdk_api import SDK_API

    registry = default_registry()
    found: dict[str, Any] = {"epoxy-core": _version("epoxy-core"), "epoxy-sdk": _version("epoxy-sdk"),
                             "sdk_api": SDK_API, "onnx": _version("onnx"), "providers": {}}
    for name in providers:
        entry = registry.resolve(name)
        if entry is not None:
            found["providers"][entry.name] = {
                "package": entry.distribution, "package_version": entry.distribution_version,
                "factory_version": entry.factory.version, "sdk_api": str(entry.factory.sdk_api)}
    return found


def machine() -> dict[str, str]:
    return {"os": platform.platform(), "machine": platform.machine(), "processor": platform.processor(),
            "python": sys.version.split()[0]}


def build(results: Sequence[CaseResult], providers: Sequence[str], options: Mapping[str, Mapping[str, Any]],
          *, fallback: bool) -> dict[str, Any]:
    by_op: dict[str, Counter[str]] = defaultdict(Counter)
    by_provider: Counter[str] = Counter()
    for r in results:
        for op in r.ops:
            by_op[op][r.outcome] += 1
        if r.outcome == "pass":
            by_provider.update(r.ran_on)
    return {
        "schema": SCHEMA,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "providers": list(providers),
        "options": {k: dict(v) for k, v in options.items()},
        "fallback": fallback,
        "versions": versions(providers),
        "machine": machine(),
        "summary": {o: sum(1 for r in results if r.outcome == o) for o in OUTCOMES} | {"total": len(results)},
        "cases": [asdict(r) for r in results],
        "by_op": {op: {o: c[o] for o in OUTCOMES} for op, c in sorted(by_op.items())},
        "by_provider": dict(by_provider),
    }


def validate(report: Mapping[str, Any]) -> list[str]:
    """What in ``report`` does not follow the schema (empty when it does): what consumers of
    the report, and the kit's own tests, check."""
    problems = []
    required = {"schema": str, "created": str, "providers": list, "options": dict, "fallback": bool,
                "versions": dict, "machine": dict, "summary": dict, "cases": list, "by_op": dict, "by_provider": dict}
    for key, kind in required.items():
        if not isinstance(report.get(key), kind):
            problems.append(f"{key}: expected {kind.__name__}, got {type(report.get(key)).__name__}")
    if report.get("schema") != SCHEMA:
        problems.append(f"schema: {report.get('schema')!r} is not {SCHEMA!r}")
    for case in report.get("cases", []):
        if case.get("outcome") not in OUTCOMES:
            problems.append(f"case {case.get('name')!r}: outcome {case.get('outcome')!r} not in {OUTCOMES}")
        if not isinstance(case.get("seconds"), (int, float)) or not isinstance(case.get("ops"), list):
            problems.append(f"case {case.get('name')!r}: seconds/ops malformed")
    summary = report.get("summary", {})
    if isinstance(summary, dict) and summary.get("total") != len(report.get("cases", [])):
        problems.append("summary.total differs from the number of cases")
    return problems
