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
