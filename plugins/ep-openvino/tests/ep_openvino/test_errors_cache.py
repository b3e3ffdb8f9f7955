"""OpenVINO failures become epoxy ProviderErrors naming group, nodes and device; the cache dir."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from ov_test_models import conv_net, make_model

import epoxy
import epoxy_ep_openvino
from epoxy.contract import FusedGroup, SubgraphSpec
from epoxy.errors import ProviderError
from epoxy.kit import boundary


def _session(model):
    sess = epoxy.InferenceSession(model, providers=[("openvino", {"min_group_cost": 0}), "cpu"])
    provider = epoxy_ep_openvino.openvino_provider(sess)
    assert provider is not None
    return sess, provider, sess._graph


def _spec(graph, nodes, label="g"):
    return SubgraphSpec(FusedGroup(tuple(nodes), label), graph, *map(tuple, boundary(graph, nodes)))


def _small():
    return make_model([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                       helper.make_node("Neg", ["a"], ["y"], name="neg")],
                      [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, [2, 3])])


def test_compile_error_names_group_nodes_and_device(monkeypatch):
    _, provider, graph = _session(_small())

    class Broken:
        def read_model(self, **kw):
            raise RuntimeError("Exception from src/core: cannot read this model")

    monkeypatch.setattr(provider, "core", Broken())
    provider._compiled.clear()
    with pytest.raises(ProviderError) as info:
        provider.compile(_spec(graph, [0, 1], "my_group"))
    text = str(info.value)
    assert "'my_group'" in text and "relu" in text and "neg" in text
    assert "openvino:cpu:0" in text and "OpenVINO device CPU" in text and "cannot read this model" in text
    assert info.value.provider == "openvino"


def test_capability_declines_group_that_fails_to_compile(monkeypatch, rng):
    from epoxy_ep_openvino.provider import OpenVINOProvider

    original = OpenVINOProvider._compile_nodes

    def fail(self, graph, nodes, label, overridable=False):
        raise RuntimeError("simulated compile failure")

    monkeypatch.setattr(OpenVINOProvider, "_compile_nodes", fail)
    sess = epoxy.InferenceSession(conv_net(rng), providers=["openvino", "cpu"])
    assert sess.partition_report().summary() == {"cpu": 5}
    d = sess.partition_report().nodes[0]
    assert "simulated compile failure" in dict(d.declined)["openvino"]
    monkeypatch.setattr(OpenVINOProvider, "_compile_nodes", original)


def test_run_error_is_a_provider_error():
    _, provider, graph = _session(_small())
    run = provider.compile(_spec(graph, [0, 1], "grp"))
    np.testing.assert_array_equal(run(np.ones((2, 3), np.float32))[0], -np.ones((2, 3), np.float32))
    with pytest.raises(
        ProviderError, match=r"openvino run failed for group 'grp' \(nodes relu, neg\) on openvino:cpu:0"
    ):
        run(np.ones((5, 7), np.float32))
    # the request pool survives a failed call
    np.testing.assert_array_equal(run(np.ones((2, 3), np.float32))[0], -np.ones((2, 3), np.float32))


def test_kernel_is_refused():
    _, provider, graph = _session(_small())
    with pytest.raises(ProviderError, match="fused groups only"):
        provider.kernel(graph.nodes[0])


def test_cache_dir_second_session_loads_blobs(tmp_path, rng):
    model = conv_net(rng, channels=16)
    opts = {"cache_dir": str(tmp_path / "ovcache")}
    first = epoxy.InferenceSession(model, providers=[("openvino", opts), "cpu"])
    s1 = epoxy_ep_openvino.stats(first)
    assert [g["loaded_from_cache"] for g in s1["groups"]] == [False]
    assert any(p.name != "epoxy_openvino_compile_times.json" for p in (tmp_path / "ovcache").iterdir())
    # a fresh provider (new session) compiles the same group again: now from the cache
    second = epoxy.InferenceSession(model, providers=[("openvino", opts), "cpu"])
    s2 = epoxy_ep_openvino.stats(second)
    assert [g["loaded_from_cache"] for g in s2["groups"]] == [True]
    assert s2["groups"][0]["saved_s"] is not None
    assert "loaded from cache" in s2["summary"] and "saving" in s2["summary"]
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.testing.assert_array_equal(first.run(None, {"x": x})[0], second.run(None, {"x": x})[0])


def test_stats_without_openvino(rng):
    sess = epoxy.InferenceSession(conv_net(rng), providers=["cpu"])
    assert epoxy_ep_openvino.stats(sess)["groups"] == []
