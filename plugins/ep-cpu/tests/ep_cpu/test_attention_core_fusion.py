"""The core of attention as torch.onnx writes scaled_dot_product_attention ->
com.epoxy.cpu::FusedAttentionCore: the pass fires on the exporters' forms (head shapes
computed at run time, the scale split over q and k, torch's NaN guard after the softmax),
leaves near-misses alone, and the kernel gives onnxruntime's and the op-by-op results."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy

RNG = np.random.default_rng(11)


def _const(name: str, array) -> onnx.TensorProto:  # type: ignore[no-untyped-def]
    return numpy_helper.from_array(np.asarray(array), name)


def sdpa_model(b: int = 2, s: int = 5, heads: int = 3, d: int = 4, scale: str = "split", mask: str = "bool",
               guard: bool = True, dtype: int = TensorProto.FLOAT, guard_value: float = 0.0,
               extra_output: str | None = None) -> onnx.ModelProto:
    """Projections, head views whose shapes come from Shape/Gather/Concat at run time, then
    ``Mul(q, c) @ Mul(kT, c)`` [+ Where(mask, 0, -inf)] -> Softmax [-> Where(IsNaN, 0)] -> @ v."""
    hidden = heads * d
    npdt = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.DOUBLE: np.float64}[dtype]
    root = 1 / math.sqrt(math.sqrt(d))
    inits = [_const(f"w{c}", (RNG.standard_normal((hidden, hidden)) * 0.3).astype(npdt)) for c in "qkvo"]
    inits += [_const("i0", np.array([0], np.int64)), _const("i2", np.array([2], np.int64)),
              _const("tail", np.array([heads, d], np.int64)), _const("merged_tail", np.array([hidden], np.int64)),
              _const("root", np.array(root, npdt)), _const("inv", np.array(1 / math.sqrt(d), npdt)),
              _const("sqrt_d", np.array(math.sqrt(d), npdt)), _const("zero", np.array([guard_value], npdt)),
              _const("ninf", np.array([-np.inf], npdt))]
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "wq"], ["q"]), n("MatMul", ["x", "wk"], ["k"]), n("MatMul", ["x", "wv"], ["v"]),
        n("Shape", ["x"], ["xs"]), n("Slice", ["xs", "i0", "i2"], ["bs"]),
        n("Concat", ["bs", "tail"], ["heads"], axis=0), n("Concat", ["bs", "merged_tail"], ["merged"], axis=0),
        n("Reshape", ["q", "heads"], ["q4"]), n("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
        n("Reshape", ["k", "heads"], ["k4"]), n("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        n("Reshape", ["v", "heads"], ["v4"]), n("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3]),
    ]
    left, right = "qt", "kt"
    if scale == "split":  # torch: q and k each times d ** -0.25
        nodes += [n("Mul", ["qt", "root"], ["qs"]), n("Mul", ["root", "kt"], ["ks"])]
        left, right = "qs", "ks"
    elif scale == "k_only":
        nodes.append(n("Mul", ["kt", "inv"], ["ks"]))
        right = "ks"
    nodes.append(n("MatMul", [left, right], ["scores"]))
    last = "scores"
    if scale == "div_after":
        nodes.append(n("Div", [last, "sqrt_d"], ["scaled"]))
        last = "scaled"
    inputs = [helper.make_tensor_value_info("x", dtype, [b, s, hidden])]
    if mask == "bool":  # torch: a boolean mask becomes Where(mask, 0, -inf) added to the scores
        inputs.append(helper.make_tensor_value_info("keep", TensorProto.BOOL, [b, 1, s, s]))
        nodes += [n("Where", ["keep", "zero", "ninf"], ["bias"]) if guard_value == 0.0
                  else n("Where", ["keep", "i0f", "ninf"], ["bias"]),
                  n("Add", [last, "bias"], ["masked"])]
        inits.append(_const("i0f", np.array([0], npdt)))
        last = "masked"
    elif mask == "float":
        inputs.append(helper.make_tensor_value_info("bias", dtype, [s]))
        nodes.append(n("Add", ["bias", last], ["masked"]))
        last = "masked"
    nodes.append(n("Softmax", [last], ["probs"], axis=-1))
    probs = "probs"
    if guard:
        nodes += [n("IsNaN", ["probs"], ["nan"]), n("Where", ["nan", "zero", "probs"], ["safe"])]
        probs = "safe"
    nodes += [n("MatMul", [probs, "vt"], ["ctx"]), n("Transpose", ["ctx"], ["ctxt"], perm=[0, 2, 1, 3]),
              n("Reshape", ["ctxt", "merged"], ["merged_out"]), n("MatMul", ["merged_out", "wo"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", dtype, None)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(extra_output, dtype, None))
    graph = helper.make_graph(nodes, "sdpa", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def feeds_for(model: onnx.ModelProto, dtype=np.float32, masked_rows: bool = False) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    out: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "keep":
            keep = RNG.random(shape) < 0.7
            keep[..., 0] = True
            if masked_rows:
                keep[0, 0, 1, :] = False  # a query that may look at nothing: NaN, or 0 behind the guard
            out[vi.name] = keep
        else:
            out[vi.name] = RNG.standard_normal(shape).astype(dtype)
    return out


def fused_count(session: epoxy.InferenceSession) -> int:
    return [n.op_type for n in session._graph.nodes].count("FusedAttentionCore")


def run_all(model: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol: float = 1e-5, atol: float = 1e-6,
            jit: str = "on"):  # type: ignore[no-untyped-def]
    """The fused session against the op-by-op one and onnxruntime (NaN where they have NaN);
    ``jit``: the cpu provider's option (the Softmax kernel inside the fused op follows it)."""
    plain = epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"],
                                   sess_options=epoxy.SessionOptions(graph_optimization_level="disable"))
    fused = epoxy.InferenceSession(model.SerializeToString(), providers=[("cpu", {"jit": jit})])
    oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want, ref = plain.run(None, feeds), oracle.run(None, feeds)
    for _ in range(2):  # the second run reuses planned buffers
        for got, a, r in zip(fused.run(None, feeds), want, ref):
            assert got.dtype == a.dtype and got.shape == a.shape
            np.testing.assert_allclose(got, a, rtol=rtol, atol=atol)
            np.testing.assert_allclose(got, r, rtol=rtol, atol=atol)
    return fused


@pytest.mark.parametrize("kwargs", [
    {},
    {"scale": "k_only"},
    {"scale": "div_after"},
    {"scale": None},
    {"mask": "float"},
    {"mask": None},
    {"guard": False},
    {"b": 1, "s": 16, "heads": 4, "d": 8},
])
@pytest.mark.parametrize("jit", ["on", "off"])
def test_exporter_forms_are_fused_and_match(kwargs, jit) -> None:  # type: ignore[no-untyped-def]
    model = sdpa_model(**kwargs)
    fused = run_all(model, feeds_for(model), jit=jit)
    assert fused_count(fused) == 1
    assert "Softmax" not in [n.op_type for n in fused._graph.nodes]


@pytest.mark.parametrize("jit", ["on", "off"])
def test_fully_masked_query_is_zero_behind_the_guard(jit) -> None:  # type: ignore[no-untyped-def]
    model = sdpa_model(guard=True)
    fused = run_all(model, feeds_for(model, masked_rows=True), jit=jit)
    assert fused_count(fused) == 1


@pytest.mark.parametrize("jit", ["on", "off"])
def test_fully_masked_query_is_nan_without_the_guard(jit) -> None:  # type: ignore[no-untyped-def]
    model = sdpa_model(guard=False, extra_output=None)
    feeds = feeds_for(model, masked_rows=True)
    fused = epoxy.InferenceSession(model.SerializeToString(), providers=[("cpu", {"jit": jit})])
    assert fused_count(fused) == 1
    got = fused.run(None, feeds)[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got).any()
    np.testing.assert_allclose(got[~np.isnan(got)], want[~np.isnan(want)], rtol=1e-5, atol=1e-6)


def test_float64_and_float16() -> None:
    model = sdpa_model(dtype=TensorProto.DOUBLE)
    assert fused_count(run_all(model, feeds_for(model, np.float64), rtol=1e-12, atol=1e-12)) == 1
    model = sdpa_model(dtype=TensorProto.FLOAT16)  # the op-by-op kernels run inside the fused node
    plain = epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"],
                                   sess_options=epoxy.SessionOptions(graph_optimization_level="disable"))
    fused = epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"])
    assert fused_count(fused) == 1
    feeds = feeds_for(model, np.float16)
    np.testing.assert_array_equal(fused.run(None, feeds)[0], plain.run(None, feeds)[0])


@pytest.mark.parametrize("kwargs", [
    {"extra_output": "probs"},   # an intermediate the caller fetches
    {"extra_output": "scores"},
    {"guard_value": 1.0},        # Where(IsNaN) to something other than 0: not torch's guard
])
def test_near_misses_are_left_alone(kwargs) -> None:  # type: ignore[no-untyped-def]
    model = sdpa_model(**kwargs)
    fused = run_all(model, feeds_for(model))
    assert fused_count(fused) == 0


def test_whole_block_pattern_keeps_fused_attention() -> None:
    """BERT-style blocks with constant head shapes still become the whole-block op."""
    from test_attention_fusion import attention_model
    from test_attention_fusion import feeds_for as block_feeds

    model = attention_model()
    session = epoxy.InferenceSession(model, providers=["cpu"])
    ops = [n.op_type for n in session._graph.nodes]
    assert ops.count("FusedAttention") == 1 and "FusedAttentionCore" not in ops
    session.run(None, block_feeds(model))


def test_a_scale_that_raises_the_rank_stays_a_node() -> None:
    """``Mul(q, c)`` with c of shape (1, 1, 1, 1) on a rank-3 q broadcasts q to rank 4: that
    Mul is not folded into the fused op as a number (the result keeps onnxruntime's shape)."""
    n = helper.make_node
    graph = helper.make_graph(
        [n("Mul", ["q", "c"], ["qs"]), n("MatMul", ["qs", "k"], ["s"]), n("Softmax", ["s"], ["p"], axis=-1),
         n("MatMul", ["p", "v"], ["y"])], "rank",
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, [3, 4, 2]),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, [3, 2, 5]),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [3, 5, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [_const("c", np.full((1, 1, 1, 1), 0.5, np.float32))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {name: RNG.standard_normal(shape).astype(np.float32)
             for name, shape in (("q", (3, 4, 2)), ("k", (3, 2, 5)), ("v", (3, 5, 2)))}
    fused = run_all(onnx.shape_inference.infer_shapes(model), feeds)
    ops = [node.op_type for node in fused._graph.nodes]
    assert ops == ["Mul", "FusedAttentionCore"]
    assert fused.run(None, feeds)[0].shape == (1, 3, 4, 2)


def test_a_guard_whose_zero_raises_the_rank_is_left_alone() -> None:
    """``Where(IsNaN(p), zero, p)`` with a zero of more dims than ``p`` broadcasts the result to
    that rank: not torch's guard, so the core is not fused around it."""
    n = helper.make_node
    graph = helper.make_graph(
        [n("MatMul", ["q", "k"], ["s"]), n("Softmax", ["s"], ["p"], axis=-1), n("IsNaN", ["p"], ["nan"]),
         n("Where", ["nan", "zero", "p"], ["safe"]), n("MatMul", ["safe", "v"], ["y"])], "guard",
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, [3, 4, 2]),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, [3, 2, 5]),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [3, 5, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [_const("zero", np.zeros((1, 1, 1, 1), np.float32))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {name: RNG.standard_normal(shape).astype(np.float32)
             for name, shape in (("q", (3, 4, 2)), ("k", (3, 2, 5)), ("v", (3, 5, 2)))}
    fused = run_all(onnx.shape_inference.infer_shapes(model), feeds)
    assert fused_count(fused) == 0
    assert fused.run(None, feeds)[0].shape == (1, 3, 4, 2)
