"""``epoxy-conformance --no-fallback``: cases using ops the provider does not claim are
counted apart ("not claimed"), as the pytest op scope skips them, not as its failures."""

from __future__ import annotations

import numpy as np
from epoxy.contract import SDK_API_VERSION, Device
from epoxy.hookspecs import hookimpl
from epoxy.kit import KernelProvider, KernelRegistry
from epoxy.plugins import ProviderRegistry, reset_default_registry
from epoxy_sdk.conformance.cli import main

KERNELS = KernelRegistry()
KERNELS.register("Relu", (6, 13, 14))(lambda node: lambda x: np.maximum(x, x.dtype.type(0)))


class Factory:
    name, vendor, version, sdk_api, priority = "relu_only", "tests", "1.0", SDK_API_VERSION, 5

    def devices(self):
        return [Device(self.name, "cpu")]

    def create(self, device, options):
        return KernelProvider(self.name, device, KERNELS, options)


class Plugin:
    @hookimpl
    def epoxy_register_providers(self, register):
        register(Factory())


def test_no_fallback_counts_unclaimed_cases_apart(capsys):
    registry = ProviderRegistry(autoload=False)
    registry.add_plugin(Plugin(), name="relu_only")
    reset_default_registry(registry)
    assert main(["--providers", "relu_only", "--no-fallback", "--by-op", "--kind", "node", "--op", "Relu"]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out, out
    assert "0 failed, " in out and "not claimed (skipped)" in out, out
    relu = [line.split() for line in out.splitlines() if line.startswith("Relu ")]
    assert relu and int(relu[0][1]) >= 1 and relu[0][2] == "0", out
