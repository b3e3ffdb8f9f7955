"""Attention-style ops: Attention, RotaryEmbedding, FlexAttention, LinearAttention,
CausalConvWithState, SwiGLU, TensorScatter.

Everything is batched numpy: scores are one ``matmul`` over [batch, heads, q, kv]; masks
are additive biases (boolean masks and structural masks become ``0``/``-inf``); rows with
no visible key produce zeros instead of NaN. Reduced-precision inputs (float16, bfloat16)
are computed in float32 and rounded once at the end.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._attention_util import (
    compute_dtype,
    masked_softmax,
    merge_heads,
    precision_dtype,
    repeat_kv,
    rotate,
    sigmoid,
    split_heads,
)
from ._flags import flag
from ._util import normalize_axis

# ---------------------------------------------------------------------------------------
# Attention (opset 23, 24: nonpad_kv_seqlen, 25: sliding windows)
# ---------------------------------------------------------------------------------------


def _structural_allowed(
    sq: int,
    total: int,
    offset: np.ndarray,
    causal: bool,
    left: int,
    right: int,
    nonpad: np.ndarray | None,
) -> np.ndarray | None:
    """Boolean [B|1, 1, Sq, T] of visible keys from causality, windows and padding."""
    if not causal and left < 0 and right < 0 and nonpad is None:
        return None
    i = np.arange(sq, dtype=np.int64)[None, :, None]
    j = np.arange(total, dtype=np.int64)[None, None, :]
    pos = offset.reshape(-1, 1, 1) + i  # absolute query position [B|1, Sq, 1]
    allowed = np.ones((pos.shape[0], sq, total), dtype=bool)
    if causal:
        allowed &= j <= pos
    if left >= 0:
        allowed &= j >= pos - left
    if right >= 0:
        allowed &= j <= pos + right
    if nonpad is not None:
        allowed &= j < nonpad.reshape(-1, 1, 1)
    return allowed[:, None, :, :]


def _mask_bias(mask: np.ndarray, total: int, cd: np.dtype) -> np.ndarray:
    """attn_mask as an additive bias; a short last dim is padded with -inf."""
    if mask.dtype == np.bool_:
        bias = np.where(mask, cd.type(0), cd.type(-np.inf)).astype(cd)
    else:
        bias = mask.astype(cd)
    last = bias.shape[-1] if bias.ndim else 1
    if bias.ndim and last < total:
        pad = np.full(bias.shape[:-1] + (total - last,), -np.inf, dtype=cd)
        bias = np.concatenate([bias, pad], axis=-1)
    return bias


@KERNELS.register("Attention", (23, 24, 25))
def attention(node: NodeSpec):
    q_heads_attr = node.attr("q_num_heads")
    kv_heads_attr = node.attr("kv_num_heads")
    scale_attr = node.attr("scale")
    causal = flag(node, "is_causal", 0)
    softcap = float(node.attr("softcap", 0.0))
    mode = int(node.attr("qk_matmul_output_mode", 0))
    sm_dtype = precision_dtype(node.attr("softmax_precision"))
    left = int(node.attr("left_window_size", -1)) if node.opset >= 25 else -1
    right = int(node.attr("right_window_size", -1)) if node.opset >= 25 else -1
    if mode not in (0, 1, 2, 3):
        raise Unsupported(f"qk_matmul_output_mode={mode}")
    n_out = len(node.outputs)
    want_qk = n_out > 3 and node.outputs[3] != ""

    def run(
        Q, K, V, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None
    ):
        three_d = Q.ndim == 3
        if three_d:
            if not q_heads_attr or not kv_heads_attr:
                raise ValueError("3-D Attention inputs need q_num_heads and kv_num_heads")
            q = split_heads(Q, int(q_heads_attr))
            k = split_heads(K, int(kv_heads_attr))
            v = split_heads(V, int(kv_heads_attr))
        else:
            q, k, v = Q, K, V
        past_len = 0
        if past_key is not None:
            past_len = past_key.shape[2]
            k = np.concatenate([past_key, k.astype(past_key.dtype, copy=False)], axis=2)
        if past_value is not None:
            v = np.concatenate([past_value, v.astype(past_value.dtype, copy=False)], axis=2)
        present_k, present_v = k, v
        batch, hq, sq, head = q.shape
        total = k.shape[2]
        out_dt = Q.dtype
        cd = compute_dtype(out_dt)
        scale = float(scale_attr) if scale_attr is not None else 1.0 / math.sqrt(head)
        root = cd.type(math.sqrt(scale))
        qs = q.astype(cd) * root
        ks = repeat_kv(k.astype(cd), hq) * root
        scores = qs @ np.swapaxes(ks, -1, -2)  # [B, Hq, Sq, T]
        qk_out = scores if mode == 0 else None
        if softcap > 0:
            cap = cd.type(softcap)
            scores = cap * np.tanh(scores / cap)
        if mode == 1:
            qk_out = scores
        if past_key is not None:
            offset = np.asarray([past_len], dtype=np.int64)
        elif nonpad_kv_seqlen is not None:
            offset = np.asarray(nonpad_kv_seqlen, dtype=np.int64).reshape(-1) - sq
        else:
            offset = np.zeros(1, dtype=np.int64)
        nonpad = None if nonpad_kv_seqlen is None else np.asarray(nonpad_kv_seqlen, dtype=np.int64).reshape(-1)
        allowed = _structural_allowed(sq, total, offset, causal, left, right, nonpad)
        if attn_mask is not None:
            scores = scores + _mask_bias(attn_mask, total, cd)
        if allowed is not None:
            scores = np.where(allowed, scores, cd.type(-np.inf))
        if mode == 2:
            qk_out = np.broadcast_to(scores, (batch, hq, sq, total))
        if sm_dtype is not None and sm_dtype != cd:
            probs = masked_softmax(scores.astype(sm_dtype)).astype(cd)
        else:
            probs = masked_softmax(scores)
        if mode == 3:
            qk_out = probs
        y = probs @ repeat_kv(v.astype(cd), hq)
        y = y.astype(out_dt)
        if three_d:
            y = merge_heads(y)
        outs: list[Any] = [y]
        if n_out > 1:
            outs.append(present_k if node.outputs[1] else None)
        if n_out > 2:
            outs.append(present_v if node.outputs[2] else None)
        if n_out > 3:
            outs.append(np.ascontiguousarray(qk_out).astype(out_dt) if want_qk else None)
        return tuple(outs) if n_out > 1 else outs[0]

    return run


# ---------------------------------------------------------------------------------------
# RotaryEmbedding (opset 23)
# ---------------------------------------------------------------------------------------


@KERNELS.register("RotaryEmbedding", 23)
def rotary_embedding(node: NodeSpec):
    num_heads = int(node.attr("num_heads", 0) or 0)
    rot_dim_attr = int(node.attr("rotary_embedding_dim", 0) or 0)
    interleaved = flag(node, "interleaved", 0)

    def run(X, cos_cache, sin_cache, position_ids=None):
        if X.ndim == 4:
            x = X.transpose(0, 2, 1, 3)  # [B, S, H, D]
        elif X.ndim == 3:
            if num_heads <= 0:
                raise ValueError("RotaryEmbedding with a 3-D input needs num_heads")
            b, s, hidden = X.shape
            x = X.reshape(b, s, num_heads, hidden // num_heads)
        else:
            raise ValueError(f"RotaryEmbedding input must be 3-D or 4-D, got rank {X.ndim}")
        cd = compute_dtype(X.dtype)
        head = x.shape[-1]
        rot = rot_dim_attr or head
        half = rot // 2
        cos = cos_cache if position_ids is None else cos_cache[np.asarray(position_ids, dtype=np.int64)]
        sin = sin_cache if position_ids is None else sin_cache[np.asarray(position_ids, dtype=np.int64)]
        if cos.shape[-1] != half or sin.shape[-1] != half:
            raise ValueError(f"cos/sin cache last dim must be rotary_embedding_dim/2 = {half}")
        out = np.concatenate([rotate(x[..., :rot].astype(cd), cos, sin, interleaved).astype(X.dtype),
                              x[..., rot:]], axis=-1)
        if X.ndim == 4:
            return np.ascontiguousarray(out.transpose(0, 2, 1, 3))
        return out.reshape(X.shape)

    return run


# ---------------------------------------------------------------------------------------
# FlexAttention (ai.onnx.preview 1): score_mod / prob_mod subgraphs run as nested sessions
# ---------------------------------------------------------------------------------------


def _subgraph_runner(graph: Any, node: NodeSpec):
    """A callable running a one-input/one-output modifier subgraph through epoxy itself."""
    if graph is None:
        return None
    import onnx
    import onnx.defs
    import onnx_ir as ir

    import epoxy

    proto = graph if isinstance(graph, onnx.GraphProto) else ir.serde.serialize_graph(graph)
    opsets = dict(getattr(graph, "opset_imports", {}) or {})
    opsets.setdefault("", onnx.defs.onnx_opset_version())
    model = onnx.helper.make_model(
        proto, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in opsets.items()]
    )
    try:
        session = epoxy.InferenceSession(model, providers=["cpu"])
    except Exception as exc:  # noqa: BLE001 - e.g. a subgraph reading outer-scope values
        raise Unsupported(f"{node.op_type}: cannot run modifier subgraph: {exc}") from exc
    if len(proto.input) != 1 or len(proto.output) != 1:
        raise Unsupported(f"{node.op_type}: modifier subgraphs take one input and give one output")
    in_name = proto.input[0].name

    def call(x: np.ndarray) -> np.ndarray:
        return np.asarray(session.run(None, {in_name: x})[0])

    return call


@KERNELS.register("FlexAttention", 1, domain="ai.onnx.preview")
def flex_attention(node: NodeSpec):
    scale_attr = node.attr("scale")
    sm_attr = precision_dtype(node.attr("softmax_precision"))
    score_mod = _subgraph_runner(node.attr("score_mod"), node)
    prob_mod = _subgraph_runner(node.attr("prob_mod"), node)

    def run(Q, K, V):
        out_dt = Q.dtype
        sm = sm_attr or compute_dtype(out_dt)
        head = Q.shape[-1]
        scale = float(scale_attr) if scale_attr is not None else 1.0 / math.sqrt(head)
        hq = Q.shape[1]
        k = repeat_kv(K.astype(sm), hq)
        v = repeat_kv(V.astype(sm), hq)
        scores = (Q.astype(sm) @ np.swapaxes(k, -1, -2)) * sm.type(scale)
        if score_mod is not None:
            scores = score_mod(scores).astype(sm, copy=False)
        probs = masked_softmax(scores)
        if prob_mod is not None:
            probs = prob_mod(probs).astype(sm, copy=False)
        return (probs @ v).astype(out_dt)

    return run


# ---------------------------------------------------------------------------------------
# LinearAttention (opset 27)
# ---------------------------------------------------------------------------------------


@KERNELS.register("LinearAttention", 27)
def linear_attention(node: NodeSpec):
    hq = int(node.attr("q_num_heads", 0) or 0)
    hkv = int(node.attr("kv_num_heads", 0) or 0)
    if hq <= 0 or hkv <= 0 or hq % hkv:
        raise Unsupported(f"LinearAttention needs q_num_heads a positive multiple of kv_num_heads ({hq}, {hkv})")
    rule = node.attr("update_rule", "gated_delta")
    rule = rule.decode() if isinstance(rule, bytes) else str(rule)
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise Unsupported(f"unknown update_rule {rule!r}")
    scale_attr = float(node.attr("scale", 0.0) or 0.0)
    state_dt_static = node.output_types[1].dtype if len(node.output_types) > 1 else None
    group = hq // hkv

    def run(query, key, value, past_state=None, decay=None, beta=None):
        out_dt = query.dtype
        cd = compute_dtype(out_dt)
        b, t, _ = query.shape
        dk = query.shape[-1] // hq
        dv = value.shape[-1] // hkv
        scale = scale_attr if scale_attr != 0.0 else 1.0 / math.sqrt(dk)
        q = query.astype(cd).reshape(b, t, hkv, group, dk)
        k = key.astype(cd).reshape(b, t, hkv, dk)
        v = value.astype(cd).reshape(b, t, hkv, dv)
        gated = rule in ("gated", "gated_delta")
        delta = rule in ("delta", "gated_delta")
        if gated:
            if decay is None:
                raise ValueError(f"update_rule {rule!r} needs the decay input")
            g = np.exp(decay.astype(cd))
            if g.shape[-1] == hkv * dk:
                g = g.reshape(b, t, hkv, dk, 1)
            else:  # per-head scalar decay
                g = np.broadcast_to(g.reshape(b, t, -1), (b, t, hkv)).reshape(b, t, hkv, 1, 1)
        if delta:
            if beta is None:
                raise ValueError(f"update_rule {rule!r} needs the beta input")
            bt = np.broadcast_to(beta.astype(cd).reshape(b, t, -1), (b, t, hkv)).reshape(b, t, hkv, 1)
        state = np.zeros((b, hkv, dk, dv), dtype=cd) if past_state is None else past_state.astype(cd)
        out = np.empty((b, t, hkv, group, dv), dtype=cd)
        for step in range(t):  # the recurrence is sequential in time
            kt, vt = k[:, step], v[:, step]
            if gated:
                state = g[:, step] * state
            if delta:
                pred = np.einsum("bhkv,bhk->bhv", state, kt)
                vt = bt[:, step] * (vt - pred)
            state = state + kt[..., :, None] * vt[..., None, :]
            out[:, step] = np.einsum("bhgk,bhkv->bhgv", q[:, step], state)
        y = (out * cd.type(scale)).reshape(b, t, hq * dv).astype(out_dt)
        state_dt = past_state.dtype if past_state is not None else (state_dt_static or out_dt)
        return y, state.astype(state_dt)

    return run


# ---------------------------------------------------------------------------------------
# CausalConvWithState (opset 27)
# ---------------------------------------------------------------------------------------


@KERNELS.register("CausalConvWithState", 27)
def causal_conv_with_state(node: NodeSpec):
    act = node.attr("activation", "none")
    act = (act.decode() if isinstance(act, bytes) else str(act)).lower()
    if act not in ("none", "silu", "swish"):
        raise Unsupported(f"unknown activation {act!r}")

    def run(input, weight, bias=None, past_state=None):  # noqa: A002
        out_dt = input.dtype
        cd = compute_dtype(out_dt)
        b, c, length = input.shape
        ksize = weight.shape[-1]
        if past_state is None:
            past = np.zeros((b, c, ksize - 1), dtype=cd)
        else:
            past = past_state.astype(cd)
        padded = np.concatenate([past, input.astype(cd)], axis=2)  # [B, C, k-1+L]
        windows = np.lib.stride_tricks.sliding_window_view(padded, ksize, axis=2)  # [B, C, L, k]
        y = np.einsum("bclk,ck->bcl", windows, weight.reshape(c, ksize).astype(cd))
        if bias is not None:
            y = y + bias.astype(cd)[None, :, None]
        if act != "none":
            y = y * sigmoid(y)
        present = padded[:, :, padded.shape[2] - (ksize - 1):] if ksize > 1 else padded[:, :, :0]
        return y.astype(out_dt), np.ascontiguousarray(present).astype(out_dt)

    return run


# ---------------------------------------------------------------------------------------
# SwiGLU (opset 28)
# ---------------------------------------------------------------------------------------


@KERNELS.register("SwiGLU", 28)
def swiglu(node: NodeSpec):
    alpha = float(node.attr("alpha", 1.0))

    def run(A, B):
        if A.shape != B.shape:
            raise ValueError(f"SwiGLU inputs must have identical shapes, got {A.shape} and {B.shape}")
        cd = compute_dtype(A.dtype)
        a = A.astype(cd)
        return (a * sigmoid(a * cd.type(alpha)) * B.astype(cd)).astype(A.dtype)

    return run


# ---------------------------------------------------------------------------------------
# TensorScatter (opset 24)
# ---------------------------------------------------------------------------------------


@KERNELS.register("TensorScatter", 24)
def tensor_scatter(node: NodeSpec):
    axis_attr = int(node.attr("axis", -2))
    mode = node.attr("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("linear", "circular"):
        raise Unsupported(f"unknown TensorScatter mode {mode!r}")

    def run(past_cache, update, write_indices=None):
        rank = past_cache.ndim
        axis = normalize_axis(axis_attr, rank)
        if not 1 <= axis < rank:
            raise ValueError(f"TensorScatter axis {axis_attr} invalid for rank {rank}")
        present = past_cache.copy()
        batch = past_cache.shape[0]
        max_len = past_cache.shape[axis]
        seq = update.shape[axis]
        if seq == 0 or batch == 0:
            return present
        if write_indices is None:
            starts = np.zeros(batch, dtype=np.int64)
        else:
            starts = np.asarray(write_indices, np.int64).reshape(-1)
        idx = starts[:, None] + np.arange(seq, dtype=np.int64)[None, :]  # [B, S]
        if mode == "circular":
            idx = idx % max_len
        elif np.any(idx >= max_len) or np.any(idx < 0):
            raise ValueError("TensorScatter linear mode writes past max_sequence_length")
        dst = np.moveaxis(present, axis, -1)  # view [B, ..., M]
        src = np.moveaxis(update, axis, -1)  # [B, ..., S]
        idx = idx.reshape((batch,) + (1,) * (src.ndim - 2) + (seq,))
        np.put_along_axis(dst, np.broadcast_to(idx, src.shape), src, axis=-1)
        return present

    return run
