"""``QDQConvToQLinearPass`` (optimize/passes/qdq_qlinear.py): which QDQ convolutions become
QLinearConv (+ Max for a Relu), checked against onnx.reference on the graph before and after:
the output codes agree within one step (where the int8 rounding of the exact sums and of the
float32 convolution fall apart), most of them exactly."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _pass_run import rewrite
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from epoxy.optimize.passes import qdq_qlinear
from epoxy.optimize.passes.qdq_qlinear import QDQConvToQLinearPass

RNG = np.random.default_rng(0)


@pytest.fixture
def any_size(monkeypatch):
    """The 8 -> 6 channel layer here counts as large enough (MIN_MACS, MIN_CHANNELS)."""
    monkeypatch.setattr(qdq_qlinear, "MIN_MACS", 0)
    monkeypatch.setattr(qdq_qlinear, "MIN_CHANNELS", 0)
    monkeypatch.setattr(qdq_qlinear, "TAKE_GROUPED", True)


def _model(*, relu: bool = True, bias: str = "exact", per_channel: bool = True, x_dtype=np.uint8,
           extra_reader: bool = False, y_zp: int | None = None) -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv(DQ(W), DQ(B)) [-> Relu] -> Q -> DQ -> y (3x3, 8 -> 6 channels)."""
    m = 6
    w = RNG.integers(-127, 128, (m, 8, 3, 3)).astype(np.int8)
    ws = (RNG.uniform(0.002, 0.01, m) if per_channel else np.array(0.005)).astype(np.float32)
    xs, x_zp = np.float32(0.04), np.array(128 if x_dtype == np.uint8 else 0, x_dtype)
    inits = {"xs": np.array(xs), "xz": x_zp, "w": w, "ws": ws, "wz": np.zeros(ws.shape, np.int8),
             "ys": np.array(np.float32(0.3)), "yz": np.array((5 if relu else 128) if y_zp is None else y_zp, np.uint8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0)]
    conv_in = ["xd", "wd"]
    if bias != "none":
        bs = (xs * ws).astype(np.float32) if bias == "exact" else (xs * ws * 1.5).astype(np.float32)
        inits.update(b=RNG.integers(-2000, 2000, m).astype(np.int32), bs=bs, bz=np.zeros(bs.shape, np.int32))
        nodes.append(helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"], axis=0))
        conv_in.append("bd")
    nodes.append(helper.make_node("Conv", conv_in, ["c"], pads=[1, 1, 1, 1]))
    pre_q = "c"
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
        pre_q = "r"
    nodes += [helper.make_node("QuantizeLinear", [pre_q, "ys", "yz"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 7, 9])]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 6, 7, 9]))
    graph = helper.make_graph(nodes, "qdq_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 7, 9])],
                              outputs, [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def _rewrite(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    return rewrite(QDQConvToQLinearPass(), model)


@pytest.mark.parametrize("relu", [True, False], ids=["relu", "plain"])
@pytest.mark.parametrize("bias", ["exact", "none"])
@pytest.mark.parametrize("per_channel", [True, False], ids=["per-channel", "per-tensor"])
@pytest.mark.parametrize("x_dtype", [np.uint8, np.int8])
def test_rewritten_convolutions_keep_their_codes_within_one_step(any_size, relu, bias, per_channel, x_dtype):
    model = _model(relu=relu, bias=bias, per_channel=per_channel, x_dtype=x_dtype)
    rewritten, count = _rewrite(model)
    assert count == 1
    ops = [n.op_type for n in rewritten.graph.node]
    assert ops == ["QuantizeLinear", "QLinearConv"] + (["Max"] if relu else []) + ["DequantizeLinear"]
    onnx.checker.check_model(rewritten)
    x = {"x": (RNG.standard_normal((2, 8, 7, 9)) * 2).astype(np.float32)}
    want = ReferenceEvaluator(model).run(None, x)[0]
    got = ReferenceEvaluator(rewritten).run(None, x)[0]
    step = 0.3
    assert np.abs(got - want).max() <= step * 1.0001
    assert np.mean(got == want) > 0.9  # the rounding differs only near half steps
    if relu:
        assert (got >= 0).all()


def test_a_relu_above_the_lowest_code_needs_no_max(any_size):
    """A range calibrated after the Relu starts at 0 (uint8 zero point 0): no code lies below
    the zero point, so the Relu on the codes is nothing; the values stay those of the graph."""
    model = _model(relu=True, y_zp=0)
    rewritten, count = _rewrite(model)
    assert count == 1
    assert [n.op_type for n in rewritten.graph.node] == ["QuantizeLinear", "QLinearConv", "DequantizeLinear"]
    x = {"x": (RNG.standard_normal((2, 8, 7, 9)) * 2).astype(np.float32)}
    want = ReferenceEvaluator(model).run(None, x)[0]
    got = ReferenceEvaluator(rewritten).run(None, x)[0]
    assert np.abs(got - want).max() <= 0.3 * 1.0001 and np.mean(got == want) > 0.9
    assert (got >= 0).all() and (want == 0).any()  # the Relu did cut values


@pytest.mark.parametrize(("case", "kwargs"), [
    ("bias scale is not x_scale * w_scale", {"bias": "other-scale"}),
    ("the float Conv output is also a graph output", {"extra_reader": True}),
])
def test_convolutions_that_do_not_fit_stay_as_written(any_size, case, kwargs):
    model = _model(**kwargs)
    rewritten, count = _rewrite(model)
    assert count == 0, case
    assert [n.op_type for n in rewritten.graph.node] == [n.op_type for n in model.graph.node]


def test_small_layers_keep_the_float_reading():
    """Below MIN_MACS per image (or MIN_CHANNELS inputs) the float kernels are faster: no rewrite."""
    rewritten, count = _rewrite(_model())
    assert count == 0 and "QLinearConv" not in [n.op_type for n in rewritten.graph.node]


def test_few_channel_layers_need_a_wide_receptive_field():
    """A 3-channel stem is taken when one output pixel reads MIN_FIELD codes or more (7x7: 147),
    or as a 3x3 (27) with 32 output channels or more, not with 24: measured faster and slower
    on codes respectively (qdq_qlinear.MIN_FIELD, MIN_NARROW_FIELD, MIN_NARROW_OUTPUTS)."""

    class _Output:
        shape = (1, 64, 112, 112)

    class _Conv:
        outputs = [_Output()]
        attributes: dict = {}

    assert qdq_qlinear.large_enough(_Conv(), np.zeros((64, 3, 7, 7), np.int8))  # type: ignore[arg-type]
    assert qdq_qlinear.large_enough(_Conv(), np.zeros((64, 3, 3, 3), np.int8))  # type: ignore[arg-type]
    assert not qdq_qlinear.large_enough(_Conv(), np.zeros((24, 3, 3, 3), np.int8))  # type: ignore[arg-type]
    assert not qdq_qlinear.large_enough(_Conv(), np.zeros((64, 2, 3, 3), np.int8))  # type: ignore[arg-type]
    assert qdq_qlinear.large_enough(_Conv(), np.zeros((64, 16, 1, 1), np.int8))  # type: ignore[arg-type]


def test_grouped_layers_are_taken_on_the_group_thresholds():
    """QLinearConv takes grouped layers (the cpu provider runs one GEMM per group) on the same
    thresholds, channels counted per group; ConvInteger's rewrite (no grouped kernel) does not."""
    import onnx_ir as ir

    class _Output:
        shape = (1, 272, 14, 14)

    class _Conv:
        outputs = [_Output()]
        attributes = {"group": ir.AttrInt64("group", 4)}

    shufflenet = np.zeros((272, 68, 1, 1), np.int8)  # 3.6 M multiply-adds, 68 channels a group
    assert qdq_qlinear.large_enough(_Conv(), shufflenet, depthwise=True, grouped=True)  # type: ignore[arg-type]
    assert not qdq_qlinear.large_enough(_Conv(), shufflenet)  # type: ignore[arg-type]
    few = np.zeros((272, 6, 1, 1), np.int8)  # 6 channels a group, a 6-code receptive field
    assert not qdq_qlinear.large_enough(_Conv(), few, depthwise=True, grouped=True)  # type: ignore[arg-type]


def _with_clip(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model's Relu replaced by Clip(0, 6) (ReLU6), bounds as constant inputs."""
    relu = next(n for n in model.graph.node if n.op_type == "Relu")
    model.graph.initializer.extend([numpy_helper.from_array(np.array(0, np.float32), "lo"),
                                    numpy_helper.from_array(np.array(6, np.float32), "hi")])
    clip = helper.make_node("Clip", [relu.input[0], "lo", "hi"], list(relu.output), name="relu6")
    model.graph.node.insert(list(model.graph.node).index(relu), clip)
    model.graph.node.remove(relu)
    return model


def test_a_clip_becomes_max_and_min_on_the_codes(any_size):
    """ReLU6 between the Conv and the Q: Q(clip(y, 0, 6)) = clip(Q(y), Q(0), Q(6)), an integer
    Max and Min on QLinearConv's codes (here y_zp 5 and Q(6) = 25 are inside the codes' range);
    the values stay those of the graph within a step, and the clip does cut."""
    model = _with_clip(_model(relu=True))
    rewritten, count = _rewrite(model)
    assert count == 1
    ops = [n.op_type for n in rewritten.graph.node]
    assert ops == ["QuantizeLinear", "QLinearConv", "Max", "Min", "DequantizeLinear"], ops
    x = {"x": (RNG.standard_normal((2, 8, 7, 9)) * 4).astype(np.float32)}
    want = ReferenceEvaluator(model).run(None, x)[0]
    got = ReferenceEvaluator(rewritten).run(None, x)[0]
    assert np.abs(got - want).max() <= 0.3 * 1.0001 and np.mean(got == want) > 0.9
    assert got.max() <= 6.0 and (want == 6.0).any() and got.min() >= 0.0


def test_a_relu6_over_the_calibrated_range_needs_nothing(any_size):
    """y_zp 0 and Q(6) saturating at 255 (a range calibrated after the ReLU6): no Max, no Min."""
    model = _with_clip(_model(relu=True, y_zp=0))
    scale = next(i for i in model.graph.initializer if i.name == "ys")
    scale.CopyFrom(numpy_helper.from_array(np.array(6 / 255, np.float32), "ys"))
    rewritten, count = _rewrite(model)
    assert count == 1
    assert [n.op_type for n in rewritten.graph.node] == ["QuantizeLinear", "QLinearConv", "DequantizeLinear"]


def test_a_clip_with_a_computed_bound_is_left_alone(any_size):
    model = _with_clip(_model(relu=True))
    hi = next(i for i in model.graph.initializer if i.name == "hi")
    model.graph.initializer.remove(hi)
    model.graph.input.append(helper.make_tensor_value_info("hi", TensorProto.FLOAT, []))
    _, count = _rewrite(model)
    assert count == 0
