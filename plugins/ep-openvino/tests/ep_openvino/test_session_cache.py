"""The session cache (#17) with the openvino provider: the second session of a model imports
OpenVINO's compiled blobs from the cached entry instead of compiling, runs its nodes on
openvino, and gives a fresh session's outputs bit for bit."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from ov_test_models import conv_net

import epoxy
import epoxy_ep_openvino

CACHED = "prepared from the session cache"


@pytest.fixture(autouse=True)
def _compile_key(tmp_path, monkeypatch):
    """Cached entries are signed with a key of this test, never the user's own."""
    monkeypatch.setenv("EPOXY_COMPILE_KEY", str(tmp_path / "compile.key"))
    monkeypatch.delenv("EPOXY_SESSION_CACHE_DIR", raising=False)


def _providers(**options):
    return [("openvino", {"min_group_cost": 0, **options}), "cpu"]


def _session(path, folder, **options):
    so = epoxy.SessionOptions()
    so.session_cache_dir = str(folder)
    return epoxy.InferenceSession(str(path), so, providers=_providers(**options))


def test_a_cached_session_imports_openvinos_blobs(tmp_path):
    rng = np.random.default_rng(3)
    path, folder = tmp_path / "cnn.onnx", tmp_path / "cache"
    onnx.save(conv_net(rng), path)
    first = _session(path, folder)
    assert not any(n.startswith(CACHED) for n in first.partition_report().notes)
    assert "imported from compiled blobs" not in epoxy_ep_openvino.stats(first)["summary"]
    second = _session(path, folder)
    report = second.partition_report()
    assert any(n.startswith(CACHED) for n in report.notes), report.notes
    assert report.artifacts and all(s.startswith("loaded from the compiled blob") for s in report.artifacts.values())
    assert "imported from compiled blobs" in epoxy_ep_openvino.stats(second)["summary"]
    assert {d.provider for d in report.nodes} == {"openvino"}  # openvino ran them, not cpu
    fresh = epoxy.InferenceSession(str(path), providers=_providers())
    x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    for got, want in zip(second.run(None, {"x": x}), fresh.run(None, {"x": x})):
        assert np.array_equal(got, want)


def test_other_openvino_options_get_their_own_entry(tmp_path):
    rng = np.random.default_rng(4)
    path, folder = tmp_path / "cnn.onnx", tmp_path / "cache"
    onnx.save(conv_net(rng), path)
    _session(path, folder)
    other = _session(path, folder, performance_hint="THROUGHPUT")
    assert not any(n.startswith(CACHED) for n in other.partition_report().notes)
    assert not other.partition_report().artifacts  # compiled afresh, no blob refused
    again = _session(path, folder, performance_hint="THROUGHPUT")
    assert any(n.startswith(CACHED) for n in again.partition_report().notes)
    assert len(list(folder.glob("*.json"))) == 2
