"""External data: locations outside the model's folder are refused, ranges are checked
against the file, and data whose size does not match the tensor is an error naming it."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
import seeds

import epoxy
from epoxy import ModelLoadError


def _saved(tmp_path, **edits):
    model = seeds.mlp()
    path = tmp_path / "model.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin",
              size_threshold=0)
    proto = onnx.load(path, load_external_data=False)
    entries = proto.graph.initializer[0].external_data
    for key, value in edits.items():
        found = [e for e in entries if e.key == key]
        entry = found[0] if found else entries.add()
        entry.key, entry.value = key, value
    onnx.save(proto, path)
    return path


def _open(path):
    return epoxy.InferenceSession(str(path), providers=["cpu"])


def test_intact_external_data_loads(tmp_path):
    session = _open(_saved(tmp_path))
    assert session.run(None, {"x": np.ones((2, 8), np.float32)})[0].shape == (2, 4)


@pytest.mark.parametrize(("location", "message"), [
    ("../w.bin", "outside the model's folder"),
    ("sub/../../w.bin", "outside the model's folder"),
    ("/etc/passwd", "absolute locations are refused"),
    ("C:\\w.bin", "absolute locations are refused"),
    ("\\\\server\\share\\w.bin", "absolute locations are refused"),
    ("w.bin\x00.txt", "NUL byte"),
    ("", "no location"),
    (".", "file not found"),
    ("sub", "file not found"),
    ("escape.bin", "outside the model's folder"),
    ("linkdir/w.bin", "outside the model's folder"),
])
def test_escaping_or_odd_locations_are_refused(tmp_path, location, message):
    inner = tmp_path / "model"
    inner.mkdir()
    (inner / "sub").mkdir()
    (tmp_path / "w.bin").write_bytes(bytes(4096))
    (inner / "escape.bin").symlink_to(tmp_path / "w.bin")
    (inner / "linkdir").symlink_to(tmp_path)
    path = _saved(inner, location=location)
    with pytest.raises(ModelLoadError, match=message):
        _open(path)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("offset", "-1", "lie outside"),
    ("offset", "99999999999", "lie outside"),
    ("length", "99999999999", "lie outside"),
    ("length", "-5", "lie outside"),
    ("offset", "abc", "not integers"),
    ("length", "1e3", "not integers"),
])
def test_offsets_and_lengths_are_checked_against_the_file(tmp_path, key, value, message):
    with pytest.raises(ModelLoadError, match=message):
        _open(_saved(tmp_path, **{key: value}))


def test_truncated_data_file_is_refused(tmp_path):
    path = _saved(tmp_path)
    data = (tmp_path / "w.bin").read_bytes()
    (tmp_path / "w.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="lie outside the .*-byte file"):
        _open(path)


def test_length_that_does_not_match_the_tensor_names_it(tmp_path):
    with pytest.raises(epoxy.EpoxyError, match="w1"):
        _open(_saved(tmp_path, length="100"))


def test_external_data_needs_a_path(tmp_path):
    path = _saved(tmp_path)
    with pytest.raises(ModelLoadError, match="was not loaded from a path"):
        epoxy.InferenceSession(path.read_bytes(), providers=["cpu"])


def test_a_data_file_that_is_a_directory_is_refused(tmp_path):
    path = _saved(tmp_path)
    os.remove(tmp_path / "w.bin")
    (tmp_path / "w.bin").mkdir()
    with pytest.raises(ModelLoadError, match="file not found"):
        _open(path)
