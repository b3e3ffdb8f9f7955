"""Dynamic int8 quantization (epoxy.quantization.dynamic) on ep-cpu and onnxruntime.

Three small models with fixed seeds: an MLP (MatMul+Add+Relu+MatMul), a Gemm with transB=1,
alpha, beta and a bias, and a BERT-like block (Q/K/V projections, attention MatMuls whose
second input is computed, output projection, residual, feed-forward). Both formats pass the
checker, run on both runtimes, agree with each other, stay close to fp32, and land at the
error of onnxruntime's own ``quantize_dynamic`` (the peer, same model and input).

Error bound vs fp32: relative L2 error <= 3 %. Why: each quantized MatMul sees a uint8
activation over that run's own [min, max] (step range/255, rounding noise RMS step/sqrt(12),
about 0.1 % of the range, 0.5-1 % of a Gaussian-like tensor's RMS) times int8 weights per
channel (127 levels each side, about 0.3 % more); two to six chained products stay under 3 %
(measured 1.0-1.5 %). format="qdq" keeps activations float, so only the weight noise is left.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from quantization_checks import rel, run_epoxy, run_ort, xy_model

from epoxy.quantization.dynamic import quantize_dynamic, quantize_dynamic_report
from epoxy.quantization.qdq import QuantizationError
from epoxy_sdk.conformance.onnxruntime_oracle import reduce_range

# onnxruntime is the oracle here: where its uint8 x int8 products saturate (no VNNI), the
# models it runs get the 7-bit weights its documentation prescribes there (onnxruntime_oracle)
quantize_dynamic = functools.partial(quantize_dynamic, reduce_range=reduce_range())

ort = pytest.importorskip("onnxruntime")
ort_quant = pytest.importorskip("onnxruntime.quantization")

MAX_REL_ERROR = 0.03  # see the module docstring
HIDDEN, SEQ = 64, 16


def mlp(hidden: int = 64, opset: int = 13, seed: int = 1) -> onnx.ModelProto:
    """MatMul+Add+Relu+MatMul."""
    rng = np.random.default_rng(seed)
    inits = {"w1": rng.normal(0, 0.2, (32, hidden)), "b1": rng.normal(0, 0.1, hidden),
             "w2": rng.normal(0, 0.2, (hidden, 10))}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
             helper.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
             helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
             helper.make_node("MatMul", ["r1", "w2"], ["y"], name="mm2")]
    return xy_model(nodes, inits, ["N", 32], ["N", 10], opset)


def gemm(seed: int = 2) -> onnx.ModelProto:
    """Gemm(transB=1, alpha=0.5, beta=2) with a bias, then a plain Gemm without one."""
    rng = np.random.default_rng(seed)
    inits = {"wa": rng.normal(0, 0.2, (48, 32)), "ba": rng.normal(0, 0.1, 48), "wb": rng.normal(0, 0.2, (48, 10))}
    nodes = [helper.make_node("Gemm", ["x", "wa", "ba"], ["g"], name="fc1", transB=1, alpha=0.5, beta=2.0),
             helper.make_node("Relu", ["g"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "wb"], ["y"], name="fc2")]
    return xy_model(nodes, inits, ["N", 32], ["N", 10])


def bert_block(seed: int = 3) -> onnx.ModelProto:
    """One attention head and a feed-forward, [B, S, H] in and out. The two attention
    MatMuls multiply activations by activations: no constant weight, they stay float."""
    rng = np.random.default_rng(seed)
    h = HIDDEN
    inits = {f"w{n}": rng.normal(0, 1 / np.sqrt(h), (h, h)) for n in "qkvo"}
    inits |= {"w_ff1": rng.normal(0, 1 / np.sqrt(h), (h, 4 * h)), "b_ff1": rng.normal(0, 0.1, 4 * h),
              "w_ff2": rng.normal(0, 1 / np.sqrt(4 * h), (4 * h, h)), "inv_sqrt": np.asarray(1 / np.sqrt(h))}
    mk = helper.make_node
    nodes = [mk("MatMul", ["x", "wq"], ["q"], name="q_proj"),
             mk("MatMul", ["x", "wk"], ["k"], name="k_proj"),
             mk("MatMul", ["x", "wv"], ["v"], name="v_proj"),
             mk("Transpose", ["k"], ["kt"], name="k_t", perm=[0, 2, 1]),
             mk("MatMul", ["q", "kt"], ["s"], name="scores"),
             mk("Mul", ["s", "inv_sqrt"], ["ss"], name="scale"),
             mk("Softmax", ["ss"], ["p"], name="softmax", axis=-1),
             mk("MatMul", ["p", "v"], ["ctx"], name="context"),
             mk("MatMul", ["ctx", "wo"], ["o"], name="o_proj"),
             mk("Add", ["o", "x"], ["res"], name="residual"),
             mk("MatMul", ["res", "w_ff1"], ["f1"], name="ff1"),
             mk("Add", ["f1", "b_ff1"], ["f1b"], name="ff1_bias"),
             mk("Relu", ["f1b"], ["f1r"], name="ff_relu"),
             mk("MatMul", ["f1r", "w_ff2"], ["f2"], name="ff2"),
             mk("Add", ["f2", "res"], ["y"], name="residual2")]
    return xy_model(nodes, inits, ["B", SEQ, h], ["B", SEQ, h])


BUILDERS = {"mlp": mlp, "gemm": gemm, "bert": bert_block}
SHAPES = {"mlp": (8, 32), "gemm": (8, 32), "bert": (2, SEQ, HIDDEN)}
QUANTIZABLE = {"mlp": {"mm1", "mm2"}, "gemm": {"fc1", "fc2"},
               "bert": {"q_proj", "k_proj", "v_proj", "o_proj", "ff1", "ff2"}}


def feed(kind: str, seed: int = 99) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).normal(size=SHAPES[kind]).astype(np.float32)}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def case(request):
    model = BUILDERS[request.param]()
    x = feed(request.param)
    return request.param, model, x, run_ort(model, x, optimize=True)


def test_qoperator_is_valid_runs_alike_and_stays_close(case):
    kind, model, x, fp32 = case
    q, report = quantize_dynamic_report(model, reduce_range=reduce_range())
    onnx.checker.check_model(q, full_check=True)
    assert set(report.quantized) == QUANTIZABLE[kind]
    ours, theirs = run_epoxy(q, x), run_ort(q, x, optimize=True)
    # the same integer products and the same float rescale: rounding of the last Mul only
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6 * float(np.abs(theirs).max()))
    assert 0 < rel(ours, fp32) <= MAX_REL_ERROR


def test_qoperator_graph_is_integer_matmuls(case):
    kind, model, _, _ = case
    q = quantize_dynamic(model)
    ops = [n.op_type for n in q.graph.node]
    assert ops.count("MatMulInteger") == len(QUANTIZABLE[kind])
    assert "Gemm" not in ops
    # one DynamicQuantizeLinear per distinct activation (the BERT block's q/k/v projections share x)
    inputs = {n.input[0] for n in model.graph.node if (n.name or "") in QUANTIZABLE[kind]}
    dql = [n for n in q.graph.node if n.op_type == "DynamicQuantizeLinear"]
    assert sorted(n.input[0] for n in dql) == sorted(inputs)
    inits = {i.name: numpy_helper.to_array(i) for i in q.graph.initializer}
    for node in (n for n in q.graph.node if n.op_type == "MatMulInteger"):
        assert inits[node.input[1]].dtype == np.int8
        assert inits[node.input[3]].shape == (inits[node.input[1]].shape[1],)  # per channel along N


def test_qdq_is_weight_only_and_runs_alike(case):
    kind, model, x, fp32 = case
    q, report = quantize_dynamic_report(model, format="qdq")
    onnx.checker.check_model(q, full_check=True)
    assert set(report.quantized) == QUANTIZABLE[kind]
    assert not [n for n in q.graph.node if n.op_type in ("QuantizeLinear", "DynamicQuantizeLinear")]
    ours = run_epoxy(q, x)
    np.testing.assert_allclose(ours, run_ort(q, x, optimize=False), rtol=1e-4,
                               atol=1e-5 * float(np.abs(fp32).max()))
    # onnxruntime's optimizer may fuse DQ->MatMul into a kernel that also quantizes the
    # activation at run time: the same model then differs by the activation noise, within the bound
    assert rel(ours, run_ort(q, x, optimize=True)) <= MAX_REL_ERROR
    assert 0 < rel(ours, fp32) <= MAX_REL_ERROR


def test_error_is_of_the_order_of_onnxruntime_quantize_dynamic(case, tmp_path):
    kind, model, x, fp32 = case
    src, dst = tmp_path / "fp32.onnx", tmp_path / "ort_dynamic.onnx"
    onnx.save(model, src)
    ort_quant.quantize_dynamic(str(src), str(dst), per_channel=True, weight_type=ort_quant.QuantType.QInt8,
                               reduce_range=reduce_range())
    peer = rel(run_ort(onnx.load(dst), x, optimize=True), fp32)
    ours = rel(run_epoxy(quantize_dynamic(model), x), fp32)
    assert ours <= 2 * peer + 1e-3, (ours, peer)
    assert peer <= 2 * ours + 1e-3, (ours, peer)  # not suspiciously better either: same scheme


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
def test_weights_are_int8_and_the_model_shrinks_4x(fmt):
    rng = np.random.default_rng(4)  # weight-heavy: 256x512 + 512x256 floats, nothing else
    model = xy_model([helper.make_node("MatMul", ["x", "w1"], ["m"], name="mm1"),
                    helper.make_node("Relu", ["m"], ["r"], name="relu"),
                    helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")],
                   {"w1": rng.normal(0, 0.1, (256, 512)), "w2": rng.normal(0, 0.1, (512, 256))}, ["N", 256], ["N", 256])
    q, report = quantize_dynamic_report(model, format=fmt)
    float_weights = {"w1", "w2"}
    inits = {i.name: i for i in q.graph.initializer}
    assert not float_weights & set(inits), "float weights left behind"
    int8 = {i.name: tuple(i.dims) for i in q.graph.initializer if i.data_type == TensorProto.INT8}
    assert int8["w1_quantized"] == (256, 512) and int8["w2_quantized"] == (512, 256)
    assert report.size_before == model.ByteSize() and report.size_after == q.ByteSize()
    # 1 byte per weight instead of 4, plus a scale (and zero point) per output channel
    assert report.size_after < report.size_before / 3.8, (report.size_before, report.size_after)


def test_uint8_weights_are_asymmetric_and_run():
    model, x = mlp(), feed("mlp")
    q = quantize_dynamic(model, weight_dtype="uint8")
    w = next(i for i in q.graph.initializer if i.name.startswith("w1") and i.data_type == TensorProto.UINT8)
    assert numpy_helper.to_array(w).min() == 0  # the range is min..max, not symmetric
    ours = run_epoxy(q, x)
    np.testing.assert_allclose(ours, run_ort(q, x, optimize=True), rtol=1e-5, atol=1e-6)
    assert rel(ours, run_ort(model, x, optimize=True)) <= MAX_REL_ERROR


def test_excluded_and_non_constant_nodes_stay_float_with_reasons():
    model, x = bert_block(), feed("bert")
    q, report = quantize_dynamic_report(model, nodes_to_exclude=["ff2"], reduce_range=reduce_range())
    kept = report.kept
    assert kept["ff2"] == "excluded by name"
    assert "not a constant" in kept["scores"] and "not a constant" in kept["context"]
    assert set(report.quantized) == QUANTIZABLE["bert"] - {"ff2"}
    ff2 = next(n for n in q.graph.node if n.name == "ff2")
    assert ff2.op_type == "MatMul" and list(ff2.input) == ["f1r", "w_ff2"]
    assert next(i for i in q.graph.initializer if i.name == "w_ff2").data_type == TensorProto.FLOAT
    np.testing.assert_allclose(run_epoxy(q, x), run_ort(q, x, optimize=True), rtol=1e-5, atol=1e-5)

    q, report = quantize_dynamic_report(gemm(), op_types_to_exclude=["Gemm"])
    assert report.quantized == ()
    assert report.kept == {"fc1": "its op type is excluded", "fc2": "its op type is excluded"}
    assert [n.op_type for n in q.graph.node] == ["Gemm", "Relu", "Gemm"]


def test_a_named_node_that_cannot_be_quantized_is_refused():
    with pytest.raises(QuantizationError, match="scores") as info:
        quantize_dynamic(bert_block(), nodes_to_include=["q_proj", "scores"])
    assert info.value.node == "scores" and info.value.op_type == "MatMul"
    q, report = quantize_dynamic_report(bert_block(), nodes_to_include=["q_proj"])
    assert report.quantized == ("q_proj",)


def test_low_opset_is_raised_for_dynamic_quantize_linear():
    model, x = mlp(opset=10), feed("mlp")
    q = quantize_dynamic(model)
    assert max(i.version for i in q.opset_import if i.domain == "") >= 11
    np.testing.assert_allclose(run_epoxy(q, x), run_ort(q, x, optimize=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"format": "qlinear"}, "format"),
    ({"weight_dtype": "int4"}, "weight_dtype"),
    ({"op_types": ("Conv",)}, "Conv"),
    ({"nodes_to_exclude": ["mm9"]}, "mm9"),
])
def test_invalid_requests_raise_clearly(kwargs, match):
    with pytest.raises(ValueError, match=match):
        quantize_dynamic(mlp(), **kwargs)


def test_an_invalid_model_is_refused_before_quantizing():
    model = mlp()
    model.graph.node[0].input[0] = "nowhere"
    with pytest.raises(QuantizationError, match="checker"):
        quantize_dynamic(model)
