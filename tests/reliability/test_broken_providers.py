"""A matrix of broken providers: each gives a working session (cpu takes over) with the
reason in the partition report, or, with ``EPOXY_STRICT_PLUGINS=1``, a clear error."""

from __future__ import annotations

import sys
import threading
import time
import types
import warnings
from importlib.metadata import EntryPoint

import numpy as np
import pytest
from onnx import TensorProto, helper

import epoxy
from epoxy.contract import Capability, Device, FusedGroup
from epoxy.kit import HostAllocator
from epoxy.plugins import ProviderRegistry
from epoxy.testing import registry_with

RELEASE = threading.Event()  # lets a hanging devices() return when the tests are done


def diamond():
    """a = Neg(x); b = Relu(a); y = Add(a, b): a group {a, y} without b is not convex."""
    nodes = [helper.make_node("Neg", ["x"], ["a"], name="a"), helper.make_node("Relu", ["a"], ["b"], name="b"),
             helper.make_node("Add", ["a", "b"], ["y"], name="c")]
    graph = helper.make_graph(nodes, "diamond", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


X = np.array([-2.0, -1.0, 1.0, 2.0], np.float32)
EXPECTED = -X + np.maximum(-X, 0)

OPS = {"Neg": np.negative, "Relu": lambda v: np.maximum(v, 0), "Add": np.add}


class VendorProvider:
    name = "vendor"

    def __init__(self, mode: str, device: Device) -> None:
        self.mode, self.device = mode, device
        self.allocator = HostAllocator(device)

    def capability(self, graph):
        mode = self.mode
        if mode == "capability raises":
            raise RuntimeError("capability exploded")
        if mode == "capability returns garbage":
            return {"nodes": "all of them"}
        if mode == "capability bad indices":
            return Capability(nodes=(0, 99))
        if mode == "capability unhashable":
            return Capability(nodes=([0],))  # type: ignore[arg-type]
        if mode == "capability bad group":
            return Capability(groups=(FusedGroup((0, -1), "g"),))
        if mode == "non-convex group":
            return Capability(groups=(FusedGroup((0, 2), "ac"),))
        if mode == "compile fails":
            return Capability(groups=(FusedGroup((0, 1, 2), "all"),))
        return Capability(nodes=tuple(n.index for n in graph.nodes))

    def kernel(self, node):
        if self.mode == "kernel factory raises":
            raise RuntimeError("no kernel today")
        if self.mode == "kernel raises at run time":
            def boom(*args):
                raise FloatingPointError("vendor kernel crashed")
            return boom
        return OPS[node.op_type]

    def compile(self, subgraph):
        raise RuntimeError("vendor compiler crashed")


class VendorFactory:
    name, vendor, version, sdk_api, priority = "vendor", "tests", "0.1", "1.0", 100

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def devices(self):
        if self.mode == "devices hang":
            RELEASE.wait(60)
        if self.mode == "devices raise":
            raise OSError("driver not loaded")
        return [Device("vendor", "cpu", 0, "vendor test device")]

    def create(self, device, options):
        if self.mode == "create raises":
            raise RuntimeError("out of licenses")
        return VendorProvider(self.mode, device)


@pytest.fixture(autouse=True)
def _quick_device_timeout(monkeypatch):
    monkeypatch.setenv("EPOXY_DEVICE_TIMEOUT", "0.5")
    RELEASE.clear()
    yield
    RELEASE.set()


def _registry(mode: str) -> ProviderRegistry:
    import epoxy_ep_cpu.plugin

    return registry_with(epoxy_ep_cpu.plugin, VendorFactory(mode), plugin_name="vendor")


def _session(registry, providers=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return epoxy.InferenceSession(diamond(), providers=providers, registry=registry)


def _reasons(session) -> str:
    report = session.partition_report()
    declined = [r for n in report.nodes for p, r in n.declined if p == "vendor"]
    return " | ".join([*report.notes, *declined])


# mode -> (what the report says in lenient mode, the error strict mode raises)
SKIPPED = {
    "devices hang": ("did not return within 0.5 s", epoxy.PluginLoadError),
    "devices raise": ("OSError: driver not loaded", epoxy.PluginLoadError),
    "create raises": ("failed to start on vendor:cpu:0: RuntimeError: out of licenses", epoxy.ProviderError),
    "capability raises": ("failed in capability(): RuntimeError: capability exploded", epoxy.ProviderError),
    "capability returns garbage": ("capability() returned dict, expected Capability", epoxy.ProviderError),
    "capability bad indices": ("capability() returned invalid nodes (0, 99)", epoxy.ProviderError),
    "capability unhashable": ("capability() returned invalid nodes", epoxy.ProviderError),
    "capability bad group": ("capability() returned invalid groups", epoxy.ProviderError),
    "kernel factory raises": ("could not create a kernel for node 'a'", epoxy.ProviderError),
    "compile fails": ("failed to compile group 'all'", epoxy.ProviderError),
}


@pytest.mark.parametrize("mode", sorted(SKIPPED))
def test_broken_provider_is_skipped_with_the_reason_in_the_report(mode):
    session = _session(_registry(mode))
    assert session.get_providers() == ["cpu"]
    np.testing.assert_array_equal(session.run(None, {"x": X})[0], EXPECTED)
    assert SKIPPED[mode][0] in _reasons(session)


@pytest.mark.parametrize("mode", sorted(SKIPPED))
def test_strict_mode_turns_a_broken_provider_into_a_clear_error(mode, monkeypatch):
    import epoxy_ep_cpu.plugin

    _session(registry_with(epoxy_ep_cpu.plugin))  # the first session's imports are not what is timed
    monkeypatch.setenv("EPOXY_STRICT_PLUGINS", "1")
    start = time.monotonic()
    with pytest.raises(SKIPPED[mode][1], match="vendor") as info:
        _session(_registry(mode))
    assert SKIPPED[mode][0] in str(info.value)
    assert time.monotonic() - start < 10


def test_explicitly_requested_provider_that_fails_to_start_is_an_error():
    with pytest.raises(epoxy.ProviderError, match="out of licenses"):
        _session(_registry("create raises"), providers=["vendor", "cpu"])


def test_non_convex_group_is_declined_and_the_session_works():
    session = _session(_registry("non-convex group"))
    np.testing.assert_array_equal(session.run(None, {"x": X})[0], EXPECTED)
    assert "fusing it would create a cycle (not convex)" in _reasons(session)


def test_kernel_raising_at_run_time_is_a_kernel_error_naming_node_and_provider():
    session = _session(_registry("kernel raises at run time"))
    with pytest.raises(epoxy.KernelError, match="node 'a' \\(Neg\\) failed on provider 'vendor': "
                                                "FloatingPointError: vendor kernel crashed") as info:
        session.run(None, {"x": X})
    assert (info.value.node, info.value.provider) == ("a", "vendor")


def _module(name: str, source: str) -> str:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)  # noqa: S102 - test plugin source
    sys.modules[name] = module
    return name


PLUGIN_SOURCES = {
    "import error": None,
    "register hook raises": ("from epoxy.hookspecs import hookimpl\n@hookimpl\n"
                             "def epoxy_register_providers(register):\n    raise RuntimeError('factory exploded')\n"),
    "sdk mismatch": ("from epoxy.hookspecs import hookimpl\nclass F:\n"
                     "    name, vendor, version, sdk_api, priority = 'oldsdk', 'x', '0.1', 0, 5\n"
                     "    def devices(self): return []\n    def create(self, d, o): return None\n"
                     "@hookimpl\ndef epoxy_register_providers(register):\n    register(F())\n"),
    "factory lacks attributes": ("from epoxy.hookspecs import hookimpl\n@hookimpl\n"
                                 "def epoxy_register_providers(register):\n    register(object())\n"),
}
PLUGIN_REASONS = {"import error": "ModuleNotFoundError", "register hook raises": "factory exploded",
                  "sdk mismatch": "targets epoxy SDK API 0", "factory lacks attributes": "factory lacks"}


def _entry_point(kind: str) -> EntryPoint:
    source = PLUGIN_SOURCES[kind]
    name = "epoxy_test_no_such_plugin" if source is None else _module(f"epoxy_test_{kind.replace(' ', '_')}", source)
    return EntryPoint(name="broken", value=name, group="epoxy.providers")


@pytest.mark.parametrize("kind", sorted(PLUGIN_SOURCES))
def test_broken_plugin_is_recorded_and_sessions_work(kind):
    import epoxy_ep_cpu.plugin

    registry = ProviderRegistry(autoload=False)
    registry.load_entry_points([_entry_point(kind)])
    registry.add_plugin(epoxy_ep_cpu.plugin, name="cpu")
    assert PLUGIN_REASONS[kind] in registry.failures[0].reason
    np.testing.assert_array_equal(_session(registry).run(None, {"x": X})[0], EXPECTED)


@pytest.mark.parametrize("kind", sorted(PLUGIN_SOURCES))
def test_broken_plugin_in_strict_mode_is_an_error(kind, monkeypatch):
    monkeypatch.setenv("EPOXY_STRICT_PLUGINS", "1")
    registry = ProviderRegistry(autoload=False)
    with pytest.raises(epoxy.PluginLoadError, match=PLUGIN_REASONS[kind]):
        registry.load_entry_points([_entry_point(kind)])
