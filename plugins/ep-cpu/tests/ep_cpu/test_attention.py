"""Attention-style kernels of the cpu provider: Attention, RotaryEmbedding, FlexAttention,
LinearAttention, CausalConvWithState, SwiGLU, TensorScatter."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from _single_node import node_inputs  # noqa: E402
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import epoxy

RNG = np.random.default_rng(2)


def _model(op, inputs, attrs=None, opset=24, n_out=1, domain="", out_names=None):
    names, vis = node_inputs(inputs)
    while names and names[-1] == "":
        names.pop()
    out_names = out_names or [f"y{i}" for i in range(n_out)]
    outs = []
    for name in out_names:
        if name:
            vi = onnx.ValueInfoProto()
            vi.name = name
            outs.append(vi)
    node = helper.make_node(op, names, out_names, domain=domain, **(attrs or {}))
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(helper.make_graph([node], "g", vis, outs), opset_imports=opsets)
    return onnx.shape_inference.infer_shapes(model)


def _both(op, inputs, attrs=None, opset=24, n_out=1, domain="", out_names=None):
    model = _model(op, inputs, attrs, opset, n_out, domain, out_names)
    feeds = {f"x{i}": x for i, x in enumerate(inputs) if x is not None}
    got = epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)
    with np.errstate(all="ignore"):
        want = ReferenceEvaluator(model).run(None, feeds)
    return got, want


def _close(got, want, rtol=1e-5, atol=1e-6):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


def _r(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------------- Attention


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("hkv", [4, 2, 1])
def test_attention_4d_gqa(causal, hkv):
    q, k, v = _r(2, 4, 3, 8), _r(2, hkv, 5, 8), _r(2, hkv, 5, 6)
    got, want = _both("Attention", [q, k, v], {"is_causal": causal}, opset=23)
    _close(got, want)


def test_attention_3d_with_past_and_all_outputs():
    q, k, v = _r(2, 3, 4 * 8), _r(2, 3, 2 * 8), _r(2, 3, 2 * 6)
    pk, pv = _r(2, 2, 5, 8), _r(2, 2, 5, 6)
    mask = RNG.random((3, 8)) > 0.3
    mask[1] = False  # one fully masked row
    attrs = {"q_num_heads": 4, "kv_num_heads": 2, "is_causal": 1, "scale": 0.2, "softcap": 2.0}
    for mode in (1, 2, 3):
        attrs_m = dict(attrs, qk_matmul_output_mode=mode)
        got, want = _both("Attention", [q, k, v, mask, pk, pv], attrs_m, opset=23, n_out=4)
        _close(got, want)


def test_attention_qk_output_mode0_is_raw_matmul():
    # the spec: mode 0 is the raw (scaled) QK product, before softcap (onnx.reference applies the cap)
    q, k, v = _r(1, 2, 3, 4), _r(1, 2, 5, 4), _r(1, 2, 5, 4)
    got, _ = _both("Attention", [q, k, v], {"softcap": 1.0, "scale": 0.5}, opset=23, out_names=["y0", "", "", "y3"])
    np.testing.assert_allclose(got[1], 0.5 * q @ np.swapaxes(k, -1, -2), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mask_shape", [(4, 6), (2, 1, 4, 6), (1, 4, 6), (4, 3)])
def test_attention_float_mask_shapes(mask_shape):
    q, k, v = _r(2, 3, 4, 8), _r(2, 3, 6, 8), _r(2, 3, 6, 8)
    mask = _r(*mask_shape)
    got, want = _both("Attention", [q, k, v, mask], opset=24)
    _close(got, want)


def test_attention_fully_masked_rows_are_zero():
    q, k, v = _r(1, 2, 3, 4), _r(1, 2, 3, 4), _r(1, 2, 3, 4)
    mask = np.array([[True, True, False], [False, False, False], [True, False, True]])
    got, _ = _both("Attention", [q, k, v, mask], {"qk_matmul_output_mode": 3}, opset=24,
                   out_names=["y0", "", "", "y3"])
    assert not np.isnan(got[0]).any()
    np.testing.assert_array_equal(got[0][:, :, 1], 0)
    np.testing.assert_array_equal(got[1][:, :, 1], 0)
    np.testing.assert_allclose(got[1][:, :, [0, 2]].sum(-1), 1, rtol=1e-6)


def test_attention_nonpad_kv_seqlen_causal():
    q, k, v = _r(2, 2, 3, 8), _r(2, 2, 7, 8), _r(2, 2, 7, 8)
    nonpad = np.array([5, 2], np.int64)
    got, want = _both("Attention", [q, k, v, None, None, None, nonpad], {"is_causal": 1}, opset=24)
    _close(got, want)
    assert not np.isnan(got[0]).any()


@pytest.mark.parametrize("left,right,causal", [(2, 0, 1), (1, 1, 0), (-1, 1, 0), (2, -1, 1)])
def test_attention_windows(left, right, causal):
    q, k, v = _r(1, 2, 5, 4), _r(1, 2, 7, 4), _r(1, 2, 7, 4)
    pk, pv = _r(1, 2, 1, 4), _r(1, 2, 1, 4)
    attrs = {"left_window_size": left, "right_window_size": right, "is_causal": causal}
    got, want = _both("Attention", [q, k, v, None, pk, pv], attrs, opset=25, n_out=3)
    _close(got, want)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_attention_dtypes_and_softmax_precision(dtype):
    q, k, v = _r(1, 2, 3, 8, dtype=dtype), _r(1, 2, 4, 8, dtype=dtype), _r(1, 2, 4, 8, dtype=dtype)
    got, want = _both("Attention", [q, k, v], {"softmax_precision": 1, "qk_matmul_output_mode": 3}, opset=24,
                      out_names=["y0", "", "", "y3"])
    tol = 2e-3 if dtype == np.float16 else 1e-10
    _close(got, want, rtol=tol, atol=tol)


def test_attention_bfloat16():
    bf = ml_dtypes.bfloat16
    q, k, v = _r(1, 2, 3, 8, dtype=bf), _r(1, 2, 4, 8, dtype=bf), _r(1, 2, 4, 8, dtype=bf)
    got, want = _both("Attention", [q, k, v], {"is_causal": 1}, opset=23)
    _close(got, want, rtol=2e-2, atol=2e-2)


def test_attention_empty_query():
    q, k, v = _r(1, 2, 0, 4), _r(1, 2, 3, 4), _r(1, 2, 3, 4)
    model = _model("Attention", [q, k, v], opset=23)
    (y,) = epoxy.InferenceSession(model, providers=["cpu"]).run(None, {"x0": q, "x1": k, "x2": v})
    assert y.shape == (1, 2, 0, 4) and y.dtype == np.float32


# ------------------------------------------------------------------ RotaryEmbedding


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rot_dim", [0, 4])
def test_rotary_embedding_position_ids(interleaved, rot_dim):
    x = _r(2, 3, 5, 8)
    half = (rot_dim or 8) // 2
    cos, sin = _r(10, half), _r(10, half)
    pos = RNG.integers(0, 10, (2, 5)).astype(np.int64)
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": rot_dim}
    got, want = _both("RotaryEmbedding", [x, cos, sin, pos], attrs, opset=23)
    _close(got, want)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_3d_no_position_ids(interleaved):
    x = _r(2, 5, 3 * 8)
    cos, sin = _r(2, 5, 4), _r(2, 5, 4)
    got, want = _both("RotaryEmbedding", [x, cos, sin], {"num_heads": 3, "interleaved": interleaved}, opset=23)
    _close(got, want)


def test_rotary_embedding_float16():
    x = _r(1, 2, 3, 4, dtype=np.float16)
    cos, sin = _r(3, 2, dtype=np.float16), _r(3, 2, dtype=np.float16)
    pos = np.array([[0, 2, 1]], np.int64)
    got, want = _both("RotaryEmbedding", [x, cos, sin, pos], opset=23)
    _close(got, want, rtol=2e-3, atol=2e-3)


# ------------------------------------------------------------------ FlexAttention


def _flex_model(mod_graph=None, kind="score_mod", hkv=2):
    q = helper.make_tensor_value_info("Q", TensorProto.FLOAT, [1, 4, 3, 8])
    k = helper.make_tensor_value_info("K", TensorProto.FLOAT, [1, hkv, 5, 8])
    v = helper.make_tensor_value_info("V", TensorProto.FLOAT, [1, hkv, 5, 6])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4, 3, 6])
    attrs = {kind: mod_graph} if mod_graph is not None else {}
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview", scale=0.3, **attrs)
    return helper.make_model(
        helper.make_graph([node], "g", [q, k, v], [y]),
        opset_imports=[helper.make_opsetid("", 24), helper.make_opsetid("ai.onnx.preview", 1)],
    )


def _mod_graph(op, const):
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, ["B", "H", "L", "S"])
    o = helper.make_tensor_value_info("o", TensorProto.FLOAT, ["B", "H", "L", "S"])
    c = helper.make_tensor("c", TensorProto.FLOAT, [], [const])
    return helper.make_graph([helper.make_node(op, ["s", "c"], ["o"])], "mod", [s], [o], initializer=[c])


@pytest.mark.parametrize("kind,op,const", [(None, None, None), ("score_mod", "Add", 0.5), ("prob_mod", "Mul", 2.0)])
def test_flex_attention(kind, op, const):
    model = _flex_model(_mod_graph(op, const) if kind else None, kind or "score_mod")
    feeds = {"Q": _r(1, 4, 3, 8), "K": _r(1, 2, 5, 8), "V": _r(1, 2, 5, 6)}
    (got,) = epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    _close([got], [want])


# ------------------------------------------------------------------ LinearAttention


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("per_head_decay", [False, True])
def test_linear_attention_rules(rule, per_head_decay):
    b, t, hq, hkv, dk, dv = 2, 4, 4, 2, 3, 5
    q, k, v = _r(b, t, hq * dk), _r(b, t, hkv * dk) * 0.5, _r(b, t, hkv * dv)
    past = _r(b, hkv, dk, dv)
    decay = -np.abs(_r(b, t, hkv if per_head_decay else hkv * dk)) if "gated" in rule else None
    beta = RNG.random((b, t, hkv)).astype(np.float32) if "delta" in rule else None
    attrs = {"q_num_heads": hq, "kv_num_heads": hkv, "update_rule": rule}
    got, want = _both("LinearAttention", [q, k, v, past, decay, beta], attrs, opset=27, n_out=2)
    _close(got, want, rtol=1e-4, atol=1e-5)


def test_linear_attention_no_past_scale():
    q, k, v = _r(1, 3, 2 * 4), _r(1, 3, 2 * 4), _r(1, 3, 2 * 4)
    attrs = {"q_num_heads": 2, "kv_num_heads": 2, "update_rule": "linear", "scale": 0.7}
    got, want = _both("LinearAttention", [q, k, v], attrs, opset=27, n_out=2)
    _close(got, want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------- CausalConvWithState


@pytest.mark.parametrize("act", ["none", "silu"])
@pytest.mark.parametrize(
    "ksize,length,with_past,with_bias",
    [(4, 6, True, True), (3, 1, False, False), (1, 3, False, True), (4, 2, False, False)],
)
def test_causal_conv_with_state(act, ksize, length, with_past, with_bias):
    x = _r(2, 3, length)
    w = _r(3, 1, ksize)
    bias = _r(3) if with_bias else None
    past = _r(2, 3, ksize - 1) if with_past else None
    got, want = _both("CausalConvWithState", [x, w, bias, past], {"activation": act}, opset=27, n_out=2)
    _close(got, want)


# ------------------------------------------------------------------ SwiGLU


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_swiglu(dtype):
    a, b = _r(3, 4, dtype=dtype) * 4, _r(3, 4, dtype=dtype)
    got, want = _both("SwiGLU", [a, b], {"alpha": 1.7}, opset=28)
    tol = 2e-3 if dtype == np.float16 else 1e-6
    _close(got, want, rtol=tol, atol=tol)


def test_swiglu_extremes():
    a = np.array([-1e4, -50.0, 0.0, 50.0, 1e4], np.float32)
    b = np.ones_like(a)
    got, want = _both("SwiGLU", [a, b], opset=28)
    assert not np.isnan(got[0]).any()
    _close(got, want)


# ------------------------------------------------------------------ TensorScatter


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_modes(mode):
    past = _r(2, 3, 6, 4)
    upd = _r(2, 3, 2, 4)
    idx = np.array([1, 4] if mode == "linear" else [5, 3], np.int64)
    got, want = _both("TensorScatter", [past, upd, idx], {"mode": mode}, opset=24)
    _close(got, want)
    assert not np.shares_memory(got[0], past)


def test_tensor_scatter_axis_and_defaults():
    past = np.zeros((2, 5, 3), np.int32)
    upd = np.arange(2 * 2 * 3, dtype=np.int32).reshape(2, 2, 3)
    got, want = _both("TensorScatter", [past, upd], {"axis": 1}, opset=24)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(past, 0)  # input untouched
