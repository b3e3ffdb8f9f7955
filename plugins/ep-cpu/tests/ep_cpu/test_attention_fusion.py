"""Attention written out in standard ops -> com.epoxy.cpu::FusedAttention (cpu-scoped, level
``basic``): the pass fires on the pattern and variants, leaves near-misses alone, and the
kernel gives the op-by-op results (fast path, planned ``out=`` buffers, float16 fallback)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy_ep_cpu.ops.fused import DOMAIN

RNG = np.random.default_rng(7)


def init(name, array):  # type: ignore[no-untyped-def]
    return numpy_helper.from_array(np.asarray(array), name)


def attention_model(b=2, s=5, sk=None, heads=3, d=4, scale_op="Div", mask_shape=(2, 1, 1, 5), mask_first=False,
                    dtype=TensorProto.FLOAT, q_shape=None, out_shape=None, softmax_axis=-1, opset=17,
                    extra_output=None):  # type: ignore[no-untyped-def]
    """Q/K/V projections + attention + output projection, as BERT exporters write it."""
    sk = s if sk is None else sk
    hidden = heads * d
    npdt = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    inits = [
        init("wq", (RNG.standard_normal((hidden, hidden)) * 0.3).astype(npdt)),
        init("wk", (RNG.standard_normal((hidden, hidden)) * 0.3).astype(npdt)),
        init("wv", (RNG.standard_normal((hidden, hidden)) * 0.3).astype(npdt)),
        init("wo", (RNG.standard_normal((hidden, hidden)) * 0.3).astype(npdt)),
        init("heads", np.array(q_shape or [0, 0, heads, d], np.int64)),
        init("merged", np.array(out_shape or [0, 0, hidden], np.int64)),
        init("c", np.array(math.sqrt(d) if scale_op == "Div" else 1 / math.sqrt(d), npdt)),
    ]
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "wq"], ["q"]), n("MatMul", ["kv", "wk"], ["k"]), n("MatMul", ["kv", "wv"], ["v"]),
        n("Reshape", ["q", "heads"], ["q4"]), n("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
        n("Reshape", ["k", "heads"], ["k4"]), n("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        n("Reshape", ["v", "heads"], ["v4"]), n("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3]),
        n("MatMul", ["qt", "kt"], ["scores"]),
    ]
    last = "scores"
    if scale_op:
        nodes.append(n(scale_op, [last, "c"], ["scaled"]))
        last = "scaled"
    inputs = [helper.make_tensor_value_info("x", dtype, [b, s, hidden]),
              helper.make_tensor_value_info("kv", dtype, [b, sk, hidden])]
    if mask_shape is not None:
        nodes.append(n("Add", ["mask", last] if mask_first else [last, "mask"], ["masked"]))
        last = "masked"
        inputs.append(helper.make_tensor_value_info("mask", dtype, list(mask_shape)))
    nodes += [
        n("Softmax", [last], ["probs"], axis=softmax_axis),
        n("MatMul", ["probs", "vt"], ["ctx"]), n("Transpose", ["ctx"], ["ctxt"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctxt", "merged"], ["merged_out"]), n("MatMul", ["merged_out", "wo"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", dtype, None)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(extra_output, dtype, None))
    g = helper.make_graph(nodes, "attn", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


def feeds_for(model, dtype=np.float32):  # type: ignore[no-untyped-def]
    out = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        a = RNG.standard_normal(shape)
        if vi.name == "mask":
            a = np.where(RNG.random(shape) < 0.3, -10000.0, 0.0)
        out[vi.name] = a.astype(dtype)
    return out


def ops(session):  # type: ignore[no-untyped-def]
    return [n.op_type for n in session._graph.nodes]


def run_both(model, feeds, level="basic", rtol=1e-5, atol=1e-6):  # type: ignore[no-untyped-def]
    plain = epoxy.InferenceSession(model, providers=["cpu"],
                                   sess_options=epoxy.SessionOptions(graph_optimization_level="disable"))
    fused = epoxy.InferenceSession(model, providers=["cpu"],
                                   sess_options=epoxy.SessionOptions(graph_optimization_level=level))
    want = plain.run(None, feeds)
    for _ in range(2):  # the second run reuses planned buffers
        got = fused.run(None, feeds)
        for a, b in zip(want, got):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_allclose(b, a, rtol=rtol, atol=atol)
    return fused


@pytest.mark.parametrize("kwargs", [
    {},
    {"scale_op": "Mul"},
    {"scale_op": None},
    {"mask_shape": None},
    {"mask_first": True},
    {"mask_shape": (2, 3, 5, 5)},          # full mask
    {"mask_shape": (5,)},                  # low-rank mask broadcasting on the keys
    {"b": 1, "s": 4, "sk": 6, "mask_shape": (1, 1, 1, 6)},  # cross-attention: different key length
    {"q_shape": [2, -1, 3, 4]},            # concrete and inferred dims in the head reshape
    {"out_shape": [-1, 12]},               # merged to 2-D
    {"softmax_axis": 3},
    {"softmax_axis": 3, "opset": 11},      # legacy Softmax coerces at axis 3 == last axis
])
def test_pattern_is_fused_and_exact(kwargs):  # type: ignore[no-untyped-def]
    m = attention_model(**kwargs)
    fused = run_both(m, feeds_for(m))
    assert ops(fused).count("FusedAttention") == 1
    assert "Softmax" not in ops(fused) and "Transpose" not in ops(fused)
    assert fused._model.opset_imports[DOMAIN] >= 1


def test_mask_broadcasting_beyond_scores_runs_generic_path():  # type: ignore[no-untyped-def]
    # mask batch 3 vs scores batch 1: the Add grows the scores; still the op-by-op result
    m = attention_model(b=1, mask_shape=(3, 1, 1, 5), out_shape=[-1, 5, 12])
    fused = run_both(m, feeds_for(m))
    assert "FusedAttention" in ops(fused)


def test_float16_uses_op_by_op_kernels():  # type: ignore[no-untyped-def]
    m = attention_model(dtype=TensorProto.FLOAT16)
    fused = run_both(m, feeds_for(m, np.float16), rtol=1e-3, atol=1e-3)
    assert "FusedAttention" in ops(fused)


def test_float64():  # type: ignore[no-untyped-def]
    m = attention_model(dtype=TensorProto.DOUBLE)
    fused = run_both(m, feeds_for(m, np.float64), rtol=1e-12, atol=1e-12)
    assert "FusedAttention" in ops(fused)


def test_fully_masked_row_matches():  # type: ignore[no-untyped-def]
    m = attention_model(mask_shape=(2, 1, 1, 5))
    feeds = feeds_for(m)
    feeds["mask"][:] = -np.inf
    plain = epoxy.InferenceSession(m, providers=["cpu"],
                                   sess_options=epoxy.SessionOptions(graph_optimization_level="disable"))
    fused = epoxy.InferenceSession(m, providers=["cpu"])
    assert "FusedAttention" in ops(fused)
    np.testing.assert_array_equal(np.isnan(fused.run(None, feeds)[0]), np.isnan(plain.run(None, feeds)[0]))


@pytest.mark.parametrize("kwargs", [
    {"softmax_axis": 2},
    {"softmax_axis": 1},
    {"extra_output": "probs"},   # an intermediate is a graph output
    {"extra_output": "qt"},
])
def test_near_misses_are_left_alone(kwargs):  # type: ignore[no-untyped-def]
    m = attention_model(**kwargs)
    fused = run_both(m, feeds_for(m))
    assert "FusedAttention" not in ops(fused)


def test_wrong_key_perm_is_left_alone():  # type: ignore[no-untyped-def]
    m = attention_model(s=4, d=4, mask_shape=None)  # S == d keeps the wrong perm valid
    for node in m.graph.node:
        if node.output[0] == "kt":
            node.attribute[0].ints[:] = [0, 2, 1, 3]
    fused = run_both(m, feeds_for(m))
    assert "FusedAttention" not in ops(fused)


def test_not_fused_when_cpu_is_not_first_choice():  # type: ignore[no-untyped-def]
    from epoxy.optimize.pipeline import optimize  # noqa: F401  (scope logic lives there)
    from epoxy_ep_cpu.plugin import epoxy_register_passes

    entries = []
    epoxy_register_passes(lambda p, level, providers: entries.append((type(p).__name__, level, providers)))
    assert ("CpuAttentionFusionPass", "basic", ("cpu",)) in entries


def test_bert_encoder_fused_matches_unfused():  # type: ignore[no-untyped-def]
    import importlib.util

    path = Path(__file__).resolve().parents[4] / "bench" / "models.py"
    spec = importlib.util.spec_from_file_location("_epoxy_bench_models", path)
    bench_models = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench_models  # dataclasses look their module up
    spec.loader.exec_module(bench_models)
    model = bench_models.build_bert({"hidden": 64, "heads": 4, "ffn": 128, "layers": 2, "seq": 16, "vocab": 100})
    feeds = {
        "input_ids": RNG.integers(0, 100, (1, 16)).astype(np.int64),
        "token_type_ids": RNG.integers(0, 2, (1, 16)).astype(np.int64),
        "attention_mask": (np.arange(16) < 11).astype(np.int64)[None, :],
    }
    fused = run_both(model, feeds, rtol=1e-4, atol=1e-5)
    assert ops(fused).count("FusedAttention") == 2
    fused_ext = run_both(model, feeds, level="extended", rtol=1e-4, atol=1e-5)
    assert ops(fused_ext).count("FusedAttention") == 2
