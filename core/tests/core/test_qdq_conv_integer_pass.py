"""``QDQConvToIntegerPass`` (optimize/passes/qdq_conv_integer.py): a QDQ convolution whose output
is read as float (a residual sum, a head) becomes ``ConvInteger -> Cast -> Mul(x_scale *
W_scale) [-> Add(bias)]``; checked against onnx.reference on the graph before and after (the
rewritten sum is exact and scaled once, so the outputs agree within float32 rounding of the
float reading's sums), and on which layers it leaves alone."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _pass_run import rewrite
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from epoxy.optimize.passes import qdq_qlinear
from epoxy.optimize.passes.qdq_conv_integer import QDQConvToIntegerPass

C, M, HW = 8, 6, 7


@pytest.fixture
def any_size(monkeypatch):
    """The small layers here count as large enough (qdq_qlinear.MIN_MACS / MIN_CHANNELS)."""
    monkeypatch.setattr(qdq_qlinear, "MIN_MACS", 0)
    monkeypatch.setattr(qdq_qlinear, "MIN_CHANNELS", 1)
    monkeypatch.setattr(qdq_qlinear, "TAKE_GROUPED", True)


def _model(*, per_channel: bool = True, x_dtype=np.uint8, bias: str = "float", group: int = 1,
           quantized_output: bool = False, extra_reader: bool = False, seed: int = 0) -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv(DQ(W) [, bias]) -> Relu -> y, weights s8 per output channel or per tensor;
    with ``quantized_output`` the Conv's output goes through Q -> DQ (QLinearConv's pattern)."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-127, 128, (M, C // group, 3, 3)).astype(np.int8)
    ws = (rng.uniform(0.002, 0.01, M) if per_channel else np.array(0.005)).astype(np.float32)
    xs = np.array(np.float32(0.03))
    inits = {"xs": xs, "xz": np.array(100 if x_dtype == np.uint8 else 3, x_dtype), "w": w, "ws": ws,
             "wz": np.zeros(ws.shape, np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0)]
    conv_in = ["xd", "wd"]
    if bias == "float":
        inits["b"] = rng.standard_normal(M).astype(np.float32)
        conv_in.append("b")
    elif bias == "int32":
        inits.update(bq=rng.integers(-3000, 3000, M).astype(np.int32), bs=(xs * ws).astype(np.float32))
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "bs"], ["bd"], axis=0))
        conv_in.append("bd")
    nodes.append(helper.make_node("Conv", conv_in, ["c"], pads=[1, 1, 1, 1], group=group))
    read = "c"
    if quantized_output:
        inits.update(ys=np.array(np.float32(0.05)), yz=np.array(128, np.uint8))
        nodes += [helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"]),
                  helper.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["cd"])]
        read = "cd"
    nodes.append(helper.make_node("Relu", [read], ["y"]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, M, HW, HW])]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("xd", TensorProto.FLOAT, [2, C, HW, HW]))
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, C, HW, HW])
    initializers = [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()]
    graph = helper.make_graph(nodes, "qdq_conv", [x_info], outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def _rewrite(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    return rewrite(QDQConvToIntegerPass(), model)


def _feed(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, C, HW, HW)).astype(np.float32) * 2


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


@pytest.mark.usefixtures("any_size")
@pytest.mark.parametrize("per_channel", [True, False], ids=["per-channel", "per-tensor"])
@pytest.mark.parametrize("x_dtype", [np.uint8, np.int8], ids=["u8", "s8"])
@pytest.mark.parametrize("bias", ["float", "int32", "none"])
@pytest.mark.parametrize("group", [1, 2])
def test_float_read_conv_runs_on_codes(per_channel, x_dtype, bias, group):
    model = _model(per_channel=per_channel, x_dtype=x_dtype, bias=bias, group=group)
    out, count = _rewrite(model)
    assert count == 1
    ops = _ops(out)
    # the DQs only the Conv read go with it; x's QuantizeLinear stays (it makes the codes)
    tail = ["ConvInteger", "Cast", "Mul"] + (["Add"] if bias != "none" else []) + ["Relu"]
    assert ops == ["QuantizeLinear"] + tail
    x = _feed()
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = ReferenceEvaluator(out).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


@pytest.mark.usefixtures("any_size")
def test_exact_against_a_float64_product():
    """The chain's value is the exact integer sum times the float32 scale product."""
    model = _model(bias="none", per_channel=True)
    out, _ = _rewrite(model)
    x = _feed(2)
    (got,) = ReferenceEvaluator(out).run(None, {"x": x})
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    xs, xz = inits["xs"], inits["xz"]
    codes = np.clip(np.rint(x / xs) + xz.astype(np.float64), 0, 255) - float(xz)
    w = inits["w"].astype(np.float64)
    pad = np.pad(codes, ((0, 0), (0, 0), (1, 1), (1, 1)))
    sums = np.zeros((2, M, HW, HW))
    for i in range(3):
        for j in range(3):
            sums += np.einsum("nchw,mc->nmhw", pad[:, :, i:i + HW, j:j + HW], w[:, :, i, j])
    scale = (xs.astype(np.float32) * inits["ws"].astype(np.float32)).astype(np.float32).reshape(M, 1, 1)
    want = np.maximum((sums.astype(np.float32) * scale).astype(np.float32), 0)
    np.testing.assert_array_equal(got, want)


@pytest.mark.usefixtures("any_size")
def test_an_input_dq_another_node_reads_stays():
    out, count = _rewrite(_model(extra_reader=True))
    assert count == 1 and _ops(out).count("DequantizeLinear") == 1


def test_small_layers_keep_the_float_reading():
    """Below the int8 GEMM's MIN_MACS the float kernels are faster: no rewrite."""
    out, count = _rewrite(_model())
    assert count == 0 and "Conv" in _ops(out)


def test_grouped_layers_keep_the_float_reading_by_default(monkeypatch):
    """The cpu provider's int8 GEMM runs group-1 layers only: a grouped layer on codes would run
    its exact sums on the float path, slower than the float reading (qdq_qlinear.MIN_MACS)."""
    monkeypatch.setattr(qdq_qlinear, "MIN_MACS", 0)
    monkeypatch.setattr(qdq_qlinear, "MIN_CHANNELS", 1)
    _, count = _rewrite(_model(per_channel=True, x_dtype=np.uint8, bias="float", group=2))
    assert count == 0
    _, count = _rewrite(_model(per_channel=True, x_dtype=np.uint8, bias="float", group=1))
    assert count == 1
