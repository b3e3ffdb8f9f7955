"""The head views around FusedAttentionCore taken into it (ops/attention_heads.py): the split
of q, k (as heads, or already transposed) and v and the merge of the output go, the kernel
makes the same views (the same bits as taking heads first), a view that something else reads
stays, and one read only by a Shape is dropped from the shape-cached plan."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_attention_core_fusion import feeds_for, run_all, sdpa_model

import epoxy
from epoxy.contract import NodeSpec
from epoxy.run.shape_cache import ShapeCachingExecutor
from epoxy_ep_cpu.ops.fused_attention_core import fused_attention_core

RNG = np.random.default_rng(5)


def core_node(session: epoxy.InferenceSession):  # type: ignore[no-untyped-def]
    nodes = [node for node in session._graph.nodes if node.op_type == "FusedAttentionCore"]
    assert len(nodes) == 1
    return nodes[0]


@pytest.mark.parametrize("jit", ["on", "off"])
def test_the_exporters_head_views_go_into_the_core(jit) -> None:  # type: ignore[no-untyped-def]
    model = sdpa_model()  # q, v: Reshape + Transpose(0, 2, 1, 3); k: Transpose(0, 2, 3, 1); merge back
    fused = run_all(model, feeds_for(model), jit=jit)
    kinds = [node.op_type for node in fused._graph.nodes]
    assert "Transpose" not in kinds and "Reshape" not in kinds, kinds
    attributes = core_node(fused).attributes
    assert (attributes["q_split"], attributes["k_split"], attributes["v_split"]) == (4, 4, 4)
    assert (attributes["q_split_layout"], attributes["k_split_layout"], attributes["v_split_layout"]) == (1, 2, 1)
    assert attributes["merge"] == 1


def _spec(**attributes) -> NodeSpec:  # type: ignore[no-untyped-def]
    base = {"q_scale": 0.5, "k_scale": 0.5, "scale": 1.0, "nan_to_zero": 1}
    return NodeSpec(index=0, name="core", op_type="FusedAttentionCore", domain="com.epoxy.cpu", opset=1,
                    inputs=("q", "k", "v", "m"), outputs=("y",), attributes={**base, **attributes},
                    input_types=(), output_types=())


def test_the_kernel_on_flat_projections_gives_the_bits_of_heads_taken_first() -> None:
    b, s, h, d = 2, 7, 3, 4
    q, k, v = (RNG.standard_normal((b, s, h * d)).astype(np.float32) for _ in range(3))
    mask = np.where(RNG.random((b, 1, s, s)) < 0.8, 0, -np.inf).astype(np.float32)
    heads = lambda x, perm: np.ascontiguousarray(x.reshape(b, s, h, d).transpose(perm))  # noqa: E731
    want = fused_attention_core(_spec())(heads(q, (0, 2, 1, 3)), heads(k, (0, 2, 3, 1)), heads(v, (0, 2, 1, 3)), mask)
    want = np.ascontiguousarray(want.transpose(0, 2, 1, 3)).reshape(b, s, h * d)
    split = _spec(q_split=d, q_split_layout=1, k_split=d, k_split_layout=2, v_split=d, v_split_layout=1, merge=1)
    got = fused_attention_core(split)(q, k, v, mask)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="does not split into heads of 4"):
        fused_attention_core(split)(q[..., :-1], k, v, mask)


def test_a_view_something_else_reads_stays() -> None:
    """The merged output also returned as heads (``ctx`` before the merge is a graph
    output): the merge stays; the splits still go."""
    model = sdpa_model(mask="float")
    ctx = helper.make_tensor_value_info("ctx", TensorProto.FLOAT, None)
    model.graph.output.append(ctx)
    fused = run_all(model, feeds_for(model))
    assert "merge" not in core_node(fused).attributes
    assert [node.op_type for node in fused._graph.nodes].count("Transpose") == 1  # the merge's


def _shape_read_model() -> onnx.ModelProto:
    """Batch symbolic; q's head view is also read by Shape (TorchScript reads it to build the
    merged target), so the view stays for the first runs and the shape-cached plan drops it."""
    n = helper.make_node
    hidden, heads, d = 8, 2, 4
    w = [numpy_helper.from_array((RNG.standard_normal((hidden, hidden)) * 0.4).astype(np.float32), f"w{c}")
         for c in "qkv"]
    inits = w + [numpy_helper.from_array(np.array([0, 0, heads, d], np.int64), "split"),
                 numpy_helper.from_array(np.array([0], np.int64), "i0"),
                 numpy_helper.from_array(np.array([1], np.int64), "i1"),
                 numpy_helper.from_array(np.array([-1, hidden], np.int64), "tail")]
    nodes = [n("MatMul", ["x", f"w{c}"], [c]) for c in "qkv"]
    nodes += [n("Reshape", ["q", "split"], ["q4"]), n("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
              n("Reshape", ["k", "split"], ["k4"]), n("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
              n("Reshape", ["v", "split"], ["v4"]), n("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3]),
              n("MatMul", ["qt", "kt"], ["scores"]), n("Softmax", ["scores"], ["p"], axis=-1),
              n("MatMul", ["p", "vt"], ["c"]), n("Transpose", ["c"], ["ct"], perm=[0, 2, 1, 3]),
              n("Shape", ["qt"], ["qs"]), n("Slice", ["qs", "i0", "i1"], ["batch"]),
              n("Concat", ["batch", "tail"], ["merged"], axis=0), n("Reshape", ["ct", "merged"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 5, hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 5, hidden])], inits)
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_a_view_read_by_a_shape_is_dropped_once_the_shapes_are_cached() -> None:
    model = _shape_read_model()
    session = epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"])
    oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert core_node(session).attributes["q_split"] == 4
    x = RNG.standard_normal((3, 5, 8)).astype(np.float32)
    for _ in range(3):  # the third run takes the shape-cached plan
        np.testing.assert_allclose(session.run(None, {"x": x})[0], oracle.run(None, {"x": x})[0], rtol=1e-5,
                                   atol=1e-6)
    executor = session._executor
    assert isinstance(executor, ShapeCachingExecutor)
    full = [step.op_type for step in executor.plan.steps]
    reduced = [step.op_type for step in executor.reduced_plan.steps]
    assert "Transpose" in full and "Shape" in full  # q's view, for its Shape
    assert "Transpose" not in reduced and "Shape" not in reduced and "Reshape" not in reduced, reduced
