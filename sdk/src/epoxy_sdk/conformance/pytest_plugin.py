"""pytest plugin (entry point ``pytest11``) of the conformance kit.

    pytest --pyargs epoxy_sdk.conformance --epoxy-provider NAME
           [--epoxy-provider-option key=value ...] [--epoxy-allow-unavailable]
           [--epoxy-scope api|aot|op|all]

Strict by default, like OpenVINO's API conformance scope: a provider that is not installed,
whose ``devices()`` raises or finds nothing, or whose ``create()`` fails makes the kit fail,
never skip (``--epoxy-allow-unavailable`` turns "no device here" into a skip, for a CI
machine without the hardware). Options given with ``--epoxy-provider-option`` reach
``create()`` and every session the kit makes, so each configuration can be tested.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

import pytest

OP_RESULTS_KEY = pytest.StashKey[dict[str, Counter]]()
SCOPES = ("api", "aot", "op", "all")
#: scope -> the kit's test files it runs: the ahead-of-time checks are part of the API scope
#: (a provider implementing the optional methods must pass them 100%) and runnable alone
_SCOPE_FILES = {"api": {"test_api_scope.py", "test_aot_scope.py"}, "aot": {"test_aot_scope.py"},
                "op": {"test_op_scope.py"}}
_KIT_FILES = frozenset().union(*_SCOPE_FILES.values())


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("epoxy-conformance")
    group.addoption(
        "--epoxy-provider", default=None, help="name of the epoxy provider to test with the conformance kit"
    )
    group.addoption("--epoxy-provider-option", action="append", default=[], metavar="KEY=VALUE",
                    help="a provider option passed to create() and to the kit's sessions (repeatable)")
    group.addoption("--epoxy-allow-unavailable", action="store_true",
                    help="skip (instead of fail) when the provider finds no device on this machine")
    group.addoption("--epoxy-scope", choices=SCOPES, default="all",
                    help="api: the API scope only, ahead-of-time checks included (fast: the ONNX node cases "
                         "are not even loaded); aot: the ahead-of-time checks alone (SDK API 1.2 "
                         "export_compiled/import_compiled); op: the op scope only; all (default)")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[OP_RESULTS_KEY] = defaultdict(Counter)


def pytest_ignore_collect(collection_path: Any, config: pytest.Config) -> bool | None:
    """``--epoxy-scope``: leave the other scopes' modules uncollected (the op scope loads every
    ONNX node case when imported)."""
    scope = config.getoption("--epoxy-scope", default="all")
    if scope == "all" or collection_path.parent.name != "conformance" or collection_path.name not in _KIT_FILES:
        return None
    return True if collection_path.name not in _SCOPE_FILES[scope] else None


def parse_provider_options(pairs: list[str]) -> dict[str, str]:
    """``["a=1", "b=x=y"]`` -> ``{"a": "1", "b": "x=y"}``; values stay strings, as
    onnxruntime's provider options are, and the provider's option table parses them."""
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise pytest.UsageError(f"--epoxy-provider-option takes KEY=VALUE, got {pair!r}")
        if key.strip() in options:
            raise pytest.UsageError(f"--epoxy-provider-option {key.strip()!r} given twice")
        options[key.strip()] = value
    return options


@pytest.fixture(scope="session")
def epoxy_provider_name(request: pytest.FixtureRequest) -> str:
    name = request.config.getoption("--epoxy-provider")
    if not name:
        pytest.skip("no provider selected: pass --epoxy-provider NAME")
    return name


@pytest.fixture(scope="session")
def epoxy_provider_options(request: pytest.FixtureRequest) -> Mapping[str, str]:
    return parse_provider_options(request.config.getoption("--epoxy-provider-option"))


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
def epoxy_device(epoxy_provider_entry: Any, request: pytest.FixtureRequest) -> Any:
    devices = epoxy_provider_entry.devices()
    if not devices:
        reason = epoxy_provider_entry.unavailable_reason
        message = f"provider {epoxy_provider_entry.name!r} has no device here: {reason}"
        broken = reason is not None and reason.startswith("device enumeration failed")
        if request.config.getoption("--epoxy-allow-unavailable") and not broken:
            pytest.skip(message)
        pytest.fail(message + ("" if broken else " (pass --epoxy-allow-unavailable to skip on such a machine)"))
    return devices[0]


@pytest.fixture(scope="session")
def epoxy_provider(epoxy_provider_entry: Any, epoxy_device: Any, epoxy_provider_options: Mapping[str, str]) -> Any:
    """The provider created once with the kit's options; a failing ``create()`` fails the kit."""
    try:
        return epoxy_provider_entry.factory.create(epoxy_device, dict(epoxy_provider_options))
    except Exception as exc:  # noqa: BLE001 - reported as the kit's failure
        pytest.fail(f"provider {epoxy_provider_entry.name!r} failed to start on {epoxy_device.label} with options "
                    f"{dict(epoxy_provider_options)}: {type(exc).__name__}: {exc}")


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
