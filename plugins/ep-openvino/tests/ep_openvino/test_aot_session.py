"""End to end through the core (issue #18): ``epoxy.compile_model`` writes a compiled model with
openvino's blobs, a session on it imports them (bit-identical to a fresh session) or, when
openvino refuses a blob, compiles the group again and says why."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper
from ov_test_models import conv_net, make_model

import epoxy
import epoxy_ep_openvino


@pytest.fixture(autouse=True)
def _compile_key(tmp_path, monkeypatch):
    """Compiled models are signed with a key of this test, never the user's own."""
    monkeypatch.setenv("EPOXY_COMPILE_KEY", str(tmp_path / "compile.key"))


def _mlp(rng):
    w = (rng.standard_normal((16, 8)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])]
    f = TensorProto.FLOAT
    return make_model(nodes, [("x", f, ["N", 16])], [("y", f, ["N", 8])], {"w": w})


def _providers(**options):
    return [("openvino", {"min_group_cost": 0, **options}), "cpu"]


def _load(path, providers):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = epoxy.InferenceSession(str(path), providers=providers)
    return sess, [str(w.message) for w in caught]


@pytest.mark.parametrize("build,shape", [(conv_net, (2, 3, 16, 16)), (_mlp, (5, 16))], ids=["cnn", "mlp"])
def test_compiled_model_loads_openvinos_blobs(tmp_path, build, shape):
    rng = np.random.default_rng(7)
    model = build(rng)
    out = tmp_path / "compiled.onnx"
    summary = epoxy.compile_model(model, out, providers=_providers())
    assert [g["format"] for g in summary.groups] == ["openvino.compiled_model/1"]
    sess, caught = _load(out, _providers())
    report = sess.partition_report()
    assert report.artifacts and all(s.startswith("loaded from the compiled blob") for s in report.artifacts.values()), \
        (report.artifacts, caught)
    assert "imported from compiled blobs" in epoxy_ep_openvino.stats(sess)["summary"]
    fresh = epoxy.InferenceSession(model, providers=_providers())
    x = rng.standard_normal(shape).astype(np.float32)
    for got, want in zip(sess.run(None, {"x": x}), fresh.run(None, {"x": x})):
        assert np.array_equal(got, want)


def test_other_options_recompile_and_say_why(tmp_path):
    rng = np.random.default_rng(8)
    model = conv_net(rng)
    out = tmp_path / "compiled.onnx"
    epoxy.compile_model(model, out, providers=_providers())
    sess, caught = _load(out, _providers(performance_hint="THROUGHPUT"))
    (status,) = sess.partition_report().artifacts.values()
    assert "refused" in status and "PERFORMANCE_HINT" in status, status
    assert any("PERFORMANCE_HINT" in w for w in caught), caught
    fresh = epoxy.InferenceSession(model, providers=_providers(performance_hint="THROUGHPUT"))
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    assert np.array_equal(sess.run(None, {"x": x})[0], fresh.run(None, {"x": x})[0])
