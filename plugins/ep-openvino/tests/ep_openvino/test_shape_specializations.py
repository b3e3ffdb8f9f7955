"""Per-shape static specializations (issue #17): a group compiled with dynamic dims gets a
static compilation for input shapes it has run twice, built in the background; results stay
those of the dynamic compilation and of onnxruntime, and nothing the specializing does can
fail a run."""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from ov_test_models import conv_net, make_model

import epoxy
import epoxy_ep_openvino
from epoxy_ep_openvino.specialize import SPECIALIZE_AFTER, ShapeSpecializer, SpecializationStats


def _attention(rng, d=16):
    """x[N, S, d] -> softmax(x Wq (x Wk)^T) x Wv: dynamic batch and sequence dims."""
    w = {k: (rng.standard_normal((d, d)) * 0.3).astype(np.float32) for k in ("wq", "wk", "wv")}
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    f = TensorProto.FLOAT
    return make_model(nodes, [("x", f, ["N", "S", d])], [("y", f, ["N", "S", d])], w)


def _session(model, **options):
    sess = epoxy.InferenceSession(model, providers=[("openvino", {"min_group_cost": 0, **options}), "cpu"])
    assert set(sess.partition_report().summary()) == {"openvino"}  # the provider ran every node, not cpu
    return sess, epoxy_ep_openvino.openvino_provider(sess)


def _specs(sess):
    return epoxy_ep_openvino.stats(sess)["specializations"]


def _run_twice_and_wait(sess, provider, x):
    for _ in range(SPECIALIZE_AFTER):
        sess.run(None, {"x": x})
    provider.wait_for_specializations(60)


@pytest.mark.parametrize("build", [conv_net, _attention], ids=["conv", "attention"])
def test_alternating_shapes_match_dynamic_and_onnxruntime(rng, build):
    model = build(rng)
    sess, provider = _session(model)
    dynamic, _ = _session(model, specialize_shapes=False)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    shapes = [(1, 3, 16, 16), (3, 3, 16, 16)] if build is conv_net else [(1, 5, 16), (2, 9, 16)]
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    for _ in range(4):
        for x in xs:
            got = sess.run(None, {"x": x})[0]
            np.testing.assert_allclose(got, dynamic.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got, ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
        provider.wait_for_specializations(60)
    (spec,) = _specs(sess)
    assert spec["compiled"] == 2 and spec["failed"] == 0
    # each shape ran twice on the dynamic compilation, then (after the wait) on its specialization
    assert spec["dynamic_runs"] == 2 * SPECIALIZE_AFTER and spec["specialized_runs"] == 8 - 2 * SPECIALIZE_AFTER
    assert "2 shape specialization(s) compiled" in epoxy_ep_openvino.stats(sess)["summary"]
    assert _specs(dynamic) == []


class _Spy:
    """OpenVINO's core, recording the input shapes of every model compiled through it."""

    def __init__(self, real, refuse_static=False):
        self.real = real
        self.refuse_static = refuse_static
        self.static = []

    def __getattr__(self, name):
        return getattr(self.real, name)

    def compile_model(self, model, *args, **kwargs):
        shapes = [p.get_partial_shape() for p in model.inputs]
        if all(s.is_static for s in shapes):
            self.static.append([list(s.to_shape()) for s in shapes])
            if self.refuse_static:
                raise RuntimeError("simulated reshape failure")
        return self.real.compile_model(model, *args, **kwargs)


def test_specialization_is_used_once_ready_and_new_shapes_start_dynamic(rng):
    sess, provider = _session(conv_net(rng))
    provider.core = spy = _Spy(provider.core)
    x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    sess.run(None, {"x": x})
    provider.wait_for_specializations(60)
    assert _specs(sess)[0]["compiled"] == 0  # a shape seen once is not specialized
    sess.run(None, {"x": x})
    provider.wait_for_specializations(60)
    assert _specs(sess)[0]["compiled"] == 1
    assert spy.static == [[[2, 3, 16, 16]]]  # compiled reshaped to the fed shape
    sess.run(None, {"x": x})
    sess.run(None, {"x": x[:1]})  # first run of another shape: the dynamic compilation answers
    (spec,) = _specs(sess)
    assert (spec["specialized_runs"], spec["dynamic_runs"]) == (1, 3)


def test_lru_bound(rng):
    sess, provider = _session(conv_net(rng), max_shape_specializations=2)
    xs = {n: rng.standard_normal((n, 3, 16, 16)).astype(np.float32) for n in (1, 2, 3)}
    for n in (1, 2, 3):  # compiled in this order: 1 is the least recently used when 3 arrives
        _run_twice_and_wait(sess, provider, xs[n])
    (spec,) = _specs(sess)
    assert (spec["compiled"], spec["evicted"]) == (3, 1)
    before = spec["dynamic_runs"]
    sess.run(None, {"x": xs[2]})
    sess.run(None, {"x": xs[3]})
    sess.run(None, {"x": xs[1]})  # evicted: back on the dynamic compilation
    (spec,) = _specs(sess)
    assert spec["specialized_runs"] == 2 and spec["dynamic_runs"] == before + 1


def test_failed_specialization_stays_dynamic_and_is_not_retried(rng):
    model = conv_net(rng)
    sess, provider = _session(model)
    provider.core = spy = _Spy(provider.core, refuse_static=True)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    for _ in range(6):
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
        provider.wait_for_specializations(60)
    (spec,) = _specs(sess)
    assert len(spy.static) == 1 and (spec["compiled"], spec["failed"], spec["dynamic_runs"]) == (0, 1, 6)
    assert "1 shape(s) left dynamic" in epoxy_ep_openvino.stats(sess)["summary"]


def test_a_specialization_that_fails_to_run_is_dropped():
    stats = SpecializationStats("g")
    jobs = []

    def broken(*args):
        raise RuntimeError("simulated run failure")

    spec = ShapeSpecializer(lambda x: ("dynamic",), [0], lambda key: broken, jobs.append, 4, stats)
    run = spec.runner()
    x = np.zeros((2, 3))
    assert [run(x) for _ in range(SPECIALIZE_AFTER)] == [("dynamic",)] * SPECIALIZE_AFTER
    (job,) = jobs
    job()  # the background compile
    assert (stats.compiled, list(spec.ready)) == (1, [((2, 3),)])
    assert run(x) == ("dynamic",)  # the specialization raised: the dynamic kernel answered
    assert (stats.failed, list(spec.ready), spec.failed) == (1, [], {((2, 3),)})
    assert run(x) == ("dynamic",) and len(jobs) == 1  # not specialized again


def test_concurrent_runs_from_threads(rng):
    model = _attention(rng)
    sess, provider = _session(model)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    xs = [rng.standard_normal((n, s, 16)).astype(np.float32) for n, s in ((1, 4), (2, 7), (3, 5))]
    want = [ref.run(None, {"x": x})[0] for x in xs]
    errors = []

    def worker(k):
        try:
            for i in range(30):
                j = (i + k) % len(xs)
                np.testing.assert_allclose(sess.run(None, {"x": xs[j]})[0], want[j], rtol=1e-4, atol=1e-5)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    provider.wait_for_specializations(60)
    (spec,) = _specs(sess)
    assert spec["compiled"] == 3 and spec["failed"] == 0
    assert spec["dynamic_runs"] + spec["specialized_runs"] == 4 * 30


@pytest.mark.parametrize("options", [{"specialize_shapes": False}, {"max_shape_specializations": 0}])
def test_option_off_means_no_specialization(rng, options):
    sess, provider = _session(conv_net(rng), **options)
    _run_twice_and_wait(sess, provider, rng.standard_normal((2, 3, 16, 16)).astype(np.float32))
    assert _specs(sess) == [] and provider.specializations == []
    assert "specialization" not in epoxy_ep_openvino.stats(sess)["summary"]


def test_static_groups_are_not_specialized(rng):
    model = conv_net(rng)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 2
    sess, provider = _session(model)
    _run_twice_and_wait(sess, provider, rng.standard_normal((2, 3, 16, 16)).astype(np.float32))
    assert provider.specializations == []
