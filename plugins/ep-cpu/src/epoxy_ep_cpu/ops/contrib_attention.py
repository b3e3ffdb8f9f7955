"""onnxruntime's transformer attention ops (domain com.microsoft): Attention (packed QKV
projection), MultiHeadAttention, GroupQueryAttention and RotaryEmbedding.

Scores are one batched ``matmul`` over [batch, heads, q, kv] in float32 (float64 for
double inputs). Masks follow onnxruntime: padding masks add ``mask_filter_value``
(default -10000) to the scores, so a row with every key masked averages them rather than
giving NaN; structural masks (causal, GroupQueryAttention's lengths and window) drop keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._attention_util import compute_dtype, masked_softmax, merge_heads, repeat_kv, rotate, split_heads
from ._contrib_util import bad_attribute

MS = "com.microsoft"


def _outputs(node: NodeSpec, values: list[Any]) -> Any:
    """Only the outputs the node names (``""`` ones as None); one output unwrapped."""
    n = len(node.outputs)
    outs = [v if i < len(values) and node.outputs[i] else None for i, v in enumerate(values[:n])]
    outs += [None] * (n - len(outs))
    return outs[0] if n == 1 else tuple(outs)


def _attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, bias: np.ndarray | None = None,
            allowed: np.ndarray | None = None, softcap: float = 0.0, sink: np.ndarray | None = None) -> np.ndarray:
    """softmax(q k^T * scale [softcapped] + bias, keys outside ``allowed`` dropped) v.

    q [B, Hq, S, D], k/v [B, Hkv, T, D] in the compute dtype (kv heads shared by groups of
    query heads); ``sink`` [Hq] adds one extra logit per head to each softmax denominator."""
    hq = q.shape[1]
    cd = q.dtype
    scores = q @ np.swapaxes(repeat_kv(k, hq), -1, -2)
    scores *= cd.type(scale)
    if softcap > 0:
        cap = cd.type(softcap)
        scores = cap * np.tanh(scores / cap)
    if bias is not None:
        scores = scores + bias
    if allowed is not None:
        scores = np.where(allowed, scores, cd.type(-np.inf))
    if sink is None:
        probs = masked_softmax(scores)
    else:
        s = sink.astype(cd).reshape(1, -1, 1, 1)
        top = np.maximum(np.max(scores, axis=-1, keepdims=True), s)
        e = np.exp(scores - top)
        probs = e / (np.sum(e, axis=-1, keepdims=True) + np.exp(s - top))
    return probs @ repeat_kv(v, hq)


def _key_mask_bias(mask: np.ndarray, batch: int, sq: int, total: int, past: int, filt: float,
                   cd: np.dtype) -> np.ndarray:
    """onnxruntime's ``mask_index`` / ``key_padding_mask`` as an additive [B, 1, S|1, T] bias.

    1-D [B]: valid key lengths; 1-D [2B]: end then start positions; 2-D [B, T]: 1 keeps a
    key; 3-D [B, S, T]: per query; 4-D [B, 1, M, M]: a window sliced at [past, past+S)."""
    mask = np.asarray(mask)
    j = np.arange(total, dtype=np.int64)
    if mask.ndim == 1:
        if mask.shape[0] == batch:
            keep = j[None, :] < mask.astype(np.int64)[:, None]
        elif mask.shape[0] == 2 * batch:
            end, start = mask[:batch].astype(np.int64), mask[batch:].astype(np.int64)
            keep = (j[None, :] < end[:, None]) & (j[None, :] >= start[:, None])
        else:
            raise Unsupported(f"1-D mask of length {mask.shape[0]} for batch {batch}")
        keep = keep[:, None, None, :]
    elif mask.ndim == 2:
        keep = (mask != 0)[:, None, None, :]
    elif mask.ndim == 3:
        keep = (mask != 0)[:, None, :, :]
    elif mask.ndim == 4:
        keep = mask[:, :, past:past + sq, :total] != 0
    else:
        raise Unsupported(f"mask of rank {mask.ndim}")
    return np.where(keep, cd.type(0), cd.type(filt)).astype(cd)


def _causal(sq: int, total: int, past: int) -> np.ndarray:
    """[S, T] booleans: query i (absolute position past + i) sees keys j <= past + i."""
    return np.arange(total)[None, :] <= past + np.arange(sq)[:, None]


# ---------------------------------------------------------------------------------------
# Attention: input @ weights (+ bias) packs Q, K, V
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PackedAttention:
    """The attributes of Attention-style ops whose projection packs Q, K and V (Attention,
    QAttention), checked once."""

    heads: int
    causal: bool
    sizes: tuple[int, int, int] | None
    scale: float
    mask_filter: float

    @classmethod
    def of(cls, node: NodeSpec) -> PackedAttention:
        heads = node.attr("num_heads")
        if not isinstance(heads, (int, np.integer)) or int(heads) <= 0:
            raise bad_attribute(node, "num_heads", heads, "a positive int")
        causal = int(node.attr("unidirectional", 0) or 0)
        if causal not in (0, 1):
            raise bad_attribute(node, "unidirectional", causal, "0 or 1")
        sizes = node.attr("qkv_hidden_sizes")
        if sizes is not None and (len(sizes) != 3 or any(int(v) <= 0 or int(v) % int(heads) for v in sizes)):
            raise bad_attribute(node, "qkv_hidden_sizes", tuple(sizes), f"3 positive multiples of num_heads={heads}")
        if int(node.attr("do_rotary", 0) or 0):
            raise Unsupported(f"{node.op_type} with do_rotary")
        if int(node.attr("past_present_share_buffer", 0) or 0):
            raise Unsupported(f"{node.op_type} with past_present_share_buffer")
        return cls(int(heads), bool(causal), tuple(int(v) for v in sizes) if sizes else None,
                   float(node.attr("scale", 0.0) or 0.0), float(node.attr("mask_filter_value", -10000.0)))

    def run(self, node: NodeSpec, proj: np.ndarray, dt: np.dtype, mask_index: np.ndarray | None,
            past: np.ndarray | None, attention_bias: np.ndarray | None) -> Any:
        """Attention over ``proj`` [B, S, Q+K+V] (compute dtype); past/present [2, B, N, T, H]."""
        heads = self.heads
        cd = proj.dtype
        batch, sq, width = proj.shape
        qh, kh, vh = self.sizes or (width // 3,) * 3
        q = split_heads(proj[..., :qh], heads)
        k = split_heads(proj[..., qh:qh + kh], heads)
        v = split_heads(proj[..., qh + kh:qh + kh + vh], heads)
        past_len = 0
        if past is not None:
            past_len = past.shape[3]
            k = np.concatenate([past[0].astype(cd, copy=False), k], axis=2)
            v = np.concatenate([past[1].astype(cd, copy=False), v], axis=2)
        total = k.shape[2]
        scale = self.scale or 1.0 / math.sqrt(qh // heads)
        bias_t = None if mask_index is None else _key_mask_bias(mask_index, batch, sq, total, past_len,
                                                                 self.mask_filter, cd)
        if attention_bias is not None:
            ab = attention_bias.astype(cd, copy=False)
            bias_t = ab if bias_t is None else bias_t + ab
        allowed = _causal(sq, total, past_len) if self.causal else None
        y = merge_heads(_attend(q, k, v, scale, bias_t, allowed)).astype(dt, copy=False)
        present = None
        if len(node.outputs) > 1 and node.outputs[1]:
            if kh != vh:
                raise ValueError(f"{node.op_type} node {node.name!r}: present needs equal K and V hidden sizes")
            present = np.stack([k, v]).astype(dt, copy=False)
        return _outputs(node, [y, present])


@KERNELS.register("Attention", 1, domain=MS)
def attention(node: NodeSpec):
    """BERT/GPT-2 self-attention with the QKV projection inside; past/present as
    [2, B, N, T, H]; ``mask_index`` in any of onnxruntime's forms."""
    cfg = PackedAttention.of(node)

    def run(input, weights, bias=None, mask_index=None, past=None, attention_bias=None,
            past_sequence_length=None):
        dt = input.dtype
        cd = compute_dtype(dt)
        proj = input.astype(cd) @ weights.astype(cd, copy=False)
        if bias is not None:
            proj += bias.astype(cd, copy=False)
        return cfg.run(node, proj, dt, mask_index, past, attention_bias)

    return run


# ---------------------------------------------------------------------------------------
# MultiHeadAttention: projected Q, K, V (separate, packed QKV, packed KV or BNSH cache)
# ---------------------------------------------------------------------------------------


@KERNELS.register("MultiHeadAttention", 1, domain=MS)
def multi_head_attention(node: NodeSpec):
    """Attention over already projected inputs; past_key/past_value [B, N, P, H] are
    prepended to the new keys/values and returned as present_key/present_value."""
    heads = int(node.attr("num_heads", 0) or 0)
    if heads <= 0:
        raise Unsupported("MultiHeadAttention needs num_heads")
    causal = bool(node.attr("unidirectional", 0))
    scale_attr = float(node.attr("scale", 0.0) or 0.0)
    filt = float(node.attr("mask_filter_value", -10000.0))
    if len(node.outputs) > 3 and node.outputs[3]:
        raise Unsupported("MultiHeadAttention qk output")

    def run(query, key=None, value=None, bias=None, key_padding_mask=None, attention_bias=None,
            past_key=None, past_value=None, past_sequence_length=None, cache_indirection=None):
        if cache_indirection is not None:
            raise Unsupported("MultiHeadAttention with cache_indirection (beam search)")
        dt = query.dtype
        cd = compute_dtype(dt)
        batch, sq = query.shape[:2]
        b = None if bias is None else bias.astype(cd, copy=False)
        if key is None:  # packed QKV [B, S, N, 3, H]
            qkv = query.astype(cd)
            hd = qkv.shape[-1]
            if b is not None:
                qkv = qkv + b.reshape(3, heads, hd).transpose(1, 0, 2)
            q, k, v = (qkv[:, :, :, i].transpose(0, 2, 1, 3) for i in range(3))
        else:
            q = query.astype(cd)
            hidden = q.shape[-1]
            if b is not None:
                q = q + b[:hidden]
            q = split_heads(q, heads)
            if value is None:  # packed KV [B, L, N, 2, H]
                kv = key.astype(cd)
                hd = kv.shape[-1]
                if b is not None:
                    kv = kv + b[hidden:].reshape(2, heads, hd).transpose(1, 0, 2)
                k, v = (kv[:, :, :, i].transpose(0, 2, 1, 3) for i in range(2))
            elif key.ndim == 4:  # BNSH keys/values (cross-attention cache): used as they are
                k, v = key.astype(cd), value.astype(cd)
            else:
                k, v = key.astype(cd), value.astype(cd)
                if b is not None:
                    kh = k.shape[-1]
                    k = k + b[hidden:hidden + kh]
                    v = v + b[hidden + kh:]
                k, v = split_heads(k, heads), split_heads(v, heads)
        past_len = 0
        if past_key is not None and past_value is not None and (key is None or key.ndim != 4):
            past_len = past_key.shape[2]
            k = np.concatenate([past_key.astype(cd, copy=False), k], axis=2)
            v = np.concatenate([past_value.astype(cd, copy=False), v], axis=2)
        total = k.shape[2]
        scale = scale_attr or 1.0 / math.sqrt(q.shape[-1])
        bias_t = None
        if key_padding_mask is not None:
            bias_t = _key_mask_bias(key_padding_mask, batch, sq, total, past_len, filt, cd)
        if attention_bias is not None:
            ab = attention_bias.astype(cd, copy=False)
            bias_t = ab if bias_t is None else bias_t + ab
        allowed = _causal(sq, total, total - sq) if causal else None
        y = merge_heads(_attend(q, k, v, scale, bias_t, allowed)).astype(dt, copy=False)
        return _outputs(node, [y, k.astype(dt, copy=False), v.astype(dt, copy=False)])

    return run


# ---------------------------------------------------------------------------------------
# GroupQueryAttention: causal decoder attention with a KV cache and per-batch lengths
# ---------------------------------------------------------------------------------------


@KERNELS.register("GroupQueryAttention", 1, domain=MS)
def group_query_attention(node: NodeSpec):
    """Causal attention with ``kv_num_heads`` shared KV heads. Batch b holds
    ``seqlens_k[b] + 1`` tokens in total; its new tokens sit at positions
    ``[total_b - S, total_b)`` (``[0, S)`` on the first prompt, when the past is empty), where
    they are also written into present_key/present_value [B, Hkv, max(T, P), H]."""
    heads = int(node.attr("num_heads", 0) or 0)
    kv_heads = int(node.attr("kv_num_heads", 0) or 0)
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
        raise Unsupported(f"GroupQueryAttention num_heads={heads}, kv_num_heads={kv_heads}")
    scale_attr = float(node.attr("scale", 0.0) or 0.0)
    window = int(node.attr("local_window_size", -1))
    do_rotary = bool(node.attr("do_rotary", 0))
    interleaved = bool(node.attr("rotary_interleaved", 0))
    softcap = float(node.attr("softcap", 0.0) or 0.0)
    smooth = bool(node.attr("smooth_softmax", 0))
    if len(node.outputs) > 3 and node.outputs[3]:
        raise Unsupported("GroupQueryAttention output_qk")

    def run(query, key=None, value=None, past_key=None, past_value=None, seqlens_k=None,
            total_sequence_length=None, cos_cache=None, sin_cache=None, position_ids=None,
            attention_bias=None, head_sink=None):
        dt = query.dtype
        cd = compute_dtype(dt)
        batch, sq = query.shape[:2]
        if key is None:  # packed QKV [B, S, (N + 2 Nkv) H]
            hd = query.shape[-1] // (heads + 2 * kv_heads)
            qx = query[..., :heads * hd]
            kx = query[..., heads * hd:(heads + kv_heads) * hd]
            vx = query[..., (heads + kv_heads) * hd:]
        else:
            qx, kx, vx = query, key, value
            hd = qx.shape[-1] // heads
        q = qx.astype(cd).reshape(batch, sq, heads, hd)
        k = kx.astype(cd).reshape(batch, sq, kv_heads, hd)
        v = vx.astype(cd).reshape(batch, sq, kv_heads, hd)
        lens = np.asarray(seqlens_k, dtype=np.int64).reshape(-1) + 1  # total tokens per batch
        total_attr = int(np.asarray(total_sequence_length).reshape(-1)[0])
        past_buf = 0 if past_key is None else past_key.shape[2]
        first_prompt = past_buf == 0 or (sq > 1 and sq == total_attr)
        starts = np.zeros(batch, np.int64) if first_prompt else lens - sq  # position of new token 0
        pos = starts[:, None] + np.arange(sq)[None, :]  # [B, S]
        if do_rotary:
            pids = pos if position_ids is None else np.asarray(position_ids, np.int64).reshape(batch, sq)
            cos, sin = cos_cache[pids].astype(cd), sin_cache[pids].astype(cd)
            q = rotate(q, cos, sin, interleaved)
            k = rotate(k, cos, sin, interleaved)
        present_len = max(total_attr, past_buf, int(lens.max()))
        pk = np.zeros((batch, kv_heads, present_len, hd), dtype=cd)
        pv = np.zeros_like(pk)
        for bi in range(batch):
            keep = int(starts[bi])
            if keep:
                pk[bi, :, :keep] = past_key[bi, :, :keep]
                pv[bi, :, :keep] = past_value[bi, :, :keep]
            pk[bi, :, keep:keep + sq] = k[bi].transpose(1, 0, 2)
            pv[bi, :, keep:keep + sq] = v[bi].transpose(1, 0, 2)
        kv_len = max(total_attr, int(lens.max()))  # keys past every batch's length never count
        j = np.arange(kv_len)[None, None, :]
        allowed = (j <= pos[:, :, None]) & (j < lens[:, None, None])  # [B, S, T]
        if window > 0:
            allowed &= j > pos[:, :, None] - window
        bias_t = None if attention_bias is None else attention_bias.astype(cd, copy=False)
        sink = head_sink if head_sink is not None else (np.zeros(heads, cd) if smooth else None)
        scale = scale_attr or 1.0 / math.sqrt(hd)
        y = _attend(q.transpose(0, 2, 1, 3), pk[:, :, :kv_len], pv[:, :, :kv_len], scale, bias_t,
                    allowed[:, None], softcap, sink)
        return _outputs(node, [merge_heads(y).astype(dt, copy=False), pk.astype(dt), pv.astype(dt)])

    return run


# ---------------------------------------------------------------------------------------
# RotaryEmbedding (com.microsoft): input, position_ids, cos_cache, sin_cache
# ---------------------------------------------------------------------------------------


@KERNELS.register("RotaryEmbedding", 1, domain=MS)
def rotary_embedding(node: NodeSpec):
    """Rotary position embedding of [B, S, hidden] or [B, N, S, H] input. ``position_ids``
    [B, S] indexes the caches; a one-element ``position_ids`` is the first position."""
    interleaved = bool(node.attr("interleaved", 0))
    num_heads = int(node.attr("num_heads", 0) or 0)
    rot_attr = int(node.attr("rotary_embedding_dim", 0) or 0)
    if int(node.attr("is_packed_batching", 0) or 0):
        raise Unsupported("RotaryEmbedding with is_packed_batching")

    def run(input, position_ids, cos_cache, sin_cache):
        dt = input.dtype
        cd = compute_dtype(dt)
        if input.ndim == 4:
            x = input.transpose(0, 2, 1, 3)  # [B, S, N, H]
        else:
            b, s, hidden = input.shape
            if num_heads:
                n = num_heads
            elif rot_attr:
                raise Unsupported("RotaryEmbedding with rotary_embedding_dim needs num_heads")
            else:
                n = hidden // (2 * cos_cache.shape[-1])
            x = input.reshape(b, s, n, hidden // n)
        seq = x.shape[1]
        pid = np.asarray(position_ids, dtype=np.int64)
        if pid.size == 1:
            pid = pid.reshape(1, 1) + np.arange(seq, dtype=np.int64)[None, :]
        pid = pid.reshape(-1, seq)
        cos, sin = cos_cache[pid].astype(cd), sin_cache[pid].astype(cd)
        out = rotate(x.astype(cd), cos, sin, interleaved).astype(dt, copy=False)
        if input.ndim == 4:
            return np.ascontiguousarray(out.transpose(0, 2, 1, 3))
        return out.reshape(input.shape)

    return run
