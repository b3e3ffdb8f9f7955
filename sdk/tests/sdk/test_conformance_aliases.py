"""The kit's alias checks: a factory's optional ``aliases`` is a tuple of distinct names the
registry accepted, and a session created with each alias runs like one created by name."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

CONFTEST = '''
import numpy as np
from epoxy.contract import SDK_API_VERSION, Capability, Device
from epoxy.kit import KernelProvider, KernelRegistry
from epoxy.plugins import reset_default_registry
from epoxy.testing import registry_with

KERNELS = KernelRegistry()
for op, fn in {"Add": np.add, "Mul": np.multiply, "MatMul": np.matmul}.items():
    KERNELS.register(op, (7, 13, 14))(lambda node, fn=fn: fn)
KERNELS.register("Relu", (6, 13, 14))(lambda node: lambda x: np.maximum(x, 0).astype(x.dtype))
RELU_ONLY = KernelRegistry()
RELU_ONLY.register("Relu", (6, 13, 14))(lambda node: lambda x: np.maximum(x, 0).astype(x.dtype))

class Factory:
    """Right: one onnxruntime-style alias."""
    vendor, version, sdk_api, priority = "tests", "1.0", SDK_API_VERSION, 5
    kernels = KERNELS
    def __init__(self, name, aliases=None):
        self.name = name
        if aliases is not None:
            self.aliases = aliases
    def devices(self):
        return [Device(self.name, "cpu")]
    def create(self, device, options):
        return KernelProvider(self.name, device, self.kernels, options)

class ReluOnly(Factory):
    """Right too: claims only Relu (the kit then runs a Relu model), no cpu installed."""
    kernels = RELU_ONLY

registry = registry_with(
    Factory("good", ("GoodExecutionProvider",)),
    ReluOnly("relu_only", ("ReluExecutionProvider",)),
    Factory("plain"),
    Factory("as_list", ["ListExecutionProvider"]),
    Factory("as_str", "StrExecutionProvider"),
    Factory("empty", ("",)),
    Factory("repeated", ("RepeatedEP", "RepeatedEP")),
    Factory("own_name", ("own_name",)),
    Factory("reserved", ("copy",)),
    Factory("taken", ("GoodExecutionProvider",)),
    plugin_name="kit-test",
)
reset_default_registry(registry)
'''


#: providers none of whose declared aliases the registry accepts
ACCEPTS_NONE = {"as_str", "empty", "own_name", "reserved", "taken"}


def run_alias_checks(pytester: pytest.Pytester, provider: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess(
        "--pyargs", "epoxy_sdk.conformance.test_api_scope", "--epoxy-provider", provider, "-k", "alias",
        "-p", "no:cacheprovider",
    )


@pytest.mark.parametrize(("provider", "failing"), [
    ("good", None),
    ("relu_only", None),
    ("as_list", "test_aliases_are_well_formed"),
    ("as_str", "test_aliases_are_well_formed"),
    ("empty", "test_aliases_are_well_formed"),
    ("repeated", "test_aliases_are_well_formed"),
    ("own_name", "test_aliases_are_well_formed"),
    ("reserved", "test_aliases_are_well_formed"),
    ("taken", "test_aliases_are_well_formed"),
])
def test_alias_checks(pytester, provider, failing):
    pytester.makeconftest(CONFTEST)
    result = run_alias_checks(pytester, provider)
    outcomes = result.parseoutcomes()
    out = result.stdout.str()
    assert outcomes.get("failed", 0) == (failing is not None), out[-2000:]
    # the session check runs the aliases the registry accepted, and skips when there are none
    assert outcomes.get("passed", 0) + outcomes.get("skipped", 0) == 2 - (failing is not None), out[-2000:]
    assert outcomes.get("passed", 0) >= 1 or provider in ACCEPTS_NONE, out[-2000:]
    if failing:
        assert failing in out.split("short test summary")[-1], out[-2000:]


def test_alias_checks_skip_without_aliases(pytester):
    """aliases is optional: a factory without it is not failed for that."""
    pytester.makeconftest(CONFTEST)
    outcomes = run_alias_checks(pytester, "plain").parseoutcomes()
    assert outcomes.get("skipped", 0) == 2 and not outcomes.get("failed", 0)


def test_an_alias_the_session_does_not_resolve_fails(pytester, monkeypatch):
    """A core that accepted the alias but whose sessions do not resolve it would fail the kit."""
    from epoxy.plugins import ProviderRegistry

    monkeypatch.setattr(ProviderRegistry, "resolve", ProviderRegistry.get)
    pytester.makeconftest(CONFTEST)
    result = run_alias_checks(pytester, "good")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 1, result.stdout.str()[-2000:]
    assert "test_session_by_alias_runs_on_the_provider" in result.stdout.str().split("short test summary")[-1]
