"""What plain onnxruntime does with an epoxy compiled model written with ep-cpu (#18, docs/AOT.md):
it runs one optimized at the basic level (standard ops only), and refuses one holding ep-cpu's own
fused ops (``com.epoxy.cpu``) with a clean error naming the op."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy.cli.main import main

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _own_key(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("EPOXY_COMPILE_KEY", str(tmp_path_factory.getbasetemp() / "compile.key"))


def _conv_relu(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


def test_basic_level_runs_on_onnxruntime_and_all_level_is_refused_cleanly(tmp_path):
    model = _conv_relu(tmp_path / "m.onnx")
    feed = {"x": RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    basic, full = tmp_path / "basic.onnx", tmp_path / "all.onnx"
    assert main(["compile", str(model), "-o", str(basic), "--providers", "cpu", "--optimization", "basic"]) == 0
    assert main(["compile", str(model), "-o", str(full), "--providers", "cpu"]) == 0
    got = ort.InferenceSession(str(basic), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="com.epoxy.cpu:FusedConv") as refused:
        ort.InferenceSession(str(full), providers=["CPUExecutionProvider"])
    assert type(refused.value).__module__.startswith("onnxruntime")
    session = epoxy.InferenceSession(str(full), providers=["cpu"])  # epoxy loads it, optimizer skipped
    assert session.applied_passes == []
    np.testing.assert_allclose(session.run(None, feed)[0], want, rtol=1e-5, atol=1e-5)
