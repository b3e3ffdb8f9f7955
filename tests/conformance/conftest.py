"""Per-kind pass/fail summary of the backend suite (works under pytest-xdist: the
controller counts the reports the workers send back)."""

from __future__ import annotations

import os
from collections import Counter, defaultdict

_RESULTS: dict[str, Counter] = defaultdict(Counter)
KINDS = ("node", "simple", "pytorch-converted", "pytorch-operator", "real")


def pytest_runtest_logreport(report):  # type: ignore[no-untyped-def]
    if report.when != "call" or "test_case[" not in report.nodeid:
        return
    kind = report.nodeid.split("test_case[", 1)[1].split("/", 1)[0]
    passed = dict(report.user_properties).get("epoxy_passed")
    _RESULTS[kind]["passed" if passed else "failed"] += 1


def pytest_terminal_summary(terminalreporter, config):  # type: ignore[no-untyped-def]
    if not _RESULTS:
        return
    providers = os.environ.get("EPOXY_CONFORMANCE_PROVIDERS", "cpu")
    terminalreporter.section(f"ONNX backend suite through epoxy ({providers})")
    total = Counter()
    for kind in KINDS:
        c = _RESULTS.get(kind)
        if c:
            total.update(c)
            terminalreporter.write_line(f"{kind:<20} {c['passed']:>5} passed {c['failed']:>5} failed")
    terminalreporter.write_line(f"{'all':<20} {total['passed']:>5} passed {total['failed']:>5} failed "
                                f"of {total['passed'] + total['failed']}")
