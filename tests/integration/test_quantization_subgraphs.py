"""Weight-side quantization inside If branches and Loop bodies (#19), on ep-cpu and onnxruntime.

The model (fixed seed): ``x @ w_in`` in the main graph, then a Loop of three steps whose body
multiplies by the outer weight ``w_step`` (a MatMul) and by its own initializer (a Gemm with
transB and a bias), then an If on the fed ``flag`` whose then-branch reuses ``w_step`` and whose
else-branch has ``w_else``. Dynamic (integer kernels and weight-only) and weight-only int8/int4
quantize all five products, each in its own graph; static calibration does not reach the bodies
and says so. onnxruntime is the oracle: it runs the written models, and both runtimes agree.

Error bounds against fp32 (relative L2): int8 <= 3 % as in test_quantization_dynamic.py (five
chained products, each ~0.5-1 %); int4 in blocks of 16 along K: 15 levels a side per block
(step ~max/7.5, noise ~4 % of a Gaussian weight's RMS per product), through five products and
the Loop's three repeats: <= 25 % (measured 10-16 %).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from quantization_checks import rel, run_epoxy, run_ort

from epoxy.quantization import quantize_model
from epoxy.quantization.dynamic import quantize_dynamic_report
from epoxy.quantization.weight_only import quantize_weights_report
from epoxy_sdk.conformance.onnxruntime_oracle import reduce_range

pytest.importorskip("onnxruntime")

H = 32
SITES = {"mm_in", "Loop #1/body/mm_step", "Loop #1/body/gemm_local", "If #2/then_branch/mm_then",
         "If #2/else_branch/mm_else"}


def _vi(name: str, elem: int, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def control_flow_model(seed: int = 7) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)

    def weight(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.normal(0, 0.25, shape).astype(np.float32), name)

    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "w_step"], ["s1"], name="mm_step"),
         helper.make_node("Relu", ["s1"], ["s2"], name="relu_step"),
         helper.make_node("Gemm", ["s2", "w_local", "b_local"], ["h_out"], name="gemm_local", transB=1),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going")],
        "body", [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []),
                 _vi("h_in", TensorProto.FLOAT, [2, H])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("h_out", TensorProto.FLOAT, [2, H])],
        [weight("w_local", (H, H)), weight("b_local", (H,))])
    then_branch = helper.make_graph([helper.make_node("MatMul", ["looped", "w_step"], ["t"], name="mm_then")],
                                    "then", [], [_vi("t", TensorProto.FLOAT, [2, H])])
    else_branch = helper.make_graph([helper.make_node("MatMul", ["looped", "w_else"], ["e"], name="mm_else")],
                                    "else", [], [_vi("e", TensorProto.FLOAT, [2, H])])
    nodes = [helper.make_node("MatMul", ["x", "w_in"], ["h0"], name="mm_in"),
             helper.make_node("Loop", ["trips", "", "h0"], ["looped"], body=body),
             helper.make_node("If", ["flag"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    graph = helper.make_graph(
        nodes, "control_flow", [_vi("x", TensorProto.FLOAT, [2, H]), _vi("flag", TensorProto.BOOL, [])],
        [_vi("y", TensorProto.FLOAT, [2, H])],
        [weight("w_in", (H, H)), weight("w_step", (H, H)), weight("w_else", (H, H)),
         numpy_helper.from_array(np.array(3, np.int64), "trips")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def feeds(flag: bool) -> dict[str, np.ndarray]:
    x = np.random.default_rng(11).normal(0, 1, (2, H)).astype(np.float32)
    return {"x": x, "flag": np.array(flag)}


def _ops(graph: onnx.GraphProto) -> list[str]:
    return [n.op_type for n in graph.node]


def _subgraphs(model: onnx.ModelProto) -> dict[str, onnx.GraphProto]:
    return {a.name: a.g for n in model.graph.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH}


def _agree_with_onnxruntime_and_fp32(q: onnx.ModelProto, fp32: onnx.ModelProto, bound: float, *,
                                     fused: bool) -> None:
    """``fused``: onnxruntime may fuse (integer kernels run the same sums); else it runs the
    graph as written (its fused DequantizeLinear -> MatMul quantizes activations, ~1 %)."""
    for flag in (True, False):
        x = feeds(flag)
        ours, theirs = run_epoxy(q, x), run_ort(q, x, optimize=fused)
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4 * float(np.abs(theirs).max()))
        assert 0 < rel(ours, run_ort(fp32, x, optimize=False)) <= bound


def test_dynamic_quantizes_the_products_inside_loop_and_if():
    model = control_flow_model()
    q, report = quantize_dynamic_report(model, reduce_range=reduce_range())  # onnxruntime is the oracle
    onnx.checker.check_model(q, full_check=True)
    assert set(report.quantized) == SITES and report.kept_float == ()
    bodies = _subgraphs(q)
    assert "MatMul" not in _ops(bodies["body"]) and "Gemm" not in _ops(bodies["body"])
    assert _ops(bodies["body"]).count("MatMulInteger") == 2
    for branch in ("then_branch", "else_branch"):
        assert "MatMulInteger" in _ops(bodies[branch]) and "MatMul" not in _ops(bodies[branch])
        # the branch's int8 weight is its own initializer (onnxruntime looks weights up there)
        assert any(numpy_helper.to_array(i).dtype == np.int8 for i in bodies[branch].initializer)
    # every float weight was replaced: none of the five is left anywhere
    names = {i.name for i in q.graph.initializer} | {i.name for g in bodies.values() for i in g.initializer}
    assert not names & {"w_in", "w_step", "w_else", "w_local"}
    _agree_with_onnxruntime_and_fp32(q, model, 0.06 if reduce_range() else 0.03, fused=True)  # 7 bits: coarser


@pytest.mark.parametrize("dtype, block_size, bound", [("int8", None, 0.03), ("int4", 16, 0.25)])
def test_weight_only_puts_a_dequantize_in_each_graph(dtype, block_size, bound):
    model = control_flow_model()
    q, report = quantize_weights_report(model, dtype=dtype, block_size=block_size)
    onnx.checker.check_model(q, full_check=True)
    assert set(report.quantized) == SITES
    bodies = _subgraphs(q)
    # w_step is read in the Loop body and the then-branch: one DequantizeLinear in each
    assert _ops(bodies["body"]).count("DequantizeLinear") == 2
    assert _ops(bodies["then_branch"]) == ["DequantizeLinear", "MatMul"]
    assert _ops(bodies["else_branch"]) == ["DequantizeLinear", "MatMul"]
    _agree_with_onnxruntime_and_fp32(q, model, bound, fused=False)


def test_a_subgraph_node_is_excluded_by_its_label():
    model = control_flow_model()
    q, report = quantize_dynamic_report(model, nodes_to_exclude=["Loop #1/body/gemm_local"])
    assert report.kept == {"Loop #1/body/gemm_local": "excluded by name"}
    assert "Gemm" in _ops(_subgraphs(q)["body"])
    with pytest.raises(ValueError, match="Loop #1/body/nope"):
        quantize_dynamic_report(model, nodes_to_exclude=["Loop #1/body/nope"])


def test_static_says_the_bodies_stay_float_and_counts_their_nodes():
    model = control_flow_model()
    batches = [feeds(flag) for flag in (True, False, True, False)]
    _, report = quantize_model(model, mode="static", calibration=batches, held_out=2, providers=("cpu",))
    kept = sorted(n.split(":")[0] for n in report.notes if "static calibration does not reach" in n)
    assert [k.split(" #")[0] + "/" + k.rsplit("/", 1)[1] for k in kept] == ["If/else_branch", "If/then_branch",
                                                                            "Loop/body"]
    assert report.nodes is not None
    assert any(label.endswith("/body/mm_step") for label in report.nodes.float32)
    assert report.nodes.int8  # the main graph's product is int8


def test_the_report_counts_body_products_as_int8():
    _, report = quantize_model(control_flow_model(), mode="dynamic", calibration=[feeds(True), feeds(False)],
                               held_out=2, providers=("cpu",))
    assert report.nodes is not None
    where = {label.rsplit("/", 1)[-1]: label.rsplit("/", 1)[0] if "/" in label else "" for label in report.nodes.int8}
    assert {name: place.split(" #")[0] for name, place in where.items()} == {
        "mm_in_int32_node": "", "mm_step_int32_node": "Loop", "gemm_local_int32_node": "Loop",
        "mm_then_int32_node": "If", "mm_else_int32_node": "If"}
    assert where["mm_step_int32_node"].endswith("/body") and where["mm_else_int32_node"].endswith("/else_branch")
