"""Static quantization in QOperator form (``quantize_static(format="qoperator")``) on ep-cpu and
onnxruntime.

The same calibration as the QDQ model, written as QLinearConv / QLinearMatMul / com.microsoft
QGemm, QLinearAdd, QLinearMul, QLinearConcat, QLinear(Global)AveragePool, with value-moving ops
(MaxPool, Reshape, Transpose, Squeeze, Resize) run on the 8-bit tensor itself. Fixed seeds; the
models are test_quantization_qdq's (one per op family between two convolutions, plus its CNN
and MLP).

Bounds: the QOperator model equals its QDQ twin (``quantize_outputs=True``: the same Q/DQ
pairs, float ops between them) within one step of the output's scale: each integer op rounds
once where the twin computes in float and rounds at the next Q, and the twin's graph output
is the float op's (not rounded), so the last op alone differs by up to half a step (measured:
0.48-0.50 step). onnxruntime and epoxy run the same integer kernels: within one step (measured:
equal). Against fp32 the QDQ bound holds (MAX_REL_ERROR, see test_quantization_qdq).
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from test_quantization_qdq import FAMILIES, MAX_REL_ERROR, cnn, family_model, feeds, mlp, rel, run_epoxy, run_ort

from epoxy.quantization import collect
from epoxy.quantization.qdq import DEFAULT_OP_TYPES, QuantizationError, quantize_static
from epoxy.quantization.schemes import SchemeOptions, get
from epoxy_sdk.conformance.onnxruntime_oracle import reduce_range

# onnxruntime is the oracle here: where its uint8 x int8 products saturate (no VNNI), the
# models it runs get the 7-bit weights its documentation prescribes there (onnxruntime_oracle)
quantize_static = functools.partial(quantize_static, reduce_range=reduce_range())

pytest.importorskip("onnxruntime")

#: family -> the integer op its middle becomes (a float Relu/Clip folds away entirely)
EXPECTED = {"relu": None, "clip": None, "maxpool": "MaxPool", "averagepool": "QLinearAveragePool",
            "add": "QLinearAdd", "mul": "QLinearMul", "concat": "QLinearConcat", "reshape": "Reshape",
            "transpose": "Transpose", "squeeze": "Squeeze", "resize": "Resize"}
FLOAT_OPS = ("Conv", "Gemm", "MatMul", "Add", "Mul", "Concat", "AveragePool", "GlobalAveragePool", "Relu", "Clip")


def _build(name: str) -> tuple[onnx.ModelProto, str]:
    if name == "cnn":
        return cnn(), "cnn"
    if name == "mlp":
        return mlp(), "mlp"
    return family_model(name), "cnn"


@pytest.fixture(scope="module", params=(*FAMILIES, "cnn", "mlp"))
def case(request):
    model, kind = _build(request.param)
    stats = collect(model, feeds(kind, 0), providers=("cpu",))
    test = feeds(kind, 99, 1)[0]
    qop = quantize_static(model, stats, providers=("openvino",), format="qoperator")
    return request.param, model, stats, test, qop


def output_step(model: onnx.ModelProto, output: str = "y") -> float:
    """The scale of the DequantizeLinear writing graph output ``output``."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    dq = next(n for n in model.graph.node if output in n.output)
    assert dq.op_type == "DequantizeLinear"
    return float(inits[dq.input[1]])


def test_qoperator_graph_is_integer_from_input_q_to_output_dq(case):
    name, _, _, _, qop = case
    ops = [n.op_type for n in qop.graph.node]
    assert ops[0] == "QuantizeLinear" and ops[-1] == "DequantizeLinear", ops
    assert ops.count("QuantizeLinear") == 1 and ops.count("DequantizeLinear") == 1, ops
    assert not set(ops) & set(FLOAT_OPS), ops
    if name in EXPECTED and EXPECTED[name]:
        assert EXPECTED[name] in ops, ops
    assert ("QLinearMatMul" if name == "mlp" else "QLinearConv") in ops
    # every tensor between the two is 8-bit
    inferred = onnx.shape_inference.infer_shapes(qop)
    types = {v.name: v.type.tensor_type.elem_type for v in (*inferred.graph.value_info, *inferred.graph.output)}
    middle = [o for n in qop.graph.node[:-1] for o in n.output]
    assert all(types.get(o) in (onnx.TensorProto.UINT8, onnx.TensorProto.INT8) for o in middle if o in types), \
        {o: types.get(o) for o in middle}
    assert any(i.domain == "com.microsoft" for i in qop.opset_import) == any(
        n.domain == "com.microsoft" for n in qop.graph.node)


def test_qoperator_runs_alike_on_both_runtimes_and_near_fp32(case):
    name, model, _, test, qop = case
    ours, theirs = run_epoxy(qop, test), run_ort(qop, test)
    assert np.abs(ours - theirs).max() <= output_step(qop) * 1.001
    fp32 = run_ort(model, test)
    assert 0 < rel(theirs, fp32) <= MAX_REL_ERROR, rel(theirs, fp32)


def test_qoperator_equals_its_qdq_twin_within_one_step(case):
    name, model, stats, test, qop = case
    twin = quantize_static(model, stats, providers=("openvino",), quantize_outputs=True)
    assert not [n for n in twin.graph.node if n.op_type.startswith("QLinear")]
    step = output_step(qop)
    for run in (run_ort, run_epoxy):
        diff = np.abs(run(qop, test) - run(twin, test)).max()
        assert diff <= step * 1.001, (run.__name__, diff / step)


def test_qoperator_with_the_weighted_op_set_converts_only_conv_matmul_gemm():
    model = family_model("add")
    stats = collect(model, feeds("cnn", 0, 2), providers=("cpu",))
    qop = quantize_static(model, stats, format="qoperator", op_types=DEFAULT_OP_TYPES)
    ops = [n.op_type for n in qop.graph.node]
    assert ops.count("QLinearConv") == 3 and "QGemm" in ops and "Add" in ops and "QLinearAdd" not in ops
    test = feeds("cnn", 99, 1)[0]
    np.testing.assert_allclose(run_epoxy(qop, test), run_ort(qop, test), rtol=1e-4, atol=1e-4)


def test_qoperator_with_cpu_defaults_converts_the_add_too():
    model = family_model("add")
    stats = collect(model, feeds("cnn", 0, 2), providers=("cpu",))
    qop = quantize_static(model, stats, format="qoperator")
    ops = [n.op_type for n in qop.graph.node]
    assert ops.count("QLinearConv") == 3 and "QGemm" in ops and "QLinearAdd" in ops and "Add" not in ops
    test = feeds("cnn", 99, 1)[0]
    np.testing.assert_allclose(run_epoxy(qop, test), run_ort(qop, test), rtol=1e-4, atol=1e-4)


def test_signed_per_tensor_qoperator_equals_its_twin():
    model = family_model("concat")
    stats = collect(model, feeds("cnn", 0, 4), providers=("cpu",))
    kwargs = dict(providers=("openvino",), activation_dtype="int8", per_channel=False)
    qop = quantize_static(model, stats, format="qoperator", **kwargs)
    twin = quantize_static(model, stats, quantize_outputs=True, **kwargs)
    zero_points = {numpy_helper.to_array(i).dtype for i in qop.graph.initializer if "zero_point" in i.name}
    assert zero_points == {np.dtype(np.int8)}
    test = feeds("cnn", 99, 1)[0]
    for run in (run_ort, run_epoxy):
        assert np.abs(run(qop, test) - run(twin, test)).max() <= output_step(qop) * 1.001, run.__name__


def test_group_without_integer_form_keeps_float_between_dq_and_q():
    # Gemm with beta=2 scales its bias: QGemm adds an int32 bias as is, so this Gemm stays float
    model = cnn()
    fc = next(n for n in model.graph.node if n.name == "fc")
    fc.attribute.append(helper.make_attribute("beta", 2.0))
    stats = collect(model, feeds("cnn", 0, 2), providers=("cpu",))
    qop = quantize_static(model, stats, providers=("openvino",), format="qoperator")
    producers = {o: n for n in qop.graph.node for o in n.output}
    gemm = next(n for n in qop.graph.node if n.op_type == "Gemm")
    assert producers[gemm.input[0]].op_type == "DequantizeLinear"
    assert "QLinearConv" in [n.op_type for n in qop.graph.node]
    test = feeds("cnn", 99, 1)[0]
    assert rel(run_epoxy(qop, test), run_ort(model, test)) <= MAX_REL_ERROR
    np.testing.assert_allclose(run_epoxy(qop, test), run_ort(qop, test), rtol=1e-4, atol=1e-4)


def test_clip_that_the_integer_range_does_not_cover_stays():
    # a Clip folds only where the output's integer range provably clips the same way; a max
    # fed at run time cannot be proven, so the Clip stays float between DQ and Q
    model = family_model("clip")
    clip = next(n for n in model.graph.node if n.op_type == "Clip")
    model.graph.input.append(helper.make_tensor_value_info("hi_in", onnx.TensorProto.FLOAT, []))
    clip.input[2] = "hi_in"
    calib = [dict(f, hi_in=np.array(0.5, np.float32)) for f in feeds("cnn", 0, 2)]
    stats = collect(model, calib, providers=("cpu",))
    qop = quantize_static(model, stats, providers=("openvino",), format="qoperator")
    assert "Clip" in [n.op_type for n in qop.graph.node]
    test = dict(feeds("cnn", 99, 1)[0], hi_in=np.array(0.5, np.float32))
    np.testing.assert_allclose(run_epoxy(qop, test), run_ort(qop, test), rtol=1e-4, atol=1e-4)


def test_bad_format_and_missing_range_are_refused_by_name():
    model = cnn()
    with pytest.raises(ValueError, match="qdq, qoperator"):
        quantize_static(model, feeds("cnn", 0, 1), format="qlinear")
    stats = collect(model, feeds("cnn", 0, 1), tensors=["x", "c1", "r1", "c2", "g", "f"], providers=("cpu",))
    with pytest.raises(QuantizationError, match="'fc'.*'y'") as info:  # the output's Q needs y's range
        quantize_static(model, stats, format="qoperator")
    assert info.value.node == "fc" and info.value.op_type == "Gemm"


def test_static_scheme_passes_format_through():
    model = mlp()
    stats = collect(model, feeds("mlp", 0, 2), providers=("cpu",))
    out, _ = get("static").run(model, stats, SchemeOptions(format="qoperator"))
    assert "QLinearMatMul" in [n.op_type for n in out.graph.node]
    out, _ = get("static").run(model, stats, SchemeOptions())
    assert "QLinearMatMul" not in [n.op_type for n in out.graph.node]
