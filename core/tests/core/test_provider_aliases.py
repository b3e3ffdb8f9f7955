"""Provider aliases (a factory's optional ``aliases``, e.g. onnxruntime's "CPUExecutionProvider"):
the registry resolves them, refuses colliding ones (stage "alias") and ignores malformed ones,
sessions and ``get_available_providers()`` accept them, ``epoxy providers`` shows them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fakes import Factory, mini_factory, sim_factory
from models import chain

import epoxy
from epoxy import InferenceSession, InvalidArgumentError, PluginLoadError, plugins
from epoxy.api.provider_names import ProviderNames
from epoxy.cli.main import main
from epoxy.hookspecs import hookimpl

CPU_ALIAS = "CPUExecutionProvider"
SIM_ALIAS = "SimExecutionProvider"
X = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], np.float32)


def aliased(factory: Factory, *aliases: object) -> Factory:
    """``factory`` declaring ``aliases`` (the fakes declare none, like factories written before it)."""
    factory.aliases = aliases  # type: ignore[attr-defined]
    return factory


def cpu(*aliases: object) -> Factory:
    return aliased(mini_factory(), *aliases)


def sim(*aliases: object, ops: tuple[str, ...] = ("Relu", "Neg")) -> Factory:
    return aliased(sim_factory(ops), *aliases)


def alias_failures(registry: plugins.ProviderRegistry) -> list[str]:
    return [f.reason for f in registry.failures if f.stage == "alias"]


# -- the registry ---------------------------------------------------------------------------
def test_resolve_accepts_name_and_alias_get_only_the_name(make_registry):
    registry = make_registry(sim(SIM_ALIAS, "SimEP"), cpu(CPU_ALIAS), with_cpu=False)
    sim_entry, cpu_entry = registry.get("sim"), registry.get("cpu")
    assert sim_entry.aliases == (SIM_ALIAS, "SimEP") and cpu_entry.aliases == (CPU_ALIAS,)
    assert registry.resolve("sim") is registry.resolve(SIM_ALIAS) is registry.resolve("SimEP") is sim_entry
    assert registry.resolve(CPU_ALIAS) is cpu_entry
    assert registry.get(CPU_ALIAS) is None  # get stays name-only
    assert registry.resolve("cpuexecutionprovider") is None  # names are case-sensitive, as in onnxruntime
    assert registry.resolve("nope") is None
    assert registry.aliases() == {SIM_ALIAS: "sim", "SimEP": "sim", CPU_ALIAS: "cpu"}
    assert registry.canonical_name(CPU_ALIAS) == "cpu" and registry.canonical_name("nope") == "nope"
    assert registry.describe_names() == ["sim (SimExecutionProvider, SimEP)", "cpu (CPUExecutionProvider)"]
    assert not registry.failures


def test_factory_without_aliases_still_works(make_registry):
    registry = make_registry(sim_factory())
    entry = registry.get("sim")
    assert not hasattr(entry.factory, "aliases")
    assert entry.aliases == () and entry.aliases_error is None
    assert registry.resolve("sim") is entry and registry.aliases() == {}
    assert registry.describe_names() == ["sim", "cpu"]


def test_list_repeats_and_own_name_are_tolerated(make_registry):
    factory = sim_factory()
    factory.aliases = [SIM_ALIAS, "sim", SIM_ALIAS]  # type: ignore[attr-defined]  # a list, not a tuple
    registry = make_registry(factory)
    assert registry.get("sim").aliases == (SIM_ALIAS,)
    assert registry.get("sim").aliases_error is None and not registry.failures


class RaisingAliases(Factory):
    @property
    def aliases(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("alias table missing")


@pytest.mark.parametrize(("declared", "why"), [
    (CPU_ALIAS, "must be a tuple of names, got str"),
    (None, "got NoneType"),
    ({SIM_ALIAS: 1}, "got dict"),
    ((SIM_ALIAS, 3), "not [3]"),
    (("",), "not ['']"),
    ((" SimEP",), "not [' SimEP']"),
])
def test_malformed_aliases_are_ignored_and_recorded(make_registry, declared, why):
    factory = sim_factory()
    factory.aliases = declared  # type: ignore[attr-defined]
    registry = make_registry(factory)
    entry = registry.get("sim")
    assert entry is not None and entry.available  # the provider itself still loads
    assert entry.aliases == () and registry.aliases() == {}
    assert entry.aliases_error.startswith("aliases: TypeError: ") and why in entry.aliases_error
    session = InferenceSession(chain(["Relu"]), providers=["sim"], registry=registry)
    np.testing.assert_array_equal(session.run(None, {"x": X})[0], np.maximum(X, 0))


def test_aliases_attribute_that_raises_is_ignored(make_registry):
    registry = make_registry(RaisingAliases("sim", sim_factory().make, 50, device_kind="sim"))
    assert registry.get("sim").aliases == ()
    assert registry.get("sim").aliases_error == "aliases: RuntimeError: alias table missing"


def test_malformed_aliases_are_an_error_in_strict_mode(make_registry, monkeypatch):
    monkeypatch.setenv("EPOXY_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError, match="provider 'sim': aliases: TypeError"):
        make_registry(sim(3))


def test_alias_equal_to_a_reserved_name_is_refused(make_registry):
    registry = make_registry(sim("core", SIM_ALIAS))
    assert registry.get("sim").aliases == (SIM_ALIAS,)  # the others stay
    assert registry.resolve("core") is None
    (reason,) = alias_failures(registry)
    assert "alias 'core' of provider 'sim' refused: the name is reserved by the core" in reason
    (failure,) = registry.failures
    assert failure.plugin == "test-plugins" and failure.stage == "alias"


def test_a_provider_name_wins_over_an_alias_whichever_loads_first(make_registry):
    first = make_registry(cpu(), sim("cpu"), with_cpu=False)  # cpu loads first
    second = make_registry(sim("cpu"), cpu(), with_cpu=False)  # sim loads first
    for registry in (first, second):
        assert registry.resolve("cpu") is registry.get("cpu")
        assert registry.get("sim").aliases == () and registry.aliases() == {}
        (reason,) = alias_failures(registry)
        assert "alias 'cpu' of provider 'sim' refused: it is the name of provider 'cpu'" in reason
        assert sorted(e.name for e in registry.entries()) == ["cpu", "sim"]


def test_alias_claimed_by_two_providers_stays_with_the_first(make_registry):
    other = aliased(Factory("other", mini_factory("other").make, 5), SIM_ALIAS, "OtherEP")
    registry = make_registry(sim(SIM_ALIAS), other)
    assert registry.resolve(SIM_ALIAS) is registry.get("sim")
    assert registry.get("other").aliases == ("OtherEP",)
    (reason,) = alias_failures(registry)
    assert f"alias {SIM_ALIAS!r} of provider 'other' refused: it is already an alias of provider 'sim'" in reason


def test_alias_collision_is_an_error_in_strict_mode(make_registry, monkeypatch):
    monkeypatch.setenv("EPOXY_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError, match="failed at alias"):
        make_registry(sim("copy"))


# -- sessions -------------------------------------------------------------------------------
def used(session: InferenceSession, registry: plugins.ProviderRegistry) -> list[str]:
    """The session's providers in their own names (``get_providers()`` may answer in the user's)."""
    return [registry.canonical_name(n) for n in session.get_providers()]


def test_session_by_alias_runs_on_that_provider(make_registry):
    registry = make_registry(sim(SIM_ALIAS), cpu(CPU_ALIAS), with_cpu=False)
    session = InferenceSession(chain(["Relu", "Add"]), providers=[SIM_ALIAS, CPU_ALIAS], registry=registry)
    assert used(session, registry) == ["sim", "cpu"]
    placed = {d.node: registry.canonical_name(d.provider) for d in session.partition_report().nodes}
    assert placed == {"n0_relu": "sim", "n1_add": "cpu"}
    (y,) = session.run(None, {"x": X})
    np.testing.assert_array_equal(y, np.maximum(X, 0) + 2)


def test_fallback_is_not_appended_when_its_alias_is_listed(make_registry):
    registry = make_registry(sim(SIM_ALIAS), cpu(CPU_ALIAS), with_cpu=False)
    session = InferenceSession(chain(["Relu"]), providers=[CPU_ALIAS], registry=registry)
    assert used(session, registry) == ["cpu"]
    # the alias-listed cpu is still the fallback: it takes what sim does not claim
    session = InferenceSession(chain(["Neg", "Add"]), providers=[CPU_ALIAS, SIM_ALIAS], registry=registry)
    assert used(session, registry) == ["cpu", "sim"]
    session = InferenceSession(chain(["Neg", "Add"]), providers=[SIM_ALIAS], registry=registry)
    assert used(session, registry) == ["sim", "cpu"]  # appended: the user did not list cpu


@pytest.mark.parametrize("providers", [[CPU_ALIAS, "cpu"], ["cpu", CPU_ALIAS], [(CPU_ALIAS, {}), ("cpu", {})]])
def test_one_provider_under_two_spellings_is_listed_twice(make_registry, providers):
    registry = make_registry(cpu(CPU_ALIAS), with_cpu=False)
    first, second = (p if isinstance(p, str) else p[0] for p in providers)
    with pytest.raises(InvalidArgumentError, match=f"provider 'cpu' listed twice, as {first!r} and as {second!r}"):
        InferenceSession(chain(["Relu"]), providers=providers, registry=registry)


def test_two_aliases_of_one_provider_are_listed_twice(make_registry):
    registry = make_registry(sim(SIM_ALIAS, "SimEP"))
    with pytest.raises(InvalidArgumentError, match=f"provider 'sim' listed twice, as {SIM_ALIAS!r} and as 'SimEP'"):
        InferenceSession(chain(["Relu"]), providers=[SIM_ALIAS, "SimEP"], registry=registry)


def test_unknown_provider_error_lists_names_with_aliases(make_registry):
    registry = make_registry(sim(SIM_ALIAS), cpu(CPU_ALIAS), with_cpu=False)
    with pytest.raises(InvalidArgumentError) as info:
        InferenceSession(chain(["Relu"]), providers=["tpu"], registry=registry)
    message = str(info.value)
    assert "unknown provider 'tpu'" in message
    assert "installed: ['sim (SimExecutionProvider)', 'cpu (CPUExecutionProvider)']" in message


def test_missing_onnxruntime_named_provider_warns_and_is_skipped(make_registry):
    """onnxruntime skips providers its build lacks (with a warning); so does epoxy, for
    onnxruntime-style names, saying which package would add it."""
    registry = make_registry(sim(SIM_ALIAS), cpu(CPU_ALIAS), with_cpu=False)
    with pytest.warns(RuntimeWarning, match=r"'CUDAExecutionProvider' is not installed \(install epoxy-ep-cuda"):
        session = InferenceSession(chain(["Relu"]), providers=["CUDAExecutionProvider", "CPUExecutionProvider"],
                                   registry=registry)
    assert session.get_providers() == ["CPUExecutionProvider"]
    assert any("CUDAExecutionProvider" in n for n in session.partition_report().notes)


def test_refused_alias_is_unknown_to_sessions(make_registry):
    registry = make_registry(sim("core"))
    with pytest.raises(InvalidArgumentError, match="unknown provider 'core'"):
        InferenceSession(chain(["Relu"]), providers=["core"], registry=registry)


def test_provider_options_reach_the_provider_listed_by_alias(make_registry):
    seen = []
    factory = aliased(Factory("opt", lambda d, o: seen.append(dict(o)) or mini_factory("opt").make(d, {}), 5), "OptEP")
    registry = make_registry(factory)
    InferenceSession(chain(["Relu"]), providers=[("OptEP", {"speed": "fast"})], registry=registry)
    InferenceSession(chain(["Relu"]), providers=["OptEP"], provider_options=[{"tile": 4}], registry=registry)
    assert seen == [{"speed": "fast"}, {"tile": 4}]


def test_passes_scoped_to_a_provider_run_when_it_is_listed_by_alias(make_registry):
    import onnx_ir as ir

    calls = []

    class Passes:
        @hookimpl
        def epoxy_register_passes(self, register):  # type: ignore[no-untyped-def]
            def scoped(model):  # type: ignore[no-untyped-def]
                calls.append(1)
                return ir.passes.PassResult(model, False)

            register(scoped, level="basic", providers=("sim",))

    registry = make_registry(sim(SIM_ALIAS))
    registry.add_plugin(Passes(), name="scoped-passes")
    InferenceSession(chain(["Relu"]), providers=[SIM_ALIAS], registry=registry)
    assert calls == [1]


# -- get_available_providers / get_all_providers ----------------------------------------------
class Unavailable(Factory):
    def devices(self):  # type: ignore[no-untyped-def]
        from epoxy.contract import ProviderUnavailable

        raise ProviderUnavailable("no GPU here")


@pytest.fixture
def default_registry(make_registry, monkeypatch):  # type: ignore[no-untyped-def]
    gpu = aliased(Unavailable("gpu", None, 100), "GPUExecutionProvider")
    registry = make_registry(gpu, sim(SIM_ALIAS), cpu(CPU_ALIAS), with_cpu=False)
    monkeypatch.setattr(plugins, "_default_registry", registry)
    return registry


def test_available_providers_contain_aliases_but_list_own_names(default_registry):
    available = epoxy.get_available_providers()
    assert isinstance(available, list) and isinstance(available, ProviderNames)
    assert available == ["sim", "cpu"] and list(available) == ["sim", "cpu"] and repr(available) == "['sim', 'cpu']"
    assert CPU_ALIAS in available and SIM_ALIAS in available and "cpu" in available
    assert "GPUExecutionProvider" not in available and "gpu" not in available  # installed, no device
    assert "CUDAExecutionProvider" not in available and 3 not in available and None not in available
    everything = epoxy.get_all_providers()
    assert everything == ["gpu", "sim", "cpu"] and "GPUExecutionProvider" in everything


def test_available_providers_follow_the_list_content(default_registry):
    available = epoxy.get_available_providers()
    available.remove("cpu")
    assert CPU_ALIAS not in available and SIM_ALIAS in available
    assert CPU_ALIAS not in available[:]  # slices are plain lists: names only
    assert "sim" in available[:] and SIM_ALIAS not in available[:]


def test_available_providers_can_be_passed_to_a_session(default_registry):
    session = InferenceSession(chain(["Relu"]), providers=epoxy.get_available_providers())
    assert used(session, default_registry) == ["sim", "cpu"]


def test_provider_names_alone():
    names = ProviderNames(["cuda", "cpu"], {"CUDAExecutionProvider": "cuda", "OpenVINOExecutionProvider": "openvino"})
    assert "CUDAExecutionProvider" in names and "OpenVINOExecutionProvider" not in names
    assert names.index("cpu") == 1 and names.count("CUDAExecutionProvider") == 0
    assert "CPUExecutionProvider" not in ProviderNames(["cpu"]) and ProviderNames() == []


# -- epoxy providers ------------------------------------------------------------------------
def _run(capsys, *args: str) -> str:  # type: ignore[no-untyped-def]
    assert main(["providers", *args]) == 0
    return capsys.readouterr().out


def test_cli_lists_aliases(default_registry, capsys):
    out = _run(capsys)
    header, _, *rows = out.split("\n\noptions")[0].splitlines()
    assert header.split()[:2] == ["provider", "aliases"]
    assert any(r.split()[:2] == ["cpu", CPU_ALIAS] for r in rows)
    assert any(r.split()[:2] == ["sim", SIM_ALIAS] for r in rows)
    data = json.loads(_run(capsys, "--json"))
    by_name = {p["name"]: p for p in data["providers"]}
    assert by_name["cpu"]["aliases"] == [CPU_ALIAS] and by_name["cpu"]["aliases_error"] is None
    assert by_name["gpu"]["aliases"] == ["GPUExecutionProvider"]


def test_cli_shows_no_aliases_as_a_dash(make_registry, monkeypatch, capsys):
    monkeypatch.setattr(plugins, "_default_registry", make_registry(sim_factory()))
    rows = _run(capsys).split("\n\noptions")[0].splitlines()[2:]
    assert sorted(r.split()[:2] for r in rows) == [["cpu", "-"], ["sim", "-"]]
    assert "failed plugins" not in _run(capsys)


def test_cli_lists_refused_and_malformed_aliases_among_failures(make_registry, monkeypatch, capsys):
    other = aliased(Factory("other", mini_factory("other").make, 5), 3)
    registry = make_registry(sim("copy", SIM_ALIAS), other)
    monkeypatch.setattr(plugins, "_default_registry", registry)
    out = _run(capsys)
    providers, failed = out.split("\nfailed plugins:\n")
    assert any(r.split()[:2] == ["sim", SIM_ALIAS] for r in providers.splitlines())
    assert any(r.startswith("other") and "? (see failed plugins)" in r for r in providers.splitlines())
    assert "test-plugins  -        alias  RuntimeError: alias 'copy' of provider 'sim' refused" in failed
    assert "other         -        alias  aliases: TypeError" in failed
    data = json.loads(_run(capsys, "--json"))
    assert [f["stage"] for f in data["failed_plugins"]] == ["alias"]
    other_json = next(p for p in data["providers"] if p["name"] == "other")
    assert other_json["aliases"] == [] and "TypeError" in other_json["aliases_error"]


def test_cli_options_and_ops_accept_an_alias(default_registry, capsys):
    data = json.loads(_run(capsys, "--json", "--options", CPU_ALIAS))
    assert [p["name"] for p in data["providers"]] == ["cpu"]
    assert main(["ops", "--provider", CPU_ALIAS]) == 0
    assert "Relu" in capsys.readouterr().out
    assert main(["providers", "--options", "CUDAExecutionProvider"]) == 1
    assert "installed: ['gpu (GPUExecutionProvider)', 'sim (SimExecutionProvider)'" in capsys.readouterr().err
