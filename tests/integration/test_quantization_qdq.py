"""Static QDQ quantization (epoxy.quantization.qdq) on ep-cpu and onnxruntime.

Two small models with fixed seeds, a CNN (Conv+Relu+Conv+GlobalAveragePool+Gemm) and an MLP
(MatMul+Add+Relu+MatMul), calibrated on random batches and tested on a held-out batch: the QDQ
model passes the checker, runs on both runtimes with the same result, stays close to fp32,
and its error is of the same order as onnxruntime's own quantize_static (QDQ, MinMax, same
data), the peer.

Error bound vs fp32: relative L2 error <= 3 %. Why: a uint8 activation over a MinMax range
has step range/255 and rounding noise of RMS step/sqrt(12), about 0.1 % of the range; the
range of a Gaussian-like activation is 6-8 of its standard deviations, so each quantized
tensor adds roughly 0.5-1 % relative noise; three quantized activations plus int8 weights
(per-channel, 127 levels each) stay under 3 % (measured: 0.6 % CNN, 1.2 % MLP).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from epoxy.quantization import collect, schemes
from epoxy.quantization.qdq import DEFAULT_OP_TYPES, QuantizationError, quantize_static
from epoxy.session import InferenceSession
from epoxy_sdk.conformance.onnxruntime_oracle import reduce_range

# onnxruntime is the oracle here: where its uint8 x int8 products saturate (no VNNI), the
# models it runs get the 7-bit weights its documentation prescribes there (onnxruntime_oracle)
quantize_static = functools.partial(quantize_static, reduce_range=reduce_range())

ort = pytest.importorskip("onnxruntime")
ort_quant = pytest.importorskip("onnxruntime.quantization")

MAX_REL_ERROR = 0.03  # see the module docstring


def cnn(opset: int = 13, *, spread: bool = False, seed: int = 0) -> onnx.ModelProto:
    """Conv+Relu+Conv+GlobalAveragePool+Flatten+Gemm(transB). ``spread``: conv1's output
    channels scaled from 0.01x to 10x, where one scale per tensor must fail the small ones."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
    if spread:
        w1 *= (10.0 ** np.linspace(-2, 1, 8)).astype(np.float32)[:, None, None, None]
    inits = {"w1": w1, "b1": rng.normal(0, 0.1, 8), "w2": rng.normal(0, 0.2, (16, 8, 3, 3)),
             "b2": rng.normal(0, 0.1, 16), "wg": rng.normal(0, 0.3, (10, 16)), "bg": rng.normal(0, 0.1, 10)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c2"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], name="fc", transB=1)]
    return _model(nodes, inits, ["N", 3, 12, 12], opset)


def mlp(seed: int = 1) -> onnx.ModelProto:
    """MatMul+Add+Relu+MatMul."""
    rng = np.random.default_rng(seed)
    inits = {"w1": rng.normal(0, 0.2, (32, 64)), "b1": rng.normal(0, 0.1, 64), "w2": rng.normal(0, 0.2, (64, 10))}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
             helper.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
             helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
             helper.make_node("MatMul", ["r1", "w2"], ["y"], name="mm2")]
    return _model(nodes, inits, ["N", 32], 13)


def _model(nodes, inits, x_shape, opset, y_shape=("N", 10)) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


SHAPES = {"cnn": (4, 3, 12, 12), "mlp": (8, 32)}


def feeds(kind: str, seed: int, batches: int = 8) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(size=SHAPES[kind]).astype(np.float32)} for _ in range(batches)]


def run_ort(model: onnx.ModelProto, feed) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]


def run_epoxy(model: onnx.ModelProto, feed) -> np.ndarray:
    return np.asarray(InferenceSession(model, providers=["cpu"]).run(None, feed)[0])


def rel(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


def build(kind: str) -> onnx.ModelProto:
    return cnn() if kind == "cnn" else mlp()


@pytest.fixture(scope="module", params=["cnn", "mlp"])
def case(request):
    model = build(request.param)
    stats = collect(model, feeds(request.param, 0), providers=("cpu",))
    test = feeds(request.param, 99, 1)[0]
    return request.param, model, stats, test, run_ort(model, test)


def test_qdq_model_is_valid_and_runs_alike_on_both_runtimes(case):
    kind, model, stats, test, fp32 = case
    q = quantize_static(model, stats)
    onnx.checker.check_model(q, full_check=True)
    ours, theirs = run_epoxy(q, test), run_ort(q, test)
    # same float graph after DQ; onnxruntime may fuse DQ->MatMul into integer kernels: rounding only
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5 * float(np.abs(theirs).max()))
    assert rel(ours, fp32) <= MAX_REL_ERROR
    assert rel(ours, fp32) > 0  # it really was quantized


def test_every_quantized_node_reads_only_dequantized_inputs(case):
    kind, model, stats, _, _ = case
    q = quantize_static(model, stats)
    producers = {o: n for n in q.graph.node for o in n.output}
    quantized = [n for n in q.graph.node if n.op_type in ("Conv", "MatMul", "Gemm")]
    assert len(quantized) == (3 if kind == "cnn" else 2)
    for node in quantized:
        assert all(producers[i].op_type == "DequantizeLinear" for i in node.input if i), node.name


def test_weights_are_int8_initializers_per_channel(case):
    kind, model, stats, _, _ = case
    q = quantize_static(model, stats, reduce_range=False)  # the weights alone: no oracle runs them
    inits = {i.name: numpy_helper.to_array(i) for i in q.graph.initializer}
    float_weights = {i.name for i in model.graph.initializer if i.name.startswith("w")}
    assert not float_weights & set(inits), "float weights left behind"
    dqs = {n.input[0]: n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits}
    expected_axis = {"w1_quantized": 0, "w2_quantized": 0, "wg_quantized": 0} if kind == "cnn" else \
        {"w1_quantized": 1, "w2_quantized": 1}
    for name, axis in expected_axis.items():
        assert inits[name].dtype == np.int8
        attrs = {a.name: a.i for a in dqs[name].attribute}
        assert attrs.get("axis") == axis, name
        assert inits[dqs[name].input[1]].shape == (inits[name].shape[axis],)
        assert np.abs(inits[name]).max() == 127  # symmetric: each channel's largest weight uses the full range
    if kind == "cnn":  # biases: int32 on input_scale * weight_scale
        for b, w, x in (("b1", "w1", "x"), ("b2", "w2", "r1")):
            assert inits[f"{b}_quantized"].dtype == np.int32
            np.testing.assert_allclose(inits[f"{b}_scale"], inits[f"{x}_scale"] * inits[f"{w}_scale"], rtol=1e-6)
    assert max(i.version for i in q.opset_import if i.domain == "") >= 13


def test_one_qdq_pair_per_activation_shared_by_consumers():
    rng = np.random.default_rng(3)
    inits = {"wa": rng.normal(size=(16, 8)), "wb": rng.normal(size=(16, 4))}
    nodes = [helper.make_node("MatMul", ["x", "wa"], ["ya"], name="a"),
             helper.make_node("MatMul", ["x", "wb"], ["yb"], name="b"),
             helper.make_node("Concat", ["ya", "yb"], ["y"], name="cat", axis=1)]
    model = _model(nodes, inits, ["N", 16], 13, ["N", 12])
    calib = [{"x": rng.normal(size=(4, 16)).astype(np.float32)} for _ in range(3)]
    q = quantize_static(model, calib)
    quantize_nodes = [n for n in q.graph.node if n.op_type == "QuantizeLinear"]
    assert [n.input[0] for n in quantize_nodes] == ["x"]
    a, b = (n for n in q.graph.node if n.op_type == "MatMul")
    assert a.input[0] == b.input[0]
    np.testing.assert_allclose(run_epoxy(q, calib[0]), run_ort(q, calib[0]), rtol=1e-4, atol=1e-4)


def test_per_channel_beats_per_tensor_on_spread_channels():
    # conv1 alone, output channels weighted from 0.01x to 10x: one scale per tensor rounds the
    # small channels' weights to (nearly) zero; the worst channel's error shows it
    full = cnn(spread=True)
    conv1 = full.graph.node[0]
    inits = {i.name: numpy_helper.to_array(i) for i in full.graph.initializer if i.name in ("w1", "b1")}
    model = _model([helper.make_node("Conv", ["x", "w1", "b1"], ["y"], name="conv1", pads=[1, 1, 1, 1])],
                   inits, ["N", 3, 12, 12], 13, ["N", 8, 12, 12])
    assert conv1.name == "conv1"
    calib, test = feeds("cnn", 0), feeds("cnn", 99, 1)[0]
    fp32 = run_ort(model, test)

    def worst_channel(per_channel: bool) -> float:
        out = run_epoxy(quantize_static(model, calib, per_channel=per_channel), test)
        return max(rel(out[:, c], fp32[:, c]) for c in range(fp32.shape[1]))

    per_channel, per_tensor = worst_channel(True), worst_channel(False)
    assert per_channel <= MAX_REL_ERROR
    assert per_channel * 10 < per_tensor, (per_channel, per_tensor)


def test_excluded_nodes_stay_float():
    model = cnn()
    q = quantize_static(model, feeds("cnn", 0), nodes_to_exclude=["fc"])
    fc = next(n for n in q.graph.node if n.name == "fc")
    assert list(fc.input) == ["f", "wg", "bg"]
    inits = {i.name: i for i in q.graph.initializer}
    assert inits["wg"].data_type == TensorProto.FLOAT and "wg_quantized" not in inits
    assert not [n for n in q.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "f"]
    test = feeds("cnn", 99, 1)[0]
    np.testing.assert_allclose(run_epoxy(q, test), run_ort(q, test), rtol=1e-4, atol=1e-5)


def test_unknown_excluded_node_is_refused():
    with pytest.raises(ValueError, match="fcc"):
        quantize_static(cnn(), feeds("cnn", 0, 1), nodes_to_exclude=["fcc"])


def test_int8_activations_and_per_tensor_run_on_both():
    model = cnn()
    test = feeds("cnn", 99, 1)[0]
    q = quantize_static(model, feeds("cnn", 0), activation_dtype="int8", per_channel=False, reduce_range=True)
    assert {numpy_helper.to_array(i).dtype for i in q.graph.initializer if i.name.endswith("zero_point")} \
        >= {np.dtype(np.int8)}
    ours = run_epoxy(q, test)
    np.testing.assert_allclose(ours, run_ort(q, test), rtol=1e-4, atol=1e-5 * float(np.abs(ours).max()))
    assert rel(ours, run_ort(model, test)) <= 2 * MAX_REL_ERROR  # 7-bit, per-tensor weights: coarser


def test_opset_11_model_is_raised_to_13_and_agrees():
    model = cnn(opset=11)
    q = quantize_static(model, feeds("cnn", 0))
    assert next(i.version for i in q.opset_import if i.domain == "") == 13
    test = feeds("cnn", 99, 1)[0]
    assert rel(run_epoxy(q, test), run_ort(model, test)) <= MAX_REL_ERROR
    assert run_ort(q, test).shape == (4, 10)


def test_opset_that_cannot_be_raised_is_refused_naming_why(monkeypatch):
    def broken(model, target):
        raise RuntimeError("No adapter for Gemm")

    monkeypatch.setattr(onnx.version_converter, "convert_version", broken)
    with pytest.raises(QuantizationError, match=r"per-channel.*opset 13.*Gemm \(opset 11 -> 13\)"):
        quantize_static(cnn(opset=11), feeds("cnn", 0, 1))
    # per tensor needs only opset 10: the model keeps its opset 11
    q = quantize_static(cnn(opset=11), feeds("cnn", 0, 1), per_channel=False)
    assert next(i.version for i in q.opset_import if i.domain == "") == 11


def test_missing_calibration_range_names_the_node():
    model = cnn()
    stats = collect(model, feeds("cnn", 0, 1), tensors=["x", "f"], providers=("cpu",))
    with pytest.raises(QuantizationError, match="conv2.*'r1'") as info:
        quantize_static(model, stats)
    assert info.value.node == "conv2" and info.value.op_type == "Conv"


class _Reader:
    """onnxruntime's CalibrationDataReader protocol over a list of feeds."""

    def __init__(self, batches):
        self._it = iter(batches)

    def get_next(self):
        return next(self._it, None)


@pytest.mark.parametrize("kind", ["cnn", "mlp"])
def test_error_same_order_as_onnxruntime_quantize_static(kind, tmp_path):
    model = build(kind)
    calib, test = feeds(kind, 0), feeds(kind, 99, 1)[0]
    fp32 = run_ort(model, test)
    src, dst = tmp_path / "fp32.onnx", tmp_path / "ort_qdq.onnx"
    onnx.save(model, src)
    ort_quant.quantize_static(
        str(src), str(dst), _Reader(calib), quant_format=ort_quant.QuantFormat.QDQ,
        op_types_to_quantize=["Conv", "MatMul", "Gemm"], per_channel=True,
        activation_type=ort_quant.QuantType.QUInt8, weight_type=ort_quant.QuantType.QInt8,
        calibrate_method=ort_quant.CalibrationMethod.MinMax, reduce_range=reduce_range())
    theirs = rel(run_ort(onnx.load(dst), test), fp32)
    ours = rel(run_epoxy(quantize_static(model, calib), test), fp32)
    assert theirs / 3 <= ours <= theirs * 3, (ours, theirs)


# -- the int8 chain beyond Conv/MatMul/Gemm (OpenVINO's default op set) ------------------------

def _conv(name: str, src: str, dst: str, cin: int, cout: int, rng, inits: dict) -> onnx.NodeProto:
    inits[f"{name}_w"] = rng.normal(0, np.sqrt(2.0 / (cin * 9)), (cout, cin, 3, 3))
    inits[f"{name}_b"] = rng.normal(0, 0.1, cout)
    return helper.make_node("Conv", [src, f"{name}_w", f"{name}_b"], [dst], name=name, pads=[1, 1, 1, 1])


def _middle(family: str, rng, inits: dict) -> tuple[list[onnx.NodeProto], int]:
    """Nodes from ``c1`` (conv1's output, 8 channels 12x12) to ``m`` (into conv2), and m's channels."""
    ints = lambda name, *v: inits.__setitem__(name, np.array(v, np.int64))  # noqa: E731
    if family == "relu":
        return [helper.make_node("Relu", ["c1"], ["m"], name="mid")], 8
    if family == "clip":
        inits["lo"], inits["hi"] = np.float32(0.0), np.float32(0.5)
        return [helper.make_node("Clip", ["c1", "lo", "hi"], ["m"], name="mid")], 8
    if family == "maxpool":
        return [helper.make_node("MaxPool", ["c1"], ["m"], name="mid", kernel_shape=[2, 2], strides=[2, 2])], 8
    if family == "averagepool":
        return [helper.make_node("AveragePool", ["c1"], ["m"], name="mid", kernel_shape=[2, 2], strides=[2, 2])], 8
    if family == "add":  # residual: conv1b(c1) + c1
        return [_conv("conv1b", "c1", "c1b", 8, 8, rng, inits),
                helper.make_node("Add", ["c1b", "c1"], ["m"], name="mid")], 8
    if family == "mul":
        inits["k"] = rng.uniform(0.5, 2.0, (8, 1, 1))
        return [helper.make_node("Mul", ["c1", "k"], ["m"], name="mid")], 8
    if family == "concat":
        return [_conv("conv1b", "x", "c1b", 3, 4, rng, inits),
                helper.make_node("Concat", ["c1", "c1b"], ["m"], name="mid", axis=1)], 12
    if family == "reshape":
        ints("shape", 0, 8, 144)
        ints("back", 0, 8, 12, 12)
        return [helper.make_node("Reshape", ["c1", "shape"], ["r"], name="mid"),
                helper.make_node("Reshape", ["r", "back"], ["m"], name="mid2")], 8
    if family == "transpose":
        return [helper.make_node("Transpose", ["c1"], ["m"], name="mid", perm=[0, 1, 3, 2])], 8
    if family == "squeeze":
        ints("axes", 2)
        return [helper.make_node("Unsqueeze", ["c1", "axes"], ["u"], name="mid"),
                helper.make_node("Squeeze", ["u", "axes"], ["m"], name="mid2")], 8
    if family == "resize":
        inits["scales"] = np.array([1, 1, 2, 2], np.float32)
        return [helper.make_node("Resize", ["c1", "", "scales"], ["m"], name="mid", mode="nearest")], 8
    raise AssertionError(family)


FAMILIES = ("relu", "clip", "maxpool", "averagepool", "add", "mul", "concat", "reshape", "transpose", "squeeze",
            "resize")


def family_model(family: str, seed: int = 5) -> onnx.ModelProto:
    """conv1 -> ``family`` -> conv2 -> GlobalAveragePool -> Flatten -> Gemm: the family's op
    sits between two quantized ops, so the chain through it can stay int8."""
    rng = np.random.default_rng(seed)
    inits: dict = {}
    nodes = [_conv("conv1", "x", "c1", 3, 8, rng, inits)]
    middle, channels = _middle(family, rng, inits)
    nodes += middle
    nodes += [_conv("conv2", "m", "c2", channels, 16, rng, inits),
              helper.make_node("GlobalAveragePool", ["c2"], ["g"], name="gap"),
              helper.make_node("Flatten", ["g"], ["f"], name="flatten")]
    inits["wg"], inits["bg"] = rng.normal(0, 0.3, (10, 16)), rng.normal(0, 0.1, 10)
    nodes.append(helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], name="fc", transB=1))
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(v if isinstance(v, np.ndarray) and v.dtype == np.int64 else
                                 np.asarray(v, np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    model = family_model(request.param)
    stats = collect(model, feeds("cnn", 0), providers=("cpu",))
    test = feeds("cnn", 99, 1)[0]
    return request.param, model, stats, test, run_ort(model, test)


def _producers(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {o: n for n in model.graph.node for o in n.output}


def _readers(model: onnx.ModelProto, name: str) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if name in n.input]


def _params(model: onnx.ModelProto, node: onnx.NodeProto) -> tuple[float, int]:
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return float(inits[node.input[1]]), int(inits[node.input[2]])


@pytest.mark.parametrize("providers", [("openvino", "cpu"), ("cpu",)], ids=["openvino", "cpu"])
def test_default_keeps_the_chain_int8_through_each_op_family(family, providers):
    """OpenVINO's and (since the cpu provider runs adds, pools, concats and activations on codes)
    the cpu provider's default op set: the whole int8 chain."""
    kind, model, stats, test, fp32 = family
    q = quantize_static(model, stats, providers=providers)
    producers = _producers(q)
    middle = [n for n in q.graph.node if n.name.startswith("mid")]
    # every op of the family but a folded activation reads only dequantized tensors
    for node in middle:
        data = node.input if node.op_type in ("Add", "Mul", "Concat") else node.input[:1]
        inputs = [producers.get(i) for i in data if i and i not in {t.name for t in q.graph.initializer}]
        if node.op_type in ("Relu", "Clip"):  # folded into conv1's output range: no Q/DQ between them
            assert [p.op_type for p in inputs] == ["Conv"], node.name
        else:
            assert inputs and all(p.op_type == "DequantizeLinear" for p in inputs), (node.name, inputs)
    # every quantized op's output that a quantized op reads goes through Q then DQ
    for node in q.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") or node.name in ("fc",):
            continue
        readers = _readers(q, node.output[0])
        if node.op_type == "Conv" and [r.op_type for r in readers] in (["Relu"], ["Clip"]):
            readers = _readers(q, readers[0].output[0])
        assert [r.op_type for r in readers] == ["QuantizeLinear"], (node.name, [r.op_type for r in readers])
        assert all(r.op_type == "DequantizeLinear" for r in _readers(q, readers[0].output[0])), node.name
    # ops that only move values reuse their input's scale and zero point
    for node in middle:
        if node.op_type in ("MaxPool", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Resize"):
            (q_out,) = _readers(q, node.output[0])
            assert _params(q, q_out) == _params(q, producers[node.input[0]]), node.name
    ours, theirs = run_epoxy(q, test), run_ort(q, test)
    np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=1e-4 * float(np.abs(theirs).max()))
    assert 0 < rel(ours, fp32) <= MAX_REL_ERROR, rel(ours, fp32)


def test_the_weighted_op_set_leaves_the_family_op_float(family):
    kind, model, stats, test, fp32 = family
    q = quantize_static(model, stats, op_types=DEFAULT_OP_TYPES)  # Conv/MatMul/Gemm only
    producers = _producers(q)
    for node in (n for n in q.graph.node if n.name.startswith("mid")):
        assert all(producers.get(i) is None or producers[i].op_type != "DequantizeLinear" for i in node.input), \
            node.name
    assert rel(run_epoxy(q, test), fp32) <= MAX_REL_ERROR


def test_op_types_and_exclusions_cut_the_chain():
    model = family_model("add")
    stats = collect(model, feeds("cnn", 0, 2), providers=("cpu",))
    only_add = quantize_static(model, stats, op_types=("Add",))
    assert not [n for n in only_add.graph.node if n.op_type == "QuantizeLinear"]  # no quantized neighbour
    excluded = quantize_static(model, stats, providers=("openvino",), nodes_to_exclude=["mid"])
    add = next(n for n in excluded.graph.node if n.name == "mid")
    assert list(add.input) == ["c1b", "c1"]


def test_unknown_op_type_is_refused_naming_it():
    with pytest.raises(ValueError, match="Softmaxx.*known: Conv"):
        quantize_static(cnn(), feeds("cnn", 0, 1), op_types=("Conv", "Softmaxx"))


def test_chain_op_without_calibration_range_names_the_node():
    model = family_model("add")
    stats = collect(model, feeds("cnn", 0, 1), tensors=["x", "c1", "m", "c2", "g", "f"], providers=("cpu",))
    with pytest.raises(QuantizationError, match="'mid'.*'c1b'") as info:
        quantize_static(model, stats, providers=("openvino",))
    assert info.value.node == "mid" and info.value.op_type == "Add"


#: family -> the OpenVINO layer type its op becomes
OPENVINO_LAYER = {"add": "Eltwise", "resize": "Interpolate", "averagepool": "Pooling", "maxpool": "Pooling"}


@pytest.mark.parametrize("kind", sorted(OPENVINO_LAYER))
def test_on_openvino_the_family_op_runs_int8_only_with_its_op_set(kind):
    ov = pytest.importorskip("epoxy_ep_openvino")
    model = family_model(kind)
    stats = collect(model, feeds("cnn", 0, 2), providers=("cpu",))
    test = feeds("cnn", 99, 1)[0]

    # without VNNI, OpenVINO's int8 convolutions halve their weights' scale (oneDNN's guard against
    # the int16 saturation of u8*s8 pairs): one bit coarser than onnxruntime's run of the same codes
    tolerance = 1e-3 if schemes.vnni(schemes.cpu_features()) else 1e-2

    def layers(**options: Any) -> dict[tuple[str, str], int]:
        q = quantize_static(model, stats, **options)
        session = InferenceSession(q, providers=["openvino", "cpu"])
        out = np.asarray(session.run(None, test)[0])
        np.testing.assert_allclose(out, run_ort(q, test), rtol=tolerance, atol=tolerance * float(np.abs(out).max()))
        return ov.layer_precisions(session)

    def int8(counts: dict[tuple[str, str], int], layer: str | None = None) -> int:
        return sum(n for (kind_, p), n in counts.items() if p in ("u8", "i8") and layer in (None, kind_))

    narrow, wide = layers(op_types=DEFAULT_OP_TYPES), layers(providers=("openvino",))
    assert int8(wide) > int8(narrow), (narrow, wide)
    assert int8(wide, OPENVINO_LAYER[kind]) > int8(narrow, OPENVINO_LAYER[kind]), (narrow, wide)


def test_concat_of_inputs_with_one_scale_reuses_it():
    model = family_model("concat")
    cat = next(n for n in model.graph.node if n.name == "mid")
    cat.input[1] = "c1"  # Concat(c1, c1): both inputs carry c1's scale, so the output keeps it
    conv2 = next(n for n in model.graph.node if n.name == "conv2")
    inits = {i.name: i for i in model.graph.initializer}
    w = numpy_helper.to_array(inits["conv2_w"])[:, :8]
    inits["conv2_w"].CopyFrom(numpy_helper.from_array(np.concatenate([w, w], axis=1), "conv2_w"))
    model.graph.node.remove(next(n for n in model.graph.node if n.name == "conv1b"))
    # no statistics for the Concat's output "m" (nor Flatten's "f"): a calibrated scale would fail
    stats = collect(model, feeds("cnn", 0, 2), tensors=["x", "c1", "c2", "g"], providers=("cpu",))
    q = quantize_static(model, stats, providers=("openvino",))
    producers = _producers(q)
    cat = next(n for n in q.graph.node if n.name == "mid")
    (q_out,) = _readers(q, cat.output[0])
    assert _params(q, q_out) == _params(q, producers[cat.input[0]])
    assert conv2.name == "conv2"
    test = feeds("cnn", 99, 1)[0]
    assert rel(run_epoxy(q, test), run_ort(model, test)) <= MAX_REL_ERROR
