"""pytest plugin (entry point ``pytest11``): ``--epoxy-provider NAME`` selects the provider
the conformance kit tests; fixtures give the registry entry and a created provider."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest

OP_RESULTS_KEY = pytest.StashKey[dict[str, Counter]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("epoxy-conformance")
    group.addoption("--epoxy-provider", default=None, help="name of the epoxy provider to test with the conformance kit")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[OP_RESULTS_KEY] = defaultdict(Counter)


@pytest.fixture(scope="session")
def epoxy_provider_name(request: pytest.FixtureRequest) -> str:
    name = request.config.getoption("--epoxy-provider")
    if not name:
        pytest.skip("no provider selected: pass --epoxy-provider NAME")
    return name


@pytest.fixture(scope="session")
def epoxy_provider_entry(epoxy_provider_name: str) -> Any:
    from epoxy.plugins import default_registry

    registry = default_registry()
    entry = registry.get(epoxy_provider_name)
    if entry is None:
        failures = [f for f in registry.failures if f.plugin == epoxy_provider_name]
        detail = f": {failures[0].reason}" if failures else ""
        pytest.fail(f"provider {epoxy_provider_name!r} is not installed or failed to load{detail}")
    return entry


@pytest.fixture(scope="session")
def epoxy_device(epoxy_provider_entry: Any) -> Any:
    devices = epoxy_provider_entry.devices()
    if not devices:
        pytest.skip(f"provider {epoxy_provider_entry.name!r} has no device here: {epoxy_provider_entry.unavailable_reason}")
    return devices[0]


def record_op_result(config: pytest.Config, ops: set[str], outcome: str) -> None:
    for op in ops:
        config.stash[OP_RESULTS_KEY][op][outcome] += 1


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    results = config.stash.get(OP_RESULTS_KEY, None)
    if not results:
        return
    terminalreporter.section("epoxy conformance: op scope")
    terminalreporter.write_line(f"{'op':<32} {'passed':>7} {'failed':>7}")
    for op in sorted(results):
        c = results[op]
        terminalreporter.write_line(f"{op:<32} {c['passed']:>7} {c['failed']:>7}")
