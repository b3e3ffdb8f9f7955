"""API scope: what every provider must pass, 100%."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from epoxy.contract import SDK_API_VERSION, Allocator, Capability, Device, Provider
from epoxy.errors import InvalidArgumentError
from epoxy.options import CORE_PROVIDER_OPTIONS

#: an option name no provider takes
UNKNOWN_OPTION = "epoxy_conformance_no_such_option"


def _model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Add", ["x", "x"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "x"], ["m"], name="mul"),
        helper.make_node("MatMul", ["m", "w"], ["y"], name="matmul"),
    ]
    w = onnx.numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, "w")
    graph = helper.make_graph(nodes, "api_scope", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_identity(epoxy_provider_entry):
    f = epoxy_provider_entry.factory
    assert isinstance(f.name, str) and f.name
    assert isinstance(f.vendor, str) and f.vendor
    assert isinstance(f.version, str) and f.version
    assert f.sdk_api == SDK_API_VERSION
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
    assert isinstance(described_options, Mapping), f"options() returned {type(described_options).__name__}, not a mapping"
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


def _single_op_model(op: str) -> onnx.ModelProto:
    inputs = {"Add": ["x", "x"], "Relu": ["x"], "Mul": ["x", "x"], "MatMul": ["x", "w"]}[op]
    shape = [2, 4] if op == "MatMul" else [2, 3]
    w = onnx.numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, "w")
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"], name=op.lower())], f"api_scope_{op}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              [w] if op == "MatMul" else [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


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
    for model in [_model(), *(_single_op_model(op) for op in ("Relu", "Add", "Mul", "MatMul"))]:
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

    def in_own_names(session):  # type: ignore[no-untyped-def]
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
def provider(epoxy_provider_entry, epoxy_device):
    return epoxy_provider_entry.factory.create(epoxy_device, {})


def test_create_returns_a_provider(provider, epoxy_device):
    assert isinstance(provider, Provider)
    assert isinstance(provider.allocator, Allocator)
    assert provider.device == epoxy_device


def test_capability_answer_is_well_formed(provider):
    from epoxy.graph_spec import CoreGraph
    from epoxy.loader import load_model

    loaded = load_model(_model())
    graph = CoreGraph(loaded.model.graph, loaded.model.opset_imports)
    cap = provider.capability(graph)
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


def test_session_result_matches_reference(epoxy_provider_name, epoxy_provider_entry):
    import epoxy
    from onnx.reference import ReferenceEvaluator

    model = _model()
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    try:
        session = epoxy.InferenceSession(model, providers=[epoxy_provider_name])
    except epoxy.UnsupportedOpError as exc:
        pytest.skip(f"provider claims only part of the model and no cpu fallback is installed: {exc}")
    (y,) = session.run(None, {"x": x})
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    report = session.partition_report()
    assert {d.node for d in report.nodes} == {"add", "relu", "mul", "matmul"}
