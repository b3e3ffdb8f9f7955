"""``max_performance``: test providers whose speed differs on purpose; the fastest whose outputs
match cpu's is chosen and cached; stale, foreign and unreadable cache entries are ignored with
a note; ``epoxy tune`` and ``epoxy devices`` print what was measured and found."""

from __future__ import annotations

import gc
import json
import weakref

import numpy as np
import pytest
from device_policy_fakes import DeviceFactory, cpu_factory, gpu_factory
from fakes import Factory, SimProvider
from onnx import TensorProto, helper, numpy_helper
from test_device_policies import MODEL

import epoxy
from epoxy.cli.main import main
from epoxy.devices import tune_cache
from epoxy.errors import InvalidArgumentError
from epoxy.plan.gc_pause import collector_paused
from epoxy.plugins import reset_default_registry
from epoxy.testing import registry_with

DELAY = 0.001  # per node: cpu 4 nodes x 1 ms, slow 4 x 3 ms, fast 0


@pytest.fixture(autouse=True)
def tune_cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "tune-cache"
    monkeypatch.setenv(tune_cache.CACHE_ENV, str(folder))
    return folder


def providers(fast_wrong: bool = False, version: str = "0.0.1"):
    fast = gpu_factory("fastgpu", delay_s=0.0, wrong=fast_wrong, priority=50)
    slow = gpu_factory("slowgpu", delay_s=3 * DELAY, priority=100, gpu_name="Slow GPU")
    fast.version = version
    return fast, slow, cpu_factory(delay_s=DELAY)


def tuned(registry, budget: float = 3.0):
    options = epoxy.SessionOptions(provider_selection_policy="max_performance", tune_budget_s=budget)
    return epoxy.InferenceSession(MODEL, options, registry=registry)


def test_the_faster_provider_is_chosen_and_the_choice_is_cached(tune_cache_dir):
    fast, slow, cpu = providers()
    sess = tuned(registry_with(fast, slow, cpu))
    assert sess.get_providers() == ["fastgpu", "cpu"]
    selection = sess.provider_selection()
    assert selection.source == "measured" and selection.policy == "max_performance"
    rows = {row["label"]: row for row in selection.table}
    assert set(rows) == {"cpu on cpu:0", "slowgpu on gpu:0 > cpu on cpu:0", "fastgpu on gpu:1 > cpu on cpu:0"}
    assert all(row["dropped"] is None and row["runs"] >= 3 for row in rows.values())
    fast_ms = rows["fastgpu on gpu:1 > cpu on cpu:0"]["median_ms"]
    assert fast_ms < rows["cpu on cpu:0"]["median_ms"] < rows["slowgpu on gpu:0 > cpu on cpu:0"]["median_ms"]
    assert rows["slowgpu on gpu:0 > cpu on cpu:0"]["claimed"] == {"slowgpu": 4}
    entries = list(tune_cache_dir.glob("*.json"))
    assert len(entries) == 1 and selection.cache_path == str(entries[0])
    assert json.loads(entries[0].read_text())["chosen"] == [["fastgpu", 0], ["cpu", 0]]

    fast2, slow2, cpu2 = providers()
    again = tuned(registry_with(fast2, slow2, cpu2))
    assert again.get_providers() == ["fastgpu", "cpu"]
    assert again.provider_selection().source == "cache"
    assert slow2.created == []  # nothing measured: the slow provider was never even created
    assert "chosen by policy max_performance (cache)" in again.partition_report().format(per_node=False)


def test_a_fast_provider_with_wrong_outputs_is_not_chosen():
    fast, slow, cpu = providers(fast_wrong=True)
    sess = tuned(registry_with(fast, slow, cpu))
    assert sess.get_providers() == ["cpu"]
    rows = {row["providers"][0]: row for row in sess.provider_selection().table}
    assert rows["fastgpu"]["dropped"].startswith("outputs differ from cpu's")
    assert rows["fastgpu"]["max_error"] == pytest.approx(1.0)


def test_a_provider_claiming_no_node_is_pruned():
    sim = Factory("sim", lambda d, o: SimProvider(d, frozenset({"Softmax"})), 100, device_kind="gpu")
    sess = tuned(registry_with(sim, cpu_factory()))
    rows = {row["providers"][0]: row for row in sess.provider_selection().table}
    assert rows["sim"]["dropped"].startswith("pruned: sim claims no node")
    assert sess.get_providers() == ["cpu"]


def _edit_entry(folder, change):
    (entry,) = folder.glob("*.json")
    data = json.loads(entry.read_text())
    change(data)
    entry.write_text(json.dumps(data))


@pytest.mark.parametrize(("edit", "why"), [
    (lambda d: d["machine"].update(host="another-host"), "foreign, measured on another machine (host 'another-host'"),
    (lambda d: d["environment"]["providers"].update(fastgpu="0.0.0"), "stale (provider fastgpu 0.0.0 -> 0.0.1)"),
    (lambda d: d.update(chosen=[["gone", 0]]), "stale (it names a device not found now)"),
    (lambda d: d.update(format=0), "stale (another entry layout or model)"),
])
def test_stale_or_foreign_entries_are_ignored_with_a_note(tune_cache_dir, edit, why):
    tuned(registry_with(*providers()))
    _edit_entry(tune_cache_dir, edit)
    sess = tuned(registry_with(*providers()))
    selection = sess.provider_selection()
    assert selection.source == "measured"
    assert any(why in note for note in selection.notes), selection.notes
    assert sess.get_providers() == ["fastgpu", "cpu"]
    assert tune_cache.read(tune_cache.TuneKey(tune_cache.model_digest(MODEL), {"x": (1, 4)}),
                           epoxy.get_ep_devices(registry_with(*providers())))[0] is not None  # written anew


def test_an_unreadable_entry_is_ignored_with_a_note(tune_cache_dir):
    tuned(registry_with(*providers()))
    (entry,) = tune_cache_dir.glob("*.json")
    entry.write_text("{ not json")
    selection = tuned(registry_with(*providers())).provider_selection()
    assert any("unreadable" in note for note in selection.notes) and selection.source == "measured"


def test_a_new_provider_version_measures_again():
    tuned(registry_with(*providers()))
    sess = tuned(registry_with(*providers(version="0.0.2")))
    assert sess.provider_selection().source == "measured"
    assert any("provider fastgpu 0.0.1 -> 0.0.2" in n for n in sess.provider_selection().notes)


def test_input_shapes_are_part_of_the_key(tune_cache_dir):
    tuned(registry_with(*providers()))
    options = epoxy.SessionOptions(provider_selection_policy="max_performance", tune_budget_s=2.0)
    options.add_free_dimension_override_by_name("n", 3)
    sess = epoxy.InferenceSession(MODEL, options, registry=registry_with(*providers()))
    assert sess.provider_selection().source == "measured"
    assert len(list(tune_cache_dir.glob("*.json"))) == 2


def test_max_performance_needs_the_cpu_reference():
    with pytest.raises(InvalidArgumentError, match="cpu provider, which is not installed"):
        tuned(registry_with(gpu_factory()))


def test_epoxy_tune_prints_the_table_and_caches(tmp_path, capsys, tune_cache_dir):
    model = tmp_path / "chain.onnx"
    model.write_bytes(MODEL)
    reset_default_registry(registry_with(*providers()))
    try:
        assert main(["tune", str(model), "--budget", "2"]) == 0
        out = capsys.readouterr().out
        assert "fastgpu on gpu:1 > cpu on cpu:0" in out and "policy max_performance (measured) chose fastgpu" in out
        assert "cached in" in out
        assert main(["tune", str(model), "--cached", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["source"] == "cache" and data["chosen"][0]["provider"] == "fastgpu"
        assert main(["devices", "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)
        assert [d["device"] for d in listed["devices"]] == ["cpu:0", "gpu:0", "gpu:1"]
        assert "max_performance" in listed["policies"]
        assert main(["devices"]) == 0
        assert "Slow GPU" in capsys.readouterr().out
    finally:
        reset_default_registry(None)


def test_new_external_weights_make_a_new_key(tmp_path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [weight])
    path = tmp_path / "m.onnx"
    onnx.save_model(helper.make_model(graph), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.data", size_threshold=0)
    proto = onnx.load_model(str(path), load_external_data=False)
    before = tune_cache.model_digest(path, proto)
    assert tune_cache.model_digest(path, proto) == before
    (tmp_path / "m.data").write_bytes(np.full((4, 4), 2, np.float32).tobytes() + b"\0")
    assert tune_cache.model_digest(path, proto) != before


def test_the_measured_winner_is_taken_over_not_created_again():
    fast, slow, cpu = providers()
    sess = tuned(registry_with(fast, slow, cpu))
    assert sess.get_providers() == ["fastgpu", "cpu"]
    assert len(fast.created) == 1  # created once, as a candidate: the session is that candidate's
    assert any("taken over" in note for note in sess.partition_report().notes)
    assert "select" in sess.timings
    assert sess.run(None, {"x": np.ones((2, 4), np.float32)})[0].shape == (2, 4)
    # the candidate it took over is gone: its model's data stays, the device-I/O router calls this
    # session, and dropping the session frees it without the garbage collector
    gc.collect()
    assert sess._device_io._make_executor(sess._plan) is not None
    gone = weakref.ref(sess)
    with collector_paused():
        del sess
        assert gone() is None

    fast2, slow2, cpu2 = providers()
    options = epoxy.SessionOptions(provider_selection_policy="max_performance", tune_budget_s=2.0,
                                   optimized_model_filepath=str(tune_cache.cache_dir() / "opt.onnx"))
    options.add_free_dimension_override_by_name("n", 5)  # another key: measured again
    written = epoxy.InferenceSession(MODEL, options, registry=registry_with(fast2, slow2, cpu2))
    assert written.get_providers() == ["fastgpu", "cpu"]
    assert len(fast2.created) == 2  # options that write files: the chosen providers are created anew


def test_the_taken_over_model_keeps_its_weights_when_the_candidate_goes():
    """The candidate whose state a measured session takes over is emptied first: dropping it must
    not forget the initializers of the model the session now holds."""
    bias = numpy_helper.from_array(np.full(4, 0.5, np.float32), "B")
    nodes = [helper.make_node("Add", ["x", "B"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Neg", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "biased", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])], [bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    fast, slow, cpu = providers()
    options = epoxy.SessionOptions(provider_selection_policy="max_performance", tune_budget_s=3.0)
    sess = epoxy.InferenceSession(model, options, registry=registry_with(fast, slow, cpu))
    assert any("taken over" in note for note in sess.partition_report().notes)
    gc.collect()
    assert sess._model.graph.initializers["B"].const_value is not None
    x = np.arange(-4, 4, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], -np.maximum(x + 0.5, 0))


class _FailingCpu(DeviceFactory):
    def create(self, device, options):
        provider = super().create(device, options)
        provider.kernel = lambda node: (lambda *args: (_ for _ in ()).throw(RuntimeError("index out of range")))
        return provider


def test_a_reference_that_fails_on_the_tuning_inputs_falls_back_to_default(tmp_path, capsys):
    registry = registry_with(gpu_factory(), _FailingCpu("cpu", [("cpu", "host", {})]))
    with pytest.warns(RuntimeWarning, match="cpu provider failed on the tuning inputs.*index out of range"):
        sess = tuned(registry)
    assert sess.provider_selection().policy == "default"
    model = tmp_path / "chain.onnx"
    model.write_bytes(MODEL)
    reset_default_registry(registry)
    try:
        assert main(["tune", str(model), "--budget", "1"]) != 0
        assert "epoxy tune MODEL --inputs" in capsys.readouterr().err
    finally:
        reset_default_registry(None)


def test_epoxy_tune_measures_with_given_inputs(tmp_path, capsys):
    model = tmp_path / "chain.onnx"
    model.write_bytes(MODEL)
    np.save(tmp_path / "x.npy", np.ones((3, 4), np.float32))
    reset_default_registry(registry_with(*providers()))
    try:
        assert main(["tune", str(model), "--inputs", f"x={tmp_path / 'x.npy'}", "--budget", "1", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["chosen"][0]["provider"] == "fastgpu"
        assert len(list(tune_cache.cache_dir().glob("*.json"))) == 1
    finally:
        reset_default_registry(None)
