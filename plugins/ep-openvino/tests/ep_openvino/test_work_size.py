"""Small groups on one OpenVINO thread (``work_size``, option ``one_thread_below_macs``): the
matrix work is counted right per op kind, a group below the bound compiles with
INFERENCE_NUM_THREADS 1 (read back from the compiled model), one above it or with the option at
0 keeps ``num_threads``, a dynamic group's static specializations decide per shape, and the
results are onnxruntime's either way."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from ov_test_models import conv_net, make_model

import epoxy
import epoxy_ep_openvino
from epoxy_ep_openvino.runtime import shared_core
from epoxy_ep_openvino.specialize import SPECIALIZE_AFTER
from epoxy_ep_openvino.work_size import multiply_adds, one_thread_config

F = TensorProto.FLOAT


def _matmul(rng, m, k, n, batch="N"):
    w = (rng.standard_normal((k, n)) * 0.1).astype(np.float32)
    return make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F, [batch, m, k])],
                      [("y", F, [batch, m, n])], {"w": w})


def _ov(model, shapes=None):
    ov_model = shared_core().read_model(model.SerializeToString(), b"")
    if shapes:
        ov_model.reshape(shapes)
    return ov_model


def test_multiply_adds_of_matmul_conv_and_depthwise(rng):
    assert multiply_adds(_ov(_matmul(rng, 4, 8, 16, batch=2))) == 2 * 4 * 16 * 8
    # conv_net: 3 -> 8 then 8 -> 8 channels, 3x3, same padding, 16x16 maps, batch 1
    assert multiply_adds(_ov(conv_net(rng), {0: [1, 3, 16, 16]})) == 8 * 256 * 27 + 8 * 256 * 72
    w = (rng.standard_normal((4, 1, 3, 3)) * 0.1).astype(np.float32)
    depthwise = make_model([helper.make_node("Conv", ["x", "w"], ["y"], group=4, pads=[1, 1, 1, 1])],
                           [("x", F, [1, 4, 8, 8])], [("y", F, [1, 4, 8, 8])], {"w": w})
    assert multiply_adds(_ov(depthwise)) == 4 * 64 * 9


def test_unknown_sizes_keep_the_configured_threads(rng):
    dynamic = _ov(_matmul(rng, 4, 8, 16))
    assert multiply_adds(dynamic) is None
    config = {"INFERENCE_NUM_THREADS": 2}
    assert one_thread_config(config, dynamic, 1e6, "CPU") == (config, None)
    static = _ov(_matmul(rng, 4, 8, 16, batch=1))
    assert one_thread_config(config, static, 1e6, "CPU") == ({"INFERENCE_NUM_THREADS": 1}, 512)
    assert one_thread_config(config, static, 0, "CPU") == (config, None)  # the option off
    assert one_thread_config(config, static, 1e6, "GPU") == (config, None)  # a CPU-plugin property
    assert one_thread_config(config, static, 512, "CPU") == (config, None)  # not below


def _session(model, **options):
    opts = {"min_group_cost": 0, "num_threads": 2, **options}
    sess = epoxy.InferenceSession(model, providers=[("openvino", opts), "cpu"])
    assert set(sess.partition_report().summary()) == {"openvino"}  # the provider ran every node, not cpu
    return sess, epoxy_ep_openvino.openvino_provider(sess)


def _threads(provider):
    return [int(m.get_property("INFERENCE_NUM_THREADS")) for m in provider.compiled_models()]


@pytest.mark.parametrize(("shape", "below", "threads"), [
    ((1, 4, 8, 16), None, 1),  # 512 multiply-adds: one thread
    ((1, 256, 512, 512), None, 2),  # 67 M: the configured two
    ((1, 4, 8, 16), 0.0, 2),  # the option off
], ids=["tiny", "large", "off"])
def test_a_static_group_compiles_on_one_thread_below_the_bound(rng, shape, below, threads):
    b, m, k, n = shape
    model = _matmul(rng, m, k, n, batch=b)
    sess, provider = _session(model, **({} if below is None else {"one_thread_below_macs": below}))
    assert _threads(provider) == [threads]
    group = epoxy_ep_openvino.stats(sess)["groups"][0]
    assert group["threads"] == (1 if threads == 1 else None)
    assert group["multiply_adds"] == (m * n * k if threads == 1 else None)
    x = rng.standard_normal((b, m, k)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-4)


def test_a_dynamic_group_decides_per_specialized_shape(rng, monkeypatch):
    """The dynamic compilation keeps num_threads (its work is unknown); each static
    specialization counts its own: batch 1 of this conv net is small, batch 64 is not."""
    model = conv_net(rng)
    sess, provider = _session(model)
    assert _threads(provider) == [2]
    configs: list[dict] = []
    real = provider.core

    class Recording:
        def __getattr__(self, name):
            return getattr(real, name)

        def compile_model(self, ov_model, device, config):
            configs.append(dict(config))
            return real.compile_model(ov_model, device, config)

    monkeypatch.setattr(provider, "core", Recording())
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (1, 64):
        x = rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)
        for _ in range(SPECIALIZE_AFTER):
            sess.run(None, {"x": x})
        provider.wait_for_specializations(60)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert [c["INFERENCE_NUM_THREADS"] for c in configs] == [1, 2]  # 0.2 M then 13 M multiply-adds
    specs = epoxy_ep_openvino.stats(sess)["specializations"]
    assert [(s["compiled"], s["one_thread"]) for s in specs] == [(2, 1)]
