"""The conformance kit passes a correct provider and fails a broken one (via pytester)."""

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

class Broken(KernelProvider):
    def capability(self, graph):
        return Capability(nodes=(0, 0))

class Factory:
    vendor, version, sdk_api, priority = "tests", "1.0", SDK_API_VERSION, 5
    def __init__(self, name, cls):
        self.name, self.cls = name, cls
    def devices(self):
        return [Device(self.name, "cpu")]
    def create(self, device, options):
        return self.cls(self.name, device, KERNELS, options)

registry = registry_with(
    Factory("good", KernelProvider),
    Factory("broken", Broken),
    plugin_name="kit-test",
)
reset_default_registry(registry)
'''


@pytest.mark.parametrize(("provider", "failed"), [("good", 0), ("broken", 2)])  # broken: capability and chains
def test_api_scope(pytester, provider, failed):
    pytester.makeconftest(CONFTEST)
    result = pytester.runpytest_inprocess(
        "--pyargs",
        "epoxy_sdk.conformance",
        "--epoxy-provider",
        provider,
        "--epoxy-scope",
        "api",
        "-p",
        "no:cacheprovider",
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == failed, result.stdout.str()[-2000:]
    assert outcomes.get("passed", 0) >= 9


def test_op_scope_reports_per_op(pytester):
    pytester.makeconftest(CONFTEST)
    result = pytester.runpytest_inprocess(
        "--pyargs", "epoxy_sdk.conformance", "--epoxy-provider", "good", "-k", "test_relu or test_add_bcast",
        "-p", "no:cacheprovider",
    )
    out = result.stdout.str()
    assert "epoxy conformance: op scope" in out
    assert result.parseoutcomes().get("passed", 0) >= 2, out[-2000:]
