"""API scope: what every provider must pass, 100%."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
import pytest

from epoxy.contract import Allocator, Capability, Device, Provider
from epoxy.errors import InvalidArgumentError
from epoxy.options import CORE_PROVIDER_OPTIONS
from epoxy.sdk_api import incompatibility

from .kit_models import kit_input, kit_model, single_op_model
from .kit_sessions import capability as _capability
from .kit_sessions import chain_cases as _chain_cases
from .kit_sessions import claimed as _claimed
from .kit_sessions import kit_session as _kit_session

#: an option name no provider takes
UNKNOWN_OPTION = "epoxy_conformance_no_such_option"


def _model() -> onnx.ModelProto:
    return kit_model()


def _assert_ran_on(session: Any, name: str, nodes: set[str] | None = None) -> None:
    """The provider ran ``nodes`` (all when ``None``), per the partition report, and was not
    dropped from the session (a failing compile() is reported in the notes, then cpu runs)."""
    report = session.partition_report()
    dropped = [n for n in report.notes if f"provider {name!r} skipped" in n or f"{name!r} skipped" in n]
    assert not dropped, f"the session dropped the provider: {dropped}"
    placed = {d.node: d.provider for d in report.nodes}
    wanted = set(placed) if nodes is None else nodes
    elsewhere = {n: placed.get(n) for n in sorted(wanted) if placed.get(n) != name}
    assert not elsewhere, f"nodes the provider claimed ran elsewhere: {elsewhere}\n{report.format()}"


def test_identity(epoxy_provider_entry):
    f = epoxy_provider_entry.factory
    assert isinstance(f.name, str) and f.name
    assert isinstance(f.vendor, str) and f.vendor
    assert isinstance(f.version, str) and f.version
    refused = incompatibility(f.sdk_api)
    assert refused is None, f"provider {f.name!r} {refused}"
    assert isinstance(f.sdk_api, str), (
        f"sdk_api should be the 'major.minor' string the provider was written against (got {f.sdk_api!r})")
    assert isinstance(f.priority, int)


def test_devices_are_device_objects(epoxy_provider_entry, epoxy_device):
    for device in epoxy_provider_entry.devices():
        assert isinstance(device, Device)
        assert device.provider == epoxy_provider_entry.name


def test_plugin_loaded_without_failures(epoxy_provider_entry):
    from epoxy.plugins import default_registry

    mine = [f for f in default_registry().failures if f.plugin == epoxy_provider_entry.name]
    assert not mine, mine


@pytest.fixture
def described_options(epoxy_provider_entry):
    """What the factory's optional ``options()`` returns (skips the checks when it has none)."""
    describe = getattr(epoxy_provider_entry.factory, "options", None)
    if describe is None:
        pytest.skip("the factory does not describe its options (options() is optional)")
    return describe()


def test_options_are_described_as_str_to_str(described_options):
    assert isinstance(described_options, Mapping), (
        f"options() returned {type(described_options).__name__}, not a mapping"
    )
    for name, help_ in described_options.items():
        assert isinstance(name, str) and name and name == name.strip(), f"option name {name!r} must be a non-empty str"
        assert isinstance(help_, str) and help_.strip(), f"option {name!r}: help must be a non-empty str, got {help_!r}"
        assert "\n" not in help_, f"option {name!r}: help must be one line (allowed values, default)"
    core = sorted(set(described_options) & set(CORE_PROVIDER_OPTIONS))
    assert not core, f"{core}: the core takes these before create(); do not describe them"


def test_unknown_option_is_a_clear_error(epoxy_provider_entry, epoxy_device, described_options):
    with pytest.raises(InvalidArgumentError) as info:
        epoxy_provider_entry.factory.create(epoxy_device, {UNKNOWN_OPTION: 1})
    message = str(info.value)
    assert UNKNOWN_OPTION in message, f"the error should name the unknown option: {message}"
    unnamed = [name for name in described_options if name not in message]
    assert not unnamed, f"the error should list the known options; it does not name {unnamed}: {message}"


@pytest.fixture
def declared_aliases(epoxy_provider_entry):
    """The factory's optional ``aliases`` attribute (skips the checks when it has none)."""
    if not hasattr(epoxy_provider_entry.factory, "aliases"):
        pytest.skip("the factory declares no aliases (the attribute is optional)")
    return epoxy_provider_entry.factory.aliases


def test_aliases_are_well_formed(epoxy_provider_entry, declared_aliases):
    from epoxy.plugins import RESERVED_NAMES, default_registry

    name = epoxy_provider_entry.name
    kind = type(declared_aliases).__name__
    assert isinstance(declared_aliases, tuple), f"aliases must be a tuple of names, got {kind}"
    for alias in declared_aliases:
        assert isinstance(alias, str) and alias and alias == alias.strip(), \
            f"alias {alias!r} must be a non-empty str without surrounding spaces"
        assert alias != name, f"alias {alias!r} is the provider's own name"
        assert alias not in RESERVED_NAMES, f"alias {alias!r} is reserved by the core"
    assert len(set(declared_aliases)) == len(declared_aliases), f"aliases repeat a name: {declared_aliases}"
    assert epoxy_provider_entry.aliases_error is None, epoxy_provider_entry.aliases_error
    refused = [f.reason for f in default_registry().failures
               if f.stage == "alias" and f"of provider {name!r}" in f.reason]
    assert epoxy_provider_entry.aliases == declared_aliases, f"the registry refused aliases: {refused}"


def test_session_by_alias_runs_on_the_provider(epoxy_provider_entry, epoxy_device, declared_aliases):
    """``providers=[alias]`` gives the session the provider's name gives: same placement, same
    results (for the aliases the registry accepted; the check above fails for the others)."""
    import epoxy
    from epoxy.plugins import default_registry

    if not epoxy_provider_entry.aliases:
        pytest.skip("the registry accepted none of the declared aliases (see test_aliases_are_well_formed)")
    registry = default_registry()
    name = epoxy_provider_entry.name
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    # the whole kit model, else one of its ops alone (a provider may claim a few ops, and no cpu
    # fallback may be installed): the first the provider runs a node of, else the first that runs
    found = None
    for model in [_model(), *(single_op_model(op) for op in ("Relu", "Add", "Mul"))]:
        try:
            session = epoxy.InferenceSession(model, providers=[name])
        except epoxy.UnsupportedOpError:
            continue
        if found is None or name in session.partition_report().summary():
            found = (model, session)
        if name in session.partition_report().summary():
            break
    if found is None:
        pytest.skip("the provider runs none of the kit's small models and no cpu fallback is installed")
    model, by_name = found

    def in_own_names(session):
        # get_providers() and reports may name a provider as the user did: compare canonical names
        return ([registry.canonical_name(p) for p in session.get_providers()],
                {d.node: registry.canonical_name(d.provider) for d in session.partition_report().nodes})

    expected = by_name.run(None, {"x": x})
    for alias in epoxy_provider_entry.aliases:
        assert alias in epoxy.get_all_providers(), f"{alias!r} in epoxy.get_all_providers() is False"
        session = epoxy.InferenceSession(model, providers=[alias])
        assert in_own_names(session) == in_own_names(by_name), f"providers=[{alias!r}] differs from [{name!r}]"
        assert name in in_own_names(session)[0]
        for got, want in zip(session.run(None, {"x": x}), expected, strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.fixture
def provider(epoxy_provider):
    return epoxy_provider


def test_create_returns_a_provider(provider, epoxy_device):
    assert isinstance(provider, Provider)
    assert isinstance(provider.allocator, Allocator)
    assert provider.device == epoxy_device


def test_capability_answer_is_well_formed(provider):
    graph, cap = _capability(provider, _model())
    assert isinstance(cap, Capability)
    n = len(graph.nodes)
    claimed = list(cap.nodes) + [i for g in cap.groups for i in g.nodes]
    assert all(isinstance(i, int) and 0 <= i < n for i in claimed)
    assert len(claimed) == len(set(claimed)), "a node is claimed twice"
    for i, reason in cap.declined.items():
        assert 0 <= i < n and isinstance(reason, str) and reason


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.uint8, np.bool_])
def test_allocator_round_trip(provider, dtype):
    host = (np.arange(24).reshape(2, 3, 4) % 7).astype(dtype)
    back = provider.allocator.to_host(provider.allocator.to_device(host))
    assert isinstance(back, np.ndarray) and back.dtype == host.dtype
    np.testing.assert_array_equal(back, host)


def _reference(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    return list(ReferenceEvaluator(model).run(None, {"x": x}))


def _assert_same(got: list[Any], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert isinstance(g, np.ndarray), f"output {i}: {type(g).__name__}, not a numpy array"
        assert g.dtype == w.dtype and g.shape == w.shape, f"output {i}: {g.dtype}{g.shape}, expected {w.dtype}{w.shape}"
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_session_result_matches_reference(epoxy_provider_name, epoxy_provider, epoxy_provider_options):
    """The kit model through a session: exact dtypes and shapes, values as onnx.reference's,
    and every node the provider claims ran on it (not on cpu after a failed compile)."""
    import epoxy

    model = _model()
    _, cap = _capability(epoxy_provider, model)
    claimed = {model.graph.node[i].name for i in _claimed(cap)}
    if not claimed:
        pytest.skip("the provider claims none of the kit model's nodes (Add, Relu, Mul, MatMul)")
    try:
        session = _kit_session(model, epoxy_provider_name, epoxy_provider_options)
    except epoxy.UnsupportedOpError as exc:
        pytest.skip(f"provider claims only part of the model and no cpu fallback is installed: {exc}")
    x = kit_input()
    _assert_same(session.run(None, {"x": x}), _reference(model, x))
    report = session.partition_report()
    assert {d.node for d in report.nodes} == {"add", "relu", "mul", "matmul"}
    _assert_ran_on(session, epoxy_provider_name, claimed)


def _session_on_the_provider(name: str, provider: Any, options: Mapping[str, str]) -> Any:
    """A session that ran wholly on the provider: the first chain of ops it claims that
    builds and runs (``test_fused_chains_run_on_the_provider`` reports the others), or None."""
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    for case in _chain_cases(provider):
        try:
            session = _kit_session(case.model(), name, options, disable_fallback=True)
            session.run(None, {"x": x})
        except Exception:  # noqa: BLE001 - reported by the chains test
            continue
        _assert_ran_on(session, name)
        return session
    return None


def test_a_dropped_session_is_freed_at_once(epoxy_provider_name, epoxy_provider, epoxy_provider_options):
    """After its last reference is dropped, a session that ran on the provider is gone without
    the garbage collector: no kernel or compiled group holds the session or a bound method
    of it, so a server that reloads a model frees the old one's weights at once."""
    import gc
    import weakref

    from epoxy.plan.gc_pause import collector_paused

    session = _session_on_the_provider(epoxy_provider_name, epoxy_provider, epoxy_provider_options)
    if session is None:
        pytest.skip("no chain of the kit's ops runs wholly on the provider (the chains test says why)")
    gone = weakref.ref(session)
    gc.collect()  # what building the session left for the collector
    with collector_paused():
        del session
        assert gone() is None, ("the session outlived its last reference: something it built (a kernel, a "
                                "compiled group) refers back to it, so its memory waits for the garbage collector")


def test_fused_chains_run_on_the_provider(epoxy_provider_name, epoxy_provider, epoxy_provider_options):
    """Chains of neighbouring ops the provider claims (generated from its capability answers),
    so a compiling provider's groups are compiled and run: each chain runs wholly on the
    provider, with onnx.reference's values, dtypes and shapes, under output checks."""
    cases = _chain_cases(epoxy_provider)
    if not cases:
        pytest.skip("the provider claims fewer than two of the kit's chainable ops "
                    "(Relu, Sigmoid, Tanh, Abs, Neg, Add, Mul, ...): no chain to build")
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    failures = []
    for case in cases:
        model = case.model()
        try:
            session = _kit_session(model, epoxy_provider_name, epoxy_provider_options, disable_fallback=True)
            _assert_same(session.run(None, {"x": x}), _reference(model, x))
            _assert_ran_on(session, epoxy_provider_name)
        except Exception as exc:  # noqa: BLE001 - every chain is reported, then the test fails
            failures.append(f"{case.id}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    assert not failures, f"{len(failures)} of {len(cases)} chains failed:\n" + "\n".join(failures)


def test_groups_the_provider_proposes_are_convex_and_compile(epoxy_provider_name, epoxy_provider):
    """For each chain, the groups ``capability`` proposes name existing nodes once and
    ``compile`` accepts them (a compile that always raises used to pass: cpu took over)."""
    from epoxy.contract import FusedGroup, SubgraphSpec
    from epoxy.kit import boundary

    proposed = 0
    for case in _chain_cases(epoxy_provider):
        graph, cap = _capability(epoxy_provider, case.model())
        for group in cap.groups:
            assert isinstance(group, FusedGroup) and group.nodes, f"{case.id}: malformed group {group!r}"
            inputs, outputs = boundary(graph, group.nodes)
            fn = epoxy_provider.compile(SubgraphSpec(group, graph, tuple(inputs), tuple(outputs)))
            assert callable(fn), f"{case.id}: compile() returned {type(fn).__name__}"
            proposed += 1
    if not proposed:
        pytest.skip("the provider proposes no fused groups (a kernel provider): nothing to compile")
