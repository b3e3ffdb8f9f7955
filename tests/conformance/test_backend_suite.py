"""The ONNX backend test suite (onnx 1.23: 2033 cases) through epoxy with ep-cpu.

Every case must pass unless ``expected_failures.txt`` lists it with a reason; a listed case
that passes fails the run too (strict), so the list only ever shrinks honestly.

``EPOXY_CONFORMANCE_PROVIDERS=openvino,cpu`` runs the suite with another provider first
(cpu fallback); its extra failures are listed in ``expected_failures_<first>.txt``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from epoxy_sdk.conformance.backend_suite import all_cases, run_case

PROVIDERS = [p for p in os.environ.get("EPOXY_CONFORMANCE_PROVIDERS", "cpu").split(",") if p]
EXPECTED_FAILURES_FILE = Path(__file__).with_name("expected_failures.txt")
EXTRA_FAILURES_FILE = Path(__file__).with_name(f"expected_failures_{PROVIDERS[0]}.txt")


def load_expected_failures() -> dict[str, str]:
    entries = _read(EXPECTED_FAILURES_FILE)
    if PROVIDERS != ["cpu"]:
        entries.update(_read(EXTRA_FAILURES_FILE) if EXTRA_FAILURES_FILE.exists() else {})
    return entries


def _read(path: Path) -> dict[str, str]:
    entries: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition(" ")
        if not reason.strip():
            raise ValueError(f"{path.name}: {name} has no reason")
        entries[name] = reason.strip()
    return entries


EXPECTED = load_expected_failures()
CASES = all_cases()


def test_expected_failures_name_real_cases():
    names = {c.name for c in CASES}
    unknown = sorted(set(EXPECTED) - names)
    assert not unknown, f"expected_failures.txt lists unknown cases: {unknown[:10]}"


@pytest.mark.parametrize("case", CASES, ids=[f"{c.kind}/{c.name}" for c in CASES])
def test_case(case, record_property):
    reason = EXPECTED.get(case.name)
    try:
        run_case(case, PROVIDERS)
    except Exception:
        record_property("epoxy_passed", False)
        if reason is not None:
            pytest.xfail(reason)
        raise
    record_property("epoxy_passed", True)
    if reason is not None:
        pytest.fail(f"{case.name} passes now: remove it from expected_failures.txt (was: {reason})")
