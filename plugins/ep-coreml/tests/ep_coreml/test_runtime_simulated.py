"""The macOS run path (feature mapping, int64/bool casts, baked initializers, constant
outputs, groups between cpu nodes) exercised on any OS: packages are "predicted" by the
test MIL interpreter instead of Core ML."""

from __future__ import annotations

import warnings
from typing import ClassVar

import numpy as np
import pytest
from coreml_harness import cpu_run, model, rand
from mil_interpreter import load_program, run_program
from onnx import helper

import epoxy
from epoxy.contract import Device
from epoxy.errors import InvalidFeedError, KernelError
from epoxy.testing import registry_with
from epoxy_ep_coreml import provider as provider_module
from epoxy_ep_coreml.factory import CoreMLProviderFactory

N = helper.make_node


class _FakeMLModel:
    """Stands in for coremltools.models.MLModel: Core ML features in, Core ML features out."""

    loaded: ClassVar[list[tuple[str, str]]] = []

    def __init__(self, path, compute_units):
        self.program = load_program(path)
        _FakeMLModel.loaded.append((str(path), compute_units))

    def predict(self, feeds):
        for name, value in feeds.items():
            assert value.dtype in (np.float32, np.int32), f"Core ML feature {name} fed as {value.dtype}"
        return run_program(self.program, feeds)


class _Factory(CoreMLProviderFactory):
    def devices(self):
        return [Device("coreml", "apple", 0, "simulated")]


@pytest.fixture
def session(monkeypatch, tmp_path):
    from epoxy_ep_coreml import runner

    monkeypatch.setattr(provider_module, "can_predict", lambda: True)
    monkeypatch.setattr(runner, "_loader", _FakeMLModel)  # how runner.make_runner loads a package
    from epoxy_ep_cpu.factory import CpuProviderFactory

    registry = registry_with(_Factory(), CpuProviderFactory(), plugin_name="simulated")

    def make(m, **options):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return epoxy.InferenceSession(m, providers=[("coreml", {"cache_dir": str(tmp_path), **options}), "cpu"],
                                          registry=registry)
    return make


def _compare(sess, m, feeds, rtol=1e-5, atol=1e-6):
    want = cpu_run(m, feeds)
    got = dict(zip([o.name for o in m.graph.output], sess.run(None, feeds)))
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        np.testing.assert_allclose(got[name], value, rtol=rtol, atol=atol, err_msg=name)


def test_groups_around_cpu_nodes_with_int_and_bool_boundaries(session):
    feeds = {"x": rand(2, 3, 4), "idx": np.array([[1, 0], [2, 3]], np.int64)}
    m = model([
        N("Relu", ["x"], ["r"]),
        N("ArgMax", ["r"], ["am"], axis=2),                 # int64 output leaves coreml
        N("Round", ["r"], ["rd"]),                          # cpu
        N("Greater", ["rd", "r"], ["gt"]),                  # bool output leaves coreml
        N("Cast", ["idx"], ["fi"], to=1),                   # int64 run-time input enters coreml
        N("Sum", ["rd", "r"], ["s"]),
        N("Not", ["gt"], ["ng"]),                           # bool input... crosses from a coreml group to another
        N("Where", ["ng", "s", "r"], ["w"]),
    ], feeds, outputs=["am", "gt", "fi", "w"])
    sess = session(m)
    placed = {d.op_type: d.provider for d in sess.partition_report().nodes}
    assert placed["Round"] == "cpu" and placed["Where"] == "coreml" and placed["ArgMax"] == "coreml"
    _compare(sess, m, feeds)


def test_light_model_style_folded_weights_and_compute_units(session):
    feeds = {"x": rand(1, 3, 8, 8)}
    m = model([
        N("ConstantOfShape", ["wshape"], ["w"], value=helper.make_tensor("v", 1, [1], [0.05])),
        N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        N("Relu", ["c"], ["r"]),
        N("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        N("Reshape", ["p", "shape"], ["f"]),
        N("Gemm", ["f", "fw", "fb"], ["g"], transB=1),
        N("Softmax", ["g"], ["y"]),
    ], feeds, consts={"wshape": np.array([4, 3, 3, 3], np.int64), "b": rand(4), "shape": np.array([1, -1], np.int64),
                      "fw": rand(5, 64), "fb": rand(5)}, opset=11)
    _FakeMLModel.loaded.clear()
    sess = session(m, compute_units="CPU_AND_NE")
    assert {d.provider for d in sess.partition_report().nodes} == {"coreml"}
    _compare(sess, m, feeds)
    assert [u for _p, u in _FakeMLModel.loaded] == ["CPU_AND_NE"]


def test_constant_output_and_passthrough(session):
    feeds = {"x": rand(2, 3)}
    m = model([N("Shape", ["x"], ["s"]), N("Identity", ["x"], ["i"]), N("Relu", ["i"], ["y"])], feeds,
              outputs=["s", "i", "y"])
    sess = session(m)
    s, i, y = sess.run(None, feeds)
    np.testing.assert_array_equal(s, [2, 3])
    assert s.dtype == np.int64
    np.testing.assert_array_equal(i, feeds["x"])
    np.testing.assert_array_equal(y, np.maximum(feeds["x"], 0))


def test_overriding_a_baked_initializer_is_refused(session):
    feeds = {"x": rand(2, 3)}
    b = rand(3)
    m = model(N("Add", ["x", "b"], ["y"]), {**feeds, "b": b}, consts={"b": b})  # b: an overridable initializer
    sess = session(m)
    assert [i.name for i in sess.get_overridable_initializers()] == ["b"]
    _compare(sess, m, feeds)
    sess.run(None, dict(feeds, b=b.copy()))  # an override equal to the baked value is fine
    with pytest.raises((InvalidFeedError, KernelError), match="compiled into Core ML group"):
        sess.run(None, dict(feeds, b=np.zeros(3, np.float32)))
