"""Plugin loading: every kind of broken plugin is recorded, never a crash; strict re-raises."""

from __future__ import annotations

import sys
import types
from importlib.metadata import EntryPoint

import numpy as np
import pytest
from fakes import Factory, FactoryPlugin, mini_factory
from models import chain

from epoxy import InferenceSession, PluginLoadError
from epoxy.contract import ProviderUnavailable
from epoxy.hookspecs import HOOK_NAMES, EpoxySpecs, hookimpl
from epoxy.plugins import ProviderRegistry


def _module(name: str, **attrs: object) -> str:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return name


@pytest.fixture
def good_plugin_module():
    @hookimpl
    def epoxy_register_providers(register):
        register(mini_factory())

    yield _module("epoxy_test_good_plugin", epoxy_register_providers=epoxy_register_providers)
    sys.modules.pop("epoxy_test_good_plugin", None)


def _ep(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group="epoxy.providers")


def _registry_with(*eps: EntryPoint) -> ProviderRegistry:
    registry = ProviderRegistry(autoload=False)
    registry.load_entry_points(eps)
    return registry


def test_import_error_is_recorded_and_others_still_load(good_plugin_module):
    registry = _registry_with(_ep("broken", "epoxy_test_no_such_module"), _ep("cpu", good_plugin_module))
    assert [e.name for e in registry.entries()] == ["cpu"]
    (failure,) = registry.failures
    assert failure.plugin == "broken" and failure.stage == "import"
    assert "ModuleNotFoundError" in failure.reason
    session = InferenceSession(chain(["Relu"]), providers=["cpu"], registry=registry)
    assert session.run(None, {"x": np.ones((2, 3), np.float32)})[0].shape == (2, 3)


def test_plugin_raising_at_import_time(good_plugin_module):
    class Boom(types.ModuleType):
        def __getattr__(self, item):
            raise RuntimeError("vendor library missing")

    sys.modules["epoxy_test_boom"] = Boom("epoxy_test_boom")
    try:
        registry = _registry_with(_ep("boom", "epoxy_test_boom:plugin"), _ep("cpu", good_plugin_module))
    finally:
        sys.modules.pop("epoxy_test_boom")
    assert "vendor library missing" in registry.failures[0].reason
    assert registry.get("cpu") is not None


def test_register_hook_raising_is_recorded():
    class Bad:
        @hookimpl
        def epoxy_register_providers(self, register):
            raise ValueError("cannot register")

    registry = ProviderRegistry(autoload=False)
    registry.add_plugin(Bad(), name="bad")
    registry.add_plugin(FactoryPlugin(mini_factory()), name="good")
    assert registry.failures[0].stage == "epoxy_register_providers"
    assert [e.name for e in registry.entries()] == ["cpu"]


def test_sdk_version_mismatch_is_refused():
    registry = ProviderRegistry(autoload=False)
    registry.add_plugin(FactoryPlugin(Factory("future", lambda d, o: None, sdk_api=99)), name="future")
    assert registry.get("future") is None
    assert "targets epoxy SDK API 99.0" in registry.failures[0].reason


@pytest.mark.parametrize(("declared", "loads", "why"), [
    ("1.0", True, None),  # built for an older minor: loads on a newer core
    ("1.1", True, None),  # exactly this core
    (1, True, None),  # the int of SDK API 1 before minors existed means 1.0
    ("1.2", False, "newer than the 1.1 this epoxy-core implements: upgrade epoxy-core"),
    ("2.0", False, "another major version: install a provider release built for 1.x"),
    ("0.9", False, "another major version"),
    ("one", False, "sdk_api must be a 'MAJOR.MINOR' string"),
    (None, False, "sdk_api must be a 'MAJOR.MINOR' string"),
])
def test_sdk_api_major_minor_rule(monkeypatch, declared, loads, why):
    import epoxy.sdk_api

    monkeypatch.setattr(epoxy.sdk_api, "SDK_API", "1.1")  # the rule, whatever this core's minor is
    registry = ProviderRegistry(autoload=False)
    registry.add_plugin(FactoryPlugin(Factory("vendor", lambda d, o: None, sdk_api=declared)), name="vendor")
    assert (registry.get("vendor") is not None) is loads
    if not loads:
        (failure,) = registry.failures
        assert failure.stage == "sdk-version" and why in failure.reason and "'vendor'" in failure.reason


def test_in_house_providers_declare_a_literal_sdk_api():
    """Each plugin states the contract it was written against; importing the core's constant
    would make the check above meaningless for it."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    factories = [p for p in (root / "plugins").glob("*/src/*/*.py") if "sdk_api" in p.read_text()]
    factories.append(root / "sdk" / "template" / "src" / "epoxy_ep_example" / "plugin.py")
    assert len(factories) >= 5
    for path in factories:
        for line in path.read_text().splitlines():
            if re.match(r"\s+sdk_api\s*[:=]", line):
                assert re.match(r'\s+sdk_api\s*=\s*"\d+\.\d+"', line), f"{path}: {line.strip()}"


def test_factory_missing_attributes_is_refused():
    registry = ProviderRegistry(autoload=False)
    registry.add_plugin(FactoryPlugin(object()), name="junk")
    assert registry.failures[0].stage == "factory"


def test_device_enumeration_failure_makes_provider_unavailable(make_registry):
    class Unavailable(Factory):
        def devices(self):
            raise ProviderUnavailable("no driver found")

    class Crashing(Factory):
        def devices(self):
            raise OSError("segfault-ish")

    registry = make_registry(Unavailable("gpu", None, 10), Crashing("npu", None, 20))
    assert registry.get("gpu").unavailable_reason == "no driver found"
    assert "OSError: segfault-ish" in registry.get("npu").unavailable_reason
    with pytest.warns(RuntimeWarning, match="provider 'gpu' skipped: no driver found"):
        session = InferenceSession(chain(["Relu"]), providers=["gpu", "cpu"], registry=registry)
    assert session.get_providers() == ["cpu"]
    assert "no driver found" in " ".join(session.partition_report().notes)


def test_provider_whose_create_raises_gives_clear_error(make_registry):
    from epoxy import ProviderError

    def explode(device, options):
        raise RuntimeError("out of licenses")

    registry = make_registry(Factory("vendor", explode, 10))
    with pytest.raises(
        ProviderError, match="provider 'vendor' failed to start on vendor:cpu:0: RuntimeError: out of licenses"
    ):
        InferenceSession(chain(["Relu"]), providers=["vendor"], registry=registry)


def test_strict_mode_reraises(monkeypatch):
    monkeypatch.setenv("EPOXY_STRICT_PLUGINS", "1")
    registry = ProviderRegistry(autoload=False)
    with pytest.raises(PluginLoadError, match="epoxy_test_no_such_module|broken"):
        registry.load_entry_points([_ep("broken", "epoxy_test_no_such_module")])


def test_allowlist_and_disable_autoload(monkeypatch, good_plugin_module):
    monkeypatch.setenv("EPOXY_PROVIDERS", "other")
    registry = _registry_with(_ep("cpu", good_plugin_module), _ep("broken", "epoxy_test_no_such_module"))
    assert registry.entries() == [] and registry.failures == []
    monkeypatch.delenv("EPOXY_PROVIDERS")
    monkeypatch.setenv("EPOXY_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert ProviderRegistry().entries() == []


def test_passes_hook_collects_builtin_and_plugin_passes():
    class PassPlugin:
        @hookimpl
        def epoxy_register_passes(self, register):
            register(lambda model: None, level="extended", providers=["sim"])

    registry = ProviderRegistry(autoload=False)
    registry.add_plugin(PassPlugin(), name="passes")
    levels = [(p.level, p.providers) for p in registry.passes()]
    assert ("extended", ("sim",)) in levels
    assert ("basic", None) in levels  # the core's own passes come through the same hook


def test_every_hook_is_documented_and_prefixed():
    assert HOOK_NAMES == ["epoxy_register_providers", "epoxy_register_passes", "epoxy_register_policies"]
    for name in HOOK_NAMES:
        doc = getattr(EpoxySpecs, name).__doc__
        assert doc and "Called" in doc and "firstresult" in doc


def test_scoped_pass_runs_only_when_its_provider_has_first_pick():
    import onnx_ir as ir

    from epoxy.optimize import optimize

    calls = []

    def scoped(model):
        calls.append(1)
        return ir.passes.PassResult(model, False)

    model = ir.serde.deserialize_model(chain(["Relu"]))
    from epoxy.optimize.pipeline import PassRegistration

    entries = [PassRegistration(scoped, "extended", ("sim",))]
    optimize(model, entries, "extended", ["sim", "cpu"])
    optimize(model, entries, "extended", ["openvino", "sim", "cpu"])
    optimize(model, entries, "basic", ["sim"])
    assert len(calls) == 1


def test_passes_are_collected_in_registration_order():
    order = []

    def plugin(tag):
        class P:
            @hookimpl
            def epoxy_register_passes(self, register):
                register(lambda m, tag=tag: order.append(tag), level="basic")
        return P()

    registry = ProviderRegistry(autoload=False)
    for tag in "abcdef":
        registry.add_plugin(plugin(tag), name=f"p{tag}")
    tags = [p.pass_ for p in registry.passes()][-6:]
    for t in tags:
        t(None)
    assert order == list("abcdef")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"level": "extenbed"}, "registered at level 'extenbed'; levels are ('basic', 'extended', 'all')"),
    ({"level": "disable"}, "registered at level 'disable'"),
    ({"providers": []}, "providers must be None or provider names"),
    ({"providers": ["cpu", 3]}, "providers must be None or provider names"),
])
def test_a_pass_registered_wrongly_is_a_plugin_failure_naming_it(kwargs, message):
    """A misspelled level used to be kept and silently never run."""
    import onnx_ir as ir

    class Fuse(ir.passes.InPlacePass):
        def call(self, model):
            return ir.passes.PassResult(model, False)

    class PassPlugin:
        @hookimpl
        def epoxy_register_passes(self, register):
            register(Fuse(), **kwargs)

    registry = ProviderRegistry(autoload=False)
    registry.add_plugin(PassPlugin(), name="fusions")
    assert not any(isinstance(p.pass_, Fuse) for p in registry.passes())
    (failure,) = [f for f in registry.failures if f.plugin == "fusions"]
    assert failure.stage == "epoxy_register_passes" and message in failure.reason and "Fuse" in failure.reason


def test_registrations_are_frozen_records_naming_their_plugin():
    import dataclasses

    registry = ProviderRegistry(autoload=False)
    registry.add_plugin(mini_plugin := FactoryPlugin(mini_factory()), name="mini")
    del mini_plugin
    entry = registry.passes()[0]
    assert entry.plugin and entry.level in ("basic", "extended", "all")
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.level = "all"  # type: ignore[misc]


def test_strict_mode_failures_carry_the_plugins_traceback(monkeypatch):
    """Strict messages used to end in 'NoneType: None' (format_exc outside a handler)."""
    monkeypatch.setenv("EPOXY_STRICT_PLUGINS", "1")
    registry = ProviderRegistry(autoload=False)
    with pytest.raises(PluginLoadError) as info:
        registry.add_plugin(FactoryPlugin(Factory("future", lambda d, o: None, sdk_api="9.0")), name="future")
    assert "NoneType: None" not in str(info.value)
    assert "RuntimeError: provider 'future' targets epoxy SDK API 9.0" in str(info.value)
