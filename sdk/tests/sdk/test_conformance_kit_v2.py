"""Kit 2.0: the vendors' broken providers that passed the first kit now fail it, and a correct
compiling provider passes, its fused groups compiled and run (all through pytester)."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

CONFTEST = '''
import numpy as np
from epoxy.contract import Capability, Device, FusedGroup
from epoxy.errors import InvalidArgumentError
from epoxy.kit import HostAllocator, KernelProvider, KernelRegistry, convex_groups
from epoxy.plugins import reset_default_registry
from epoxy.testing import registry_with

KERNELS = KernelRegistry()
for op, fn in {"Add": np.add, "Mul": np.multiply, "MatMul": np.matmul, "Sub": np.subtract}.items():
    KERNELS.register(op, (7, 13, 14))(lambda node, fn=fn: fn)
for op, fn in {"Relu": lambda x: np.maximum(x, x.dtype.type(0)), "Neg": np.negative, "Abs": np.abs,
               "Tanh": np.tanh}.items():
    KERNELS.register(op, (6, 13, 14))(lambda node, fn=fn: fn)
FUSIBLE = {"Relu", "Neg", "Abs", "Tanh", "Add", "Mul"}


class Fuser:
    """A compiling provider: convex groups of the ops in FUSIBLE, run node by node."""
    out_dtype = None

    def __init__(self, name, device, options):
        self.name, self.device, self.allocator = name, device, HostAllocator(device)

    def capability(self, graph):
        supported = [n.index for n in graph.nodes if n.op_type in FUSIBLE]
        groups, declined = convex_groups(graph, supported, provider=self.name)
        return Capability(groups=tuple(FusedGroup(g, f"{self.name}{k}") for k, g in enumerate(groups)),
                          declined=declined)

    def kernel(self, node):
        raise NotImplementedError

    def compile(self, sub):
        nodes = [sub.graph.nodes[i] for i in sorted(sub.group.nodes)]
        kernels = [(n, KERNELS.lookup(n)[0](n)) for n in nodes]
        cast = self.out_dtype

        def run(*values):
            env = dict(zip(sub.inputs, values))
            for n, fn in kernels:
                env[n.outputs[0]] = fn(*[env[i] for i in n.inputs])
            return tuple(env[o] if cast is None else env[o].astype(cast) for o in sub.outputs)
        return run


class Float64Fuser(Fuser):
    out_dtype = np.float64


class RaisingFuser(Fuser):
    def compile(self, sub):
        raise RuntimeError("compiler crashed")


class NeedsMode(KernelProvider):
    def __init__(self, name, device, kernels, options):
        if dict(options) != {"mode": "fast"}:
            raise InvalidArgumentError(f"needs the option mode=fast, got {dict(options)}; known options: ['mode']")
        super().__init__(name, device, kernels, {})


class Factory:
    vendor, version, sdk_api, priority = "tests", "1.0", "1.0", 5

    def __init__(self, name, make):
        self.name, self.make = name, make

    def devices(self):
        return [Device(self.name, "cpu")]

    def create(self, device, options):
        return self.make(self.name, device, options)


class BrokenDevices(Factory):
    def devices(self):
        raise OSError("driver not loaded")


registry = registry_with(
    Factory("cpu", lambda n, d, o: KernelProvider(n, d, KERNELS, o)),
    Factory("fuser", Fuser),
    Factory("fuser_f64", Float64Fuser),
    Factory("compile_raises", RaisingFuser),
    Factory("needs_mode", lambda n, d, o: NeedsMode(n, d, KERNELS, o)),
    BrokenDevices("devices_raise", Fuser),
    plugin_name="kit-test",
)
reset_default_registry(registry)
'''


def _api_scope(pytester, provider: str, *extra: str):
    pytester.makeconftest(CONFTEST)
    return pytester.runpytest_inprocess("--pyargs", "epoxy_sdk.conformance", "--epoxy-provider", provider,
                                        "--epoxy-scope", "api", "-p", "no:cacheprovider", "-rfEs", *extra)


def test_a_correct_compiling_provider_passes_and_its_groups_are_exercised(pytester):
    result = _api_scope(pytester, "fuser", "-v")
    outcomes = result.parseoutcomes()
    out = result.stdout.str()
    assert outcomes.get("failed", 0) == 0, out[-3000:]
    for test in ("test_fused_chains_run_on_the_provider", "test_groups_the_provider_proposes_are_convex_and_compile",
                 "test_session_result_matches_reference"):
        assert any(test in line and "PASSED" in line for line in out.splitlines()), out[-3000:]
    assert outcomes.get("passed", 0) >= 12


@pytest.mark.parametrize(("provider", "failing", "message"), [
    # each passed the first kit
    ("fuser_f64", "test_fused_chains_run_on_the_provider", "OutputTypeError"),
    ("compile_raises", "test_fused_chains_run_on_the_provider", "compiler crashed"),
    ("compile_raises", "test_groups_the_provider_proposes_are_convex_and_compile", "compiler crashed"),
    ("devices_raise", "test_devices_are_device_objects", "device enumeration failed: OSError: driver not loaded"),
])
def test_broken_providers_fail_the_kit(pytester, provider, failing, message):
    result = _api_scope(pytester, provider)
    out = result.stdout.str()
    assert result.ret != 0, out[-3000:]
    failed_lines = [line for line in out.splitlines() if line.startswith(("FAILED", "ERROR")) and failing in line]
    assert failed_lines, out[-3000:]
    assert message in out, out[-3000:]


def test_devices_raise_is_not_skipped_even_when_unavailable_is_allowed(pytester):
    result = _api_scope(pytester, "devices_raise", "--epoxy-allow-unavailable")
    assert result.ret != 0 and result.parseoutcomes().get("skipped", 0) < 5, result.stdout.str()[-3000:]


def test_provider_options_reach_create_and_sessions(pytester):
    without = _api_scope(pytester, "needs_mode")
    assert without.ret != 0 and "needs the option mode=fast" in without.stdout.str()
    with_option = _api_scope(pytester, "needs_mode", "--epoxy-provider-option", "mode=fast")
    assert with_option.parseoutcomes().get("failed", 0) == 0, with_option.stdout.str()[-3000:]


def test_a_malformed_provider_option_is_a_usage_error(pytester):
    result = _api_scope(pytester, "fuser", "--epoxy-provider-option", "no-equals-sign")
    assert result.ret != 0 and "KEY=VALUE" in (result.stdout.str() + result.stderr.str())
