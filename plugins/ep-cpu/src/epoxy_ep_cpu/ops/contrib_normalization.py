"""onnxruntime's transformer normalizations: SkipLayerNormalization,
SkipSimplifiedLayerNormalization, EmbedLayerNormalization (domain com.microsoft) and
SimplifiedLayerNormalization (which onnxruntime registers in the ONNX domain, version 1).

All normalize over the last axis; float16 inputs are computed in float32; the optional
statistics outputs (mean, inv_std_var) are float32 as onnxruntime writes them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from epoxy.contract import NodeSpec

from ..registry import KERNELS
from ._attention_util import compute_dtype
from .normalization import standardize

MS = "com.microsoft"


def _stat_dtype(node: NodeSpec, index: int) -> np.dtype:
    if index < len(node.output_types) and node.output_types[index].dtype is not None:
        return np.dtype(node.output_types[index].dtype)
    return np.dtype(np.float32)


def _outputs(node: NodeSpec, values: list[Any]) -> Any:
    """Only the outputs the node names (``""`` ones as None); one output unwrapped."""
    n = len(node.outputs)
    outs = [v if node.outputs[i] else None for i, v in enumerate(values[:n])]
    return outs[0] if n == 1 else tuple(outs)


def _skip_norm(node: NodeSpec, *, simplified: bool):
    eps = float(node.attr("epsilon", 1e-12))
    stats = [_stat_dtype(node, 1), _stat_dtype(node, 2)]

    def finish(x, s, gamma, beta, bias):
        cd = compute_dtype(x.dtype)
        total = x.astype(cd) + s.astype(cd, copy=False)
        if bias is not None:
            total += bias.astype(cd, copy=False)
        d, mean, inv = standardize(total, total.ndim - 1, eps, center=not simplified)
        d *= gamma.astype(cd, copy=False)
        if beta is not None:
            d += beta.astype(cd, copy=False)
        return _outputs(node, [
            d.astype(x.dtype, copy=False), mean.astype(stats[0], copy=False),
            inv.astype(stats[1], copy=False), total.astype(x.dtype, copy=False)])

    if simplified:
        def run(input, skip, gamma, bias=None):
            return finish(input, skip, gamma, None, bias)
    else:
        def run(input, skip, gamma, beta=None, bias=None):
            return finish(input, skip, gamma, beta, bias)
    return run


@KERNELS.register("SkipLayerNormalization", 1, domain=MS)
def skip_layer_normalization(node: NodeSpec):
    """LayerNorm(input + skip + bias) * gamma + beta; outputs mean, inv_std_var and the sum."""
    return _skip_norm(node, simplified=False)


@KERNELS.register("SkipSimplifiedLayerNormalization", 1, domain=MS)
def skip_simplified_layer_normalization(node: NodeSpec):
    """RMSNorm(input + skip + bias) * gamma; the mean output is zeros."""
    return _skip_norm(node, simplified=True)


@KERNELS.register("SimplifiedLayerNormalization", 1)
def simplified_layer_normalization(node: NodeSpec):
    """RMS normalization over axes ``axis..``: Y = X / sqrt(mean(X^2) + eps) * scale, in
    scale's dtype; second output inv_std_var."""
    eps = float(node.attr("epsilon", 1e-5))
    axis = int(node.attr("axis", -1))
    stat = _stat_dtype(node, 1)

    def run(x, scale):
        ax = axis + x.ndim if axis < 0 else axis
        cd = compute_dtype(x.dtype)
        d, _, inv = standardize(x.astype(cd, copy=False), ax, eps, center=False)
        d *= scale.astype(cd, copy=False)
        return _outputs(node, [d.astype(scale.dtype, copy=False), inv.astype(stat, copy=False)])

    return run


@KERNELS.register("EmbedLayerNormalization", 1, domain=MS)
def embed_layer_normalization(node: NodeSpec):
    """LayerNorm(word[ids] + position[pos] + segment[segment_ids]) * gamma + beta.

    Outputs: the normalized embedding [B, S, H], mask_index [B] (int32: per-row sum of the
    mask, zeros without one) and the embedding sum before normalization."""
    eps = float(node.attr("epsilon", 1e-12))

    def run(input_ids, segment_ids, word_embedding, position_embedding, segment_embedding=None,
            gamma=None, beta=None, mask=None, position_ids=None):
        ids = np.asarray(input_ids, dtype=np.int64)
        batch, seq = ids.shape
        dt = word_embedding.dtype
        cd = compute_dtype(dt)
        if position_ids is None:
            pos = np.arange(seq, dtype=np.int64)[None, :]
        else:
            pos = np.asarray(position_ids, dtype=np.int64).reshape(-1, seq)
        total = word_embedding[ids].astype(cd)
        total += position_embedding[pos].astype(cd, copy=False)
        if segment_ids is not None and segment_embedding is not None:
            total += segment_embedding[np.asarray(segment_ids, dtype=np.int64)].astype(cd, copy=False)
        d, _, _ = standardize(total, 2, eps)
        d *= gamma.astype(cd, copy=False)
        d += beta.astype(cd, copy=False)
        if mask is None:
            mask_index = np.zeros(batch, dtype=np.int32)
        else:
            mask_index = np.asarray(mask).astype(np.int64).sum(axis=1).astype(np.int32)
        return _outputs(node, [d.astype(dt, copy=False), mask_index, total.astype(dt, copy=False)])

    return run
