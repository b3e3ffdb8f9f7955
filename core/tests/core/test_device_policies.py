"""Devices and selection policies with made-up devices: the inventory (each device once, with
every provider driving it), the rule policies, plugins' policies, onnxruntime's API forms."""

from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest
from device_policy_fakes import DeviceFactory, PolicyPlugin, cpu_factory, gpu_factory, multi_factory
from onnx import TensorProto, helper

import epoxy
from epoxy.devices import OrtExecutionProviderDevicePolicy, get_devices, get_ep_devices
from epoxy.errors import InvalidArgumentError
from epoxy.testing import registry_with


def chain_model(ops: tuple[str, ...] = ("Relu", "Neg", "Relu", "Neg")) -> bytes:
    nodes, last = [], "x"
    for i, op in enumerate(ops):
        nodes.append(helper.make_node(op, [last], [f"v{i}"], name=f"n{i}"))
        last = f"v{i}"
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


MODEL = chain_model()
FEED = {"x": np.arange(-4, 4, dtype=np.float32).reshape(2, 4)}


def session(registry, policy=None, providers=None, **kwargs):
    options = epoxy.SessionOptions()
    if policy is not None:
        options.set_provider_selection_policy(policy)
    return epoxy.InferenceSession(MODEL, options, providers=providers, registry=registry, **kwargs)


# -- the inventory ----------------------------------------------------------------------------
def test_a_device_two_providers_drive_is_listed_once_with_both():
    registry = registry_with(cpu_factory(), multi_factory(), gpu_factory())
    devices = get_devices(registry)
    assert [d.label for d in devices] == ["cpu:0", "gpu:0", "gpu:1", "npu:0"]
    cpu = devices[0]
    assert cpu.providers == ["multi", "cpu"]  # the host CPU once, its providers by priority
    gpus = {d.name: d for d in devices if d.kind == "gpu"}
    assert gpus["Fake GPU 9000"].providers == ["fakegpu"] and gpus["Fake GPU 9000"].vendor == "NVIDIA"
    assert gpus["Fake GPU 9000"].vendor_id == 0x10DE and gpus["Fake GPU 9000"].memory_bytes == 8 << 30
    assert gpus["Fake iGPU"].providers == ["multi"] and gpus["Fake iGPU"].ep_devices[0].device_index == 1
    assert devices[3].type is epoxy.OrtHardwareDeviceType.NPU


def test_hardware_id_and_equal_names_merge_devices_of_two_providers():
    same_id = DeviceFactory("a", [("gpu", "Card A", {"hardware_id": "pci:0000:01:00.0"})], 5)
    also_same = DeviceFactory("b", [("gpu", "another name for it", {"hardware_id": "pci:0000:01:00.0"})], 4)
    by_name = gpu_factory("c", gpu_name="Card C", priority=3)
    by_name_too = gpu_factory("d", gpu_name="card c", priority=2)
    devices = get_devices(registry_with(same_id, also_same, by_name, by_name_too, cpu_factory()))
    gpus = [d for d in devices if d.kind == "gpu"]
    assert [d.providers for d in gpus] == [["a", "b"], ["c", "d"]]


def test_unknown_kinds_are_other_and_ep_devices_come_by_priority():
    registry = registry_with(cpu_factory(), DeviceFactory("odd", [("fpga", "F", {})], 7), gpu_factory())
    assert [d.kind for d in get_devices(registry)] == ["cpu", "gpu", "other"]
    assert [ep.ep_name for ep in get_ep_devices(registry)] == ["fakegpu", "odd", "cpu"]
    ep = get_ep_devices(registry)[0]
    assert ep.ep_options == {"device_index": "0"} and ep.ep_metadata == {"version": "0.0.1"}
    assert ep.device.metadata == {"fakegpu.vendor": "NVIDIA"}


# -- rule policies ----------------------------------------------------------------------------
def test_prefer_gpu_puts_every_gpu_first_and_the_cpu_devices_last():
    multi = multi_factory()
    registry = registry_with(cpu_factory(), multi, gpu_factory())
    sess = session(registry, "prefer_gpu")
    assert sess.get_providers() == ["fakegpu", "multi", "cpu"]
    assert multi.created[-1].kind == "gpu"  # the multi-device provider runs on its gpu
    selection = sess.get_providers().selection
    assert selection.policy == "prefer_gpu" and selection.source == "rule"
    report = sess.partition_report()
    assert report.selection["policy"] == "prefer_gpu"
    assert [c["device"] for c in report.selection["chosen"]] == ["gpu:0", "gpu:1", "cpu:0"]
    assert "chosen by policy prefer_gpu" in report.format(per_node=False)
    assert report.summary() == {"fakegpu": 4}
    np.testing.assert_array_equal(sess.run(None, FEED)[0], -np.maximum(-np.maximum(FEED["x"], 0), 0))


def test_prefer_cpu_leaves_accelerators_out_and_says_so():
    multi = multi_factory()
    sess = session(registry_with(cpu_factory(), multi, gpu_factory()), "prefer_cpu")
    assert sess.get_providers() == ["multi", "cpu"]
    assert multi.created[-1].kind == "cpu"
    notes = sess.get_providers().selection.notes
    assert any("left out" in n and "fakegpu on gpu:" in n for n in notes)


@pytest.mark.parametrize("policy", ["prefer_npu", "max_efficiency", "min_overall_power",
                                    OrtExecutionProviderDevicePolicy.PREFER_NPU, "PREFER_NPU"])
def test_prefer_npu_and_the_power_policies_pick_the_npu(policy):
    multi = multi_factory()
    sess = session(registry_with(cpu_factory(), multi, gpu_factory()), policy)
    assert sess.get_providers() == ["multi", "cpu"]
    assert multi.created[-1].kind == "npu"


def test_a_preferred_kind_that_is_absent_falls_back_to_the_cpu_devices_with_a_note():
    sess = session(registry_with(cpu_factory(), DeviceFactory("cpuish", [("cpu", "host", {})], 5)), "prefer_gpu")
    assert sess.get_providers() == ["cpuish", "cpu"]
    assert any("no gpu among" in n for n in sess.get_providers().selection.notes)


def test_onnxruntimes_policy_enum_is_taken_by_name():
    ort = pytest.importorskip("onnxruntime")
    if not hasattr(ort, "OrtExecutionProviderDevicePolicy"):
        pytest.skip("this onnxruntime predates selection policies")
    options = epoxy.SessionOptions()
    options.set_provider_selection_policy(ort.OrtExecutionProviderDevicePolicy.PREFER_GPU)
    assert options.provider_selection_policy == "prefer_gpu"


def test_auto_providers_choose_by_policy():
    registry = registry_with(cpu_factory(), multi_factory(), gpu_factory())
    assert session(registry, providers="auto:prefer_npu").get_providers() == ["multi", "cpu"]
    assert session(registry, providers=["auto:prefer_gpu"]).get_providers() == ["fakegpu", "multi", "cpu"]
    with pytest.raises(InvalidArgumentError, match="give it alone"):
        session(registry, providers=["auto:prefer_gpu", "cpu"])
    with pytest.raises(InvalidArgumentError, match="unknown provider selection policy 'fastest'.*prefer_gpu"):
        session(registry, providers="auto:fastest")
    with pytest.raises(InvalidArgumentError, match="needs a policy name"):
        session(registry, providers="auto:")


def test_given_providers_win_over_the_options_policy_with_a_warning():
    registry = registry_with(cpu_factory(), gpu_factory())
    with pytest.warns(RuntimeWarning, match="the given providers are used"):
        sess = session(registry, "prefer_gpu", providers=["cpu"])
    assert sess.get_providers() == ["cpu"] and sess.get_providers().selection is None


def test_provider_options_follow_the_chosen_providers():
    registry = registry_with(cpu_factory(), gpu_factory())
    sess = session(registry, "prefer_gpu", provider_options={"fakegpu": {"x": "1"}, "absent": {}})
    assert sess.get_provider_options()["fakegpu"] == {"x": "1", "device_index": "0"}
    assert any("absent" in n for n in sess.partition_report().notes)
    with pytest.raises(InvalidArgumentError, match="dict keyed by provider"):
        session(registry, "prefer_gpu", provider_options=[{}, {}])


# -- delegates, plugins' policies, add_provider_for_devices ------------------------------------
def test_a_delegate_chooses_like_onnxruntimes():
    seen = {}

    def last_first(ep_devices, model_metadata, runtime_metadata, max_selections):
        seen.update(meta=model_metadata, max=max_selections)
        return list(reversed(ep_devices))

    options = epoxy.SessionOptions()
    options.set_provider_selection_policy_delegate(last_first)
    sess = epoxy.InferenceSession(MODEL, options, registry=registry_with(cpu_factory(), gpu_factory()))
    assert sess.get_providers() == ["cpu", "fakegpu"]
    assert seen["meta"]["graph_name"] == "chain" and seen["max"] == 8
    assert sess.get_providers().selection.policy == "delegate last_first"


@pytest.mark.parametrize(("delegate", "match"), [
    (lambda *a: "cpu", "returned str"),
    (lambda *a: [object()], "not one of the EpDevice objects"),
    (lambda *a: [], "chose no device"),
    (lambda *a: 1 / 0, "failed: ZeroDivisionError"),
])
def test_a_bad_delegate_is_an_error_naming_it(delegate, match):
    options = epoxy.SessionOptions()
    options.set_provider_selection_policy_delegate(delegate)
    with pytest.raises(InvalidArgumentError, match=match):
        epoxy.InferenceSession(MODEL, options, registry=registry_with(cpu_factory(), gpu_factory()))


def test_a_plugin_registers_a_policy_and_its_failures_are_reported_not_fatal():
    registry = registry_with(cpu_factory(), gpu_factory(), multi_factory(), PolicyPlugin())
    policies = registry.policies()
    assert policies["gpu_only"].plugin.startswith("tests") and policies["gpu_only"].description
    assert policies["prefer_gpu"].plugin == "epoxy"  # a plugin cannot replace a built-in policy
    stages = [(f.stage, f.reason) for f in registry.failures]
    assert any(stage == "policy" and "Bad Name" in reason for stage, reason in stages)
    assert any(stage == "policy" and "already registered" in reason for stage, reason in stages)
    sess = session(registry, "gpu_only")
    assert sess.get_providers() == ["fakegpu", "cpu"]  # cpu appended as the fallback
    assert sess.get_providers().selection.source.startswith("plugin")
    with pytest.warns(RuntimeWarning, match="policy 'broken' failed: RuntimeError: policy bug"):
        broken = session(registry, "broken")
    assert broken.get_providers().selection.policy == "default"
    assert broken.get_providers() == ["fakegpu", "multi", "cpu"]


def test_add_provider_for_devices_puts_the_provider_on_that_device():
    multi = multi_factory()
    registry = registry_with(cpu_factory(), multi)
    npu = next(ep for ep in get_ep_devices(registry) if ep.kind == "npu")
    options = epoxy.SessionOptions()
    options.add_provider_for_devices([npu], {})
    sess = epoxy.InferenceSession(MODEL, options, registry=registry)
    assert sess.get_providers() == ["multi", "cpu"] and multi.created[-1].kind == "npu"
    with pytest.raises(InvalidArgumentError, match="one device per provider"):
        epoxy.SessionOptions().add_provider_for_devices([ep for ep in get_ep_devices(registry)
                                                         if ep.ep_name == "multi"], {})
    with pytest.raises(InvalidArgumentError, match="EpDevice objects"):
        epoxy.SessionOptions().add_provider_for_devices(["multi"], {})


def test_the_policy_option_takes_names_and_refuses_callables():
    options = epoxy.SessionOptions(provider_selection_policy="Prefer_GPU")
    assert options.provider_selection_policy == "prefer_gpu"
    with pytest.raises(InvalidArgumentError, match="set_provider_selection_policy_delegate"):
        options.provider_selection_policy = lambda *a: []
    options.add_session_config_entry("epoxy.provider_selection_policy", "prefer_npu")
    assert options.provider_selection_policy == "prefer_npu"


def test_a_registered_policy_name_is_checked_when_the_session_starts():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        options = epoxy.SessionOptions(provider_selection_policy="no_such_policy")  # plugins may add it
    with pytest.raises(InvalidArgumentError, match="unknown provider selection policy"):
        epoxy.InferenceSession(MODEL, options, registry=registry_with(cpu_factory()))


def test_models_load_unchanged_when_no_policy_is_set():
    sess = epoxy.InferenceSession(onnx.load_model_from_string(MODEL), registry=registry_with(cpu_factory(),
                                                                                            gpu_factory()))
    assert sess.get_providers() == ["fakegpu", "cpu"] and sess.get_providers().selection is None
    assert sess.partition_report().selection is None


def test_cli_commands_take_auto_policies(tmp_path, capsys):
    from epoxy.cli.main import main
    from epoxy.plugins import reset_default_registry

    model = tmp_path / "chain.onnx"
    model.write_bytes(MODEL)
    reset_default_registry(registry_with(cpu_factory(), multi_factory(), gpu_factory()))
    try:
        assert main(["partition", str(model), "--providers", "auto:prefer_npu"]) == 0
        out = capsys.readouterr().out
        assert "chosen by policy prefer_npu (rule): multi on npu:0, cpu on cpu:0" in out
    finally:
        reset_default_registry(None)


def test_epoxy_providers_shows_a_bad_policy_registration(capsys):
    from epoxy.cli.main import main
    from epoxy.plugins import reset_default_registry

    reset_default_registry(registry_with(cpu_factory(), PolicyPlugin()))
    try:
        assert main(["providers", "--json"]) == 0
        failed = json.loads(capsys.readouterr().out)["failed_plugins"]
        assert any(f["stage"] == "policy" and "Bad Name" in f["reason"] for f in failed)
    finally:
        reset_default_registry(None)
