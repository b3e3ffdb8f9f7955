"""Rewrites applied before OpenVINO reads a group: GlobalAveragePool computes every channel
the same way (OpenVINO's own lowering sums the tail channel block after a blocked-layout
convolution in another order, so equal channels averaged to different values)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from ov_test_models import make_model

import epoxy
from epoxy_ep_openvino.rewrites import apply_rewrites


def _conv_pool_model(channels: int, spatial, opset: int = 18) -> onnx.ModelProto:
    """conv (every weight 0.02: all output channels hold the same data) -> relu -> GAP."""
    w = np.full((channels, 64, 1, 1), 0.02, np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["y"], name="pool"),
    ]
    return make_model(nodes, [("x", TensorProto.FLOAT, [1, 64, *spatial])],
                      [("y", TensorProto.FLOAT, [1, channels, 1, 1])], {"w": w}, opset=opset)


@pytest.mark.parametrize("channels", [1000, 24, 37])
@pytest.mark.parametrize("spatial", [(13, 13), ("H", "W")], ids=["static", "dynamic"])
@pytest.mark.parametrize("opset", [13, 18])
def test_equal_channels_pool_to_equal_values(channels, spatial, opset, rng):
    model = _conv_pool_model(channels, spatial, opset)
    x = (rng.standard_normal((1, 64, 13, 13)) * 1e3).astype(np.float32)
    sess = epoxy.InferenceSession(model.SerializeToString(), providers=[("openvino", {"min_group_cost": 0}), "cpu"])
    report = sess.partition_report()
    assert set(report.summary()) == {"openvino"}, report.format(per_node=False)
    (y,) = sess.run(None, {"x": x})
    assert y.shape == (1, channels, 1, 1)
    differing = np.nonzero(y.ravel() != y.ravel()[0])[0]
    assert differing.size == 0, f"channels {differing[:8]} differ from channel 0"
    ref = epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, ref, rtol=1e-5)


def _shapes(table):
    return lambda name: table.get(name)


def test_static_image_becomes_one_average_pool():
    model = _conv_pool_model(8, (5, 7))
    assert apply_rewrites(model, _shapes({"r": (1, 8, 5, 7)})) == 1
    pool = [n for n in model.graph.node if n.op_type == "AveragePool"]
    assert [n.op_type for n in model.graph.node] == ["Conv", "Relu", "AveragePool"]
    assert list(pool[0].attribute[0].ints) == [5, 7]
    onnx.checker.check_model(model, full_check=True)


@pytest.mark.parametrize("opset", [13, 18])
def test_dynamic_image_becomes_flat_mean_valid_at_the_models_opset(opset):
    model = _conv_pool_model(8, ("H", "W"), opset)
    assert apply_rewrites(model, _shapes({"r": (1, 8, None, None)})) == 1
    assert [n.op_type for n in model.graph.node] == ["Conv", "Relu", "Reshape", "ReduceMean", "Reshape"]
    onnx.checker.check_model(model, full_check=True)


def test_unknown_rank_is_left_alone():
    model = _conv_pool_model(8, (5, 5))
    assert apply_rewrites(model, _shapes({})) == 0
    assert [n.op_type for n in model.graph.node] == ["Conv", "Relu", "GlobalAveragePool"]


# -- QuantizeLinear of a Concat ------------------------------------------------------------------
def _concat_qdq_model(tail: str = "Mul", per_channel_q: bool = False,
                      concat_read_twice: bool = False) -> onnx.ModelProto:
    """``Concat(a, b) -> Q -> DQ -> <tail> (constant) -> Q -> DQ -> Relu``: OpenVINO 2026.4's CPU
    plugin segfaults compiling it as written (tail Mul, Add, Sub or BatchNormalization)."""
    channels = 96
    init = {"s": np.float32(0.0064), "z": np.uint8(50), "s2": np.float32(0.007), "z2": np.uint8(62),
            "k": np.linspace(0.5, 1.5, channels, dtype=np.float32).reshape(1, channels, 1, 1)}
    if per_channel_q:
        init["s"] = np.full(channels, 0.0064, np.float32)
        init["z"] = np.full(channels, 50, np.uint8)
    nodes = [helper.make_node("Concat", ["a", "b"], ["cat"], name="concat", axis=1),
             helper.make_node("QuantizeLinear", ["cat", "s", "z"], ["cat_q"], name="q1", axis=1),
             helper.make_node("DequantizeLinear", ["cat_q", "s", "z"], ["cat_d"], name="dq1", axis=1)]
    if tail == "BatchNormalization":
        init.update(scale=np.linspace(0.5, 1.5, channels, dtype=np.float32), bias=np.zeros(channels, np.float32),
                    mean=np.full(channels, 0.1, np.float32), var=np.ones(channels, np.float32))
        nodes.append(helper.make_node(tail, ["cat_d", "scale", "bias", "mean", "var"], ["m"], name="tail"))
    else:
        nodes.append(helper.make_node(tail, ["cat_d", "k"], ["m"], name="tail"))
    nodes += [helper.make_node("QuantizeLinear", ["m", "s2", "z2"], ["m_q"], name="q2"),
              helper.make_node("DequantizeLinear", ["m_q", "s2", "z2"], ["m_d"], name="dq2"),
              helper.make_node("Relu", ["m_d"], ["y"], name="relu")]
    outputs = [("y", TensorProto.FLOAT, [1, channels, 8, 8])]
    if concat_read_twice:
        nodes.append(helper.make_node("Relu", ["cat"], ["side"], name="side"))
        outputs.append(("side", TensorProto.FLOAT, [1, channels, 8, 8]))
    return make_model(nodes, [("a", TensorProto.FLOAT, [1, 64, 8, 8]), ("b", TensorProto.FLOAT, [1, 32, 8, 8])],
                      outputs, init, opset=13)


def _value_shapes(model: onnx.ModelProto):
    table = {t.name: tuple(t.dims) for t in model.graph.initializer}
    return _shapes(table)


def test_quantize_of_concat_becomes_concat_of_quantized_parts_with_the_same_codes(rng):
    import onnxruntime as ort

    model = _concat_qdq_model()
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert apply_rewrites(rewritten, _value_shapes(rewritten)) == 1
    ops = [n.op_type for n in rewritten.graph.node]
    assert ops[:3] == ["QuantizeLinear", "QuantizeLinear", "Concat"] and ops.count("Concat") == 1
    onnx.checker.check_model(rewritten, full_check=True)
    feeds = {"a": (rng.standard_normal((1, 64, 8, 8)) * 0.5).astype(np.float32),
             "b": (rng.standard_normal((1, 32, 8, 8)) * 0.5).astype(np.float32)}
    before = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    after = ort.InferenceSession(rewritten.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_array_equal(after, before)


@pytest.mark.parametrize("variant", [{"per_channel_q": True}, {"concat_read_twice": True}],
                         ids=["per-channel-q", "concat-read-elsewhere"])
def test_quantize_of_concat_is_left_alone_when_not_a_per_tensor_sole_reader(variant):
    model = _concat_qdq_model(**variant)
    assert apply_rewrites(model, _value_shapes(model)) == 0
    assert [n.op_type for n in model.graph.node][:2] == ["Concat", "QuantizeLinear"]


_CRASH_CHECK = """
import sys, numpy as np, onnx, epoxy
model = onnx.load(sys.argv[1])
rng = np.random.default_rng(0)
feeds = {"a": rng.standard_normal((1, 64, 8, 8)).astype(np.float32),
         "b": rng.standard_normal((1, 32, 8, 8)).astype(np.float32)}
sess = epoxy.InferenceSession(model.SerializeToString(), providers=[("openvino", {"min_group_cost": 0}), "cpu"])
summary = sess.partition_report().summary()
assert set(summary) == {"openvino"}, summary
y = sess.run(None, feeds)[0]
ref = epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"]).run(None, feeds)[0]
step = 0.007
assert np.abs(y - ref).max() <= step * 1.01, np.abs(y - ref).max()
print("ran")
"""


@pytest.mark.parametrize("tail", ["Mul", "Add", "Sub", "BatchNormalization"])
def test_openvino_compiles_a_quantized_concat_before_an_affine_op(tail, tmp_path):
    """In a child process: the unrewritten group kills its process with SIGSEGV."""
    import subprocess
    import sys

    path = tmp_path / "m.onnx"
    onnx.save(_concat_qdq_model(tail), str(path))
    done = subprocess.run([sys.executable, "-c", _CRASH_CHECK, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "ran" in done.stdout, (done.returncode, done.stderr[-2000:])
