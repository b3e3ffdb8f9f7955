"""The session cache (#17): a prepared model kept on disk, and every way an entry is not used."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from aot_fakes import aot_factory
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy.aot.format import METADATA_KEY
from epoxy.aot.session_cache import CACHE_ENV

GROUP = ["add", "relu"]
FEED = {"x": np.arange(-6, 6, dtype=np.float32).reshape(3, 4)}
CACHE_NOTE = "prepared from the session cache"


@pytest.fixture(autouse=True)
def _own_key(tmp_path_factory, monkeypatch):
    """Signatures with a key of this test session, never the user's; no cache from the environment."""
    monkeypatch.setenv("EPOXY_COMPILE_KEY", str(tmp_path_factory.getbasetemp() / "compile.key"))
    monkeypatch.delenv(CACHE_ENV, raising=False)


def _model(path: Path, weights=(0.5, -1.0, 2.0, -0.25)) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    w = numpy_helper.from_array(np.asarray(weights, np.float32), "w")  # raw data: can be saved as external data
    nodes = [helper.make_node("Add", ["x", "w"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Neg", ["r"], ["n"], name="neg"),
             helper.make_node("Mul", ["n", "x"], ["y"], name="mul")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)], producer_name="tests")
    model.ir_version = 8
    helper.set_model_props(model, {"owner": "tests"})
    onnx.save(model, path)
    return path


def _expected(weights=(0.5, -1.0, 2.0, -0.25)) -> np.ndarray:
    x = FEED["x"]
    return -np.maximum(x + np.asarray(weights, np.float32), 0) * x


def _options(folder: Path, **fields) -> epoxy.SessionOptions:
    options = epoxy.SessionOptions(**fields)
    options.add_session_config_entry("epoxy.session_cache_dir", str(folder))
    return options


def _session(source, options, make_registry, version="0.0.1"):
    factory = aot_factory([GROUP], version=version)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = epoxy.InferenceSession(source, options, providers=["fuser", "cpu"], registry=make_registry(factory))
    return session, factory.made[0], [str(w.message) for w in caught]


def _from_cache(session) -> bool:
    return any(note.startswith(CACHE_NOTE) for note in session.partition_report().notes)


def _records(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json"))


def test_second_session_starts_from_the_cache_and_runs_the_same(tmp_path, make_registry):
    path, folder = _model(tmp_path / "m.onnx"), tmp_path / "cache"
    first, first_fuser, _ = _session(str(path), _options(folder), make_registry)
    assert not _from_cache(first) and len(_records(folder)) == 1
    assert first_fuser.compiled == [tuple(GROUP)]
    second, fuser, _ = _session(str(path), _options(folder), make_registry)
    assert _from_cache(second)
    assert fuser.compiled == [] and fuser.imported == [tuple(GROUP)]  # the stored blob, not a compile
    np.testing.assert_array_equal(second.run(None, FEED)[0], _expected())
    np.testing.assert_array_equal(second.run(None, FEED)[0], first.run(None, FEED)[0])
    assert second.applied_passes == first.applied_passes
    assert second.get_modelmeta() == first.get_modelmeta()
    assert METADATA_KEY not in second.get_modelmeta().custom_metadata_map
    assert [(i.name, i.shape, i.type) for i in second.get_inputs()] == [(i.name, i.shape, i.type)
                                                                         for i in first.get_inputs()]
    assert second.partition_report().summary() == first.partition_report().summary()


def test_an_edited_model_is_prepared_again(tmp_path, make_registry):
    path, folder = _model(tmp_path / "m.onnx"), tmp_path / "cache"
    _session(str(path), _options(folder), make_registry)
    new_weights = (1.0, 1.0, -3.0, 0.0)
    _model(path, new_weights)
    os.utime(path, ns=(1, 1))  # even with an older time stamp: size, time or inode differ
    session, fuser, _ = _session(str(path), _options(folder), make_registry)
    assert not _from_cache(session) and fuser.compiled == [tuple(GROUP)]
    np.testing.assert_array_equal(session.run(None, FEED)[0], _expected(new_weights))
    again, _, _ = _session(str(path), _options(folder), make_registry)
    assert _from_cache(again) and len(_records(folder)) == 1


@pytest.mark.parametrize("change", ["optimization", "provider version", "free dimension"])
def test_other_options_or_providers_get_their_own_entry(tmp_path, make_registry, change):
    path, folder = _model(tmp_path / "m.onnx"), tmp_path / "cache"
    _session(str(path), _options(folder), make_registry)
    options, version = _options(folder), "0.0.1"
    if change == "optimization":
        options.graph_optimization_level = epoxy.GraphOptimizationLevel.ORT_DISABLE_ALL
    elif change == "provider version":
        version = "0.0.2"
    else:
        options.add_free_dimension_override_by_name("batch", 3)
    session, _, _ = _session(str(path), options, make_registry, version)
    assert not _from_cache(session) and len(_records(folder)) == 2
    again, _, _ = _session(str(path), options, make_registry, version)
    assert _from_cache(again)
    if change == "free dimension":  # the override is part of what was stored
        assert again.get_inputs()[0].shape == [3, 4]
    np.testing.assert_array_equal(again.run(None, FEED)[0], _expected())


def test_model_bytes_are_keyed_by_their_digest(tmp_path, make_registry):
    folder = tmp_path / "cache"
    data = _model(tmp_path / "m.onnx").read_bytes()
    _session(data, _options(folder), make_registry)
    session, _, _ = _session(data, _options(folder), make_registry)
    assert _from_cache(session)
    other = _model(tmp_path / "o.onnx", (2.0, 2.0, 2.0, 2.0)).read_bytes()
    fresh, _, _ = _session(other, _options(folder), make_registry)
    assert not _from_cache(fresh)
    np.testing.assert_array_equal(fresh.run(None, FEED)[0], _expected((2.0, 2.0, 2.0, 2.0)))


def test_the_environment_variable_turns_it_on(tmp_path, make_registry, monkeypatch):
    path, folder = _model(tmp_path / "m.onnx"), tmp_path / "env-cache"
    monkeypatch.setenv(CACHE_ENV, str(folder))
    _session(str(path), epoxy.SessionOptions(), make_registry)
    session, _, _ = _session(str(path), epoxy.SessionOptions(), make_registry)
    assert _from_cache(session) and len(_records(folder)) == 1
    for _ in range(2):  # models made in memory are cached only when the options ask
        in_memory, _, _ = _session(path.read_bytes(), epoxy.SessionOptions(), make_registry)
        assert not _from_cache(in_memory)
    assert len(_records(folder)) == 1


def test_off_by_default(tmp_path, make_registry):
    path = _model(tmp_path / "m.onnx")
    for _ in range(2):
        session, _, _ = _session(str(path), epoxy.SessionOptions(), make_registry)
        assert not _from_cache(session)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_a_broken_entry_is_replaced_with_a_note(tmp_path, make_registry):
    path, folder = _model(tmp_path / "m.onnx"), tmp_path / "cache"
    _session(str(path), _options(folder), make_registry)
    (stored,) = folder.glob("*.onnx")
    size = stored.stat().st_size
    stored.write_bytes(b"\x00not a model" + b"!" * (size - 12))  # same size: only loading finds it
    session, _, _ = _session(str(path), _options(folder), make_registry)
    notes = session.partition_report().notes
    assert any("could not be used" in note and "prepared again" in note for note in notes), notes
    np.testing.assert_array_equal(session.run(None, FEED)[0], _expected())
    again, _, _ = _session(str(path), _options(folder), make_registry)
    assert _from_cache(again) and len(list(folder.glob("*.onnx"))) == 1


def test_an_unreadable_record_is_a_miss_with_a_note(tmp_path, make_registry):
    path, folder = _model(tmp_path / "m.onnx"), tmp_path / "cache"
    _session(str(path), _options(folder), make_registry)
    (record,) = _records(folder)
    record.write_text("{not json")
    session, _, _ = _session(str(path), _options(folder), make_registry)
    assert not _from_cache(session)
    assert any("unreadable" in note for note in session.partition_report().notes)
    assert json.loads(record.read_text())["model_file"]  # written again


def test_load_warnings_are_given_again_from_the_cache(tmp_path, make_registry):
    # IR 3 initializers that are not graph inputs: loaded, with onnx.checker's complaint as a warning
    c = np.array([1.0, -2.0, 3.0, -4.0], np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [numpy_helper.from_array(c, "c")]),
                              opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 3
    path, folder = tmp_path / "ir3.onnx", tmp_path / "cache"
    onnx.save(model, path)
    first, _, first_warnings = _session(str(path), _options(folder), make_registry)
    second, _, second_warnings = _session(str(path), _options(folder), make_registry)
    assert _from_cache(second)
    complaint = [w for w in first_warnings if "c in initializer but not in graph input" in w]
    assert complaint and complaint == [w for w in second_warnings if "c in initializer but not in graph input" in w]
    assert second.get_overridable_initializers() == first.get_overridable_initializers() == []
    np.testing.assert_array_equal(second.run(None, FEED)[0], np.maximum(FEED["x"] + c, 0))


def test_sessions_that_cannot_be_keyed_are_built_as_usual(tmp_path, make_registry):
    path, folder = _model(tmp_path / "m.onnx"), tmp_path / "cache"
    options = _options(folder)
    options.add_initializer("w", np.ones(4, np.float32))
    session, _, _ = _session(str(path), options, make_registry)
    assert any("session cache not used: initializers are overridden" in n for n in session.partition_report().notes)
    assert not folder.exists()
    proto, _, _ = _session(onnx.load(path), _options(folder), make_registry)
    assert any("ModelProto" in n for n in proto.partition_report().notes) and not folder.exists()


def test_a_folder_that_cannot_be_written_is_a_warning_only(tmp_path, make_registry):
    path = _model(tmp_path / "m.onnx")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    session, _, caught = _session(str(path), _options(blocker / "cache"), make_registry)
    assert any("could not be stored" in w for w in caught)
    np.testing.assert_array_equal(session.run(None, FEED)[0], _expected())


def test_new_external_data_is_a_miss(tmp_path, make_registry):
    model = onnx.load(_model(tmp_path / "inline.onnx"))
    path, folder = tmp_path / "m.onnx", tmp_path / "cache"
    onnx.save(model, path, save_as_external_data=True, location="m.data", size_threshold=0)
    _session(str(path), _options(folder), make_registry)
    hit, _, _ = _session(str(path), _options(folder), make_registry)
    assert _from_cache(hit)
    assert str((tmp_path / "m.data").resolve()) in _records(folder)[0].read_text()  # stamped in the record
    new_weights = (3.0, -3.0, 0.5, 1.0)
    other = onnx.load(_model(tmp_path / "other.onnx", new_weights))
    onnx.save(other, tmp_path / "staging.onnx", save_as_external_data=True, location="staging.data", size_threshold=0)
    os.replace(tmp_path / "staging.data", tmp_path / "m.data")  # new weights, the same model file
    session, _, _ = _session(str(path), _options(folder), make_registry)
    assert not _from_cache(session)
    np.testing.assert_array_equal(session.run(None, FEED)[0], _expected(new_weights))


def test_sessions_created_at_once_share_one_entry(tmp_path, make_registry):
    """Threads of one process (as processes would) miss together, each store an entry; the
    last record wins and every later session starts from it."""
    from concurrent.futures import ThreadPoolExecutor

    path, folder = _model(tmp_path / "m.onnx"), tmp_path / "cache"
    with ThreadPoolExecutor(4) as pool:
        sessions = list(pool.map(lambda _: _session(str(path), _options(folder), make_registry)[0], range(4)))
    for session in sessions:
        np.testing.assert_array_equal(session.run(None, FEED)[0], _expected())
    (record,) = _records(folder)
    assert (folder / json.loads(record.read_text())["model_file"]).is_file()
    later, _, _ = _session(str(path), _options(folder), make_registry)
    assert _from_cache(later)
    np.testing.assert_array_equal(later.run(None, FEED)[0], _expected())
