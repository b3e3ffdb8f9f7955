"""Conv + BatchNormalization (inference) -> Conv with the normalization folded into W and B."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ...kit.passes import (
    Namer,
    RewritePass,
    add_initializer,
    attr,
    constant,
    graph_nodes,
    is_op,
    opset_of,
    rewritable,
    scaled_per_channel,
    sole_consumer,
    take_place,
    written_into,
)
from .affine_chain import follow_affine


def bn_inference_affine(model: ir.Model, bn: ir.Node, channels: int | None) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, shift) of an inference-mode BatchNormalization with constant parameters, as
    float64 vectors: ``y = x * scale + shift`` per channel (axis 1). None otherwise."""
    if len(bn.inputs) != 5 or any(v is None for v in bn.inputs):
        return None
    if len(bn.outputs) > 1 and any(o.uses() or o.is_graph_output() for o in bn.outputs[1:]):
        return None
    opset = opset_of(model, bn)
    if opset < 7 and not attr(bn, "is_test", 0):
        return None
    if attr(bn, "training_mode", 0) or attr(bn, "spatial", 1) != 1:
        return None
    params = [constant(v) for v in bn.inputs[1:]]
    if any(p is None or p.dtype.kind != "f" for p in params):
        return None
    gamma, beta, mean, var = (p.reshape(-1).astype(np.float64) for p in params)  # type: ignore[union-attr]
    n = gamma.size
    if channels is not None and n != channels or any(p.size != n for p in (beta, mean, var)):
        return None
    eps = float(attr(bn, "epsilon", 1e-5))
    scale = gamma / np.sqrt(var + eps)
    return scale, beta - mean * scale


def fold_into_conv(graph: ir.Graph, namer, conv: ir.Node, scale: np.ndarray | None, shift: np.ndarray | None,
                   old_nodes: list[ir.Node], last_out: ir.Value, spare: ir.Value | None = None) -> bool:
    """Fold ``old_nodes`` (a Conv/ConvTranspose followed by per-output-channel affine nodes
    ending in ``last_out``) into the conv: it reads ``W*scale`` and ``B*scale + shift`` and
    its output takes ``last_out``'s place and name; the other nodes go.

    Why the conv is edited rather than replaced by a new one: a new node, its output and
    the graph splice were ~60 us of onnx_ir edits per fold; the conv also keeps its name.
    For the same reason a pass's own weight is scaled in its initializer, and the bias is
    written into the conv's own bias or into ``spare`` (a per-channel vector of the removed
    nodes, a BN's shift) when they are a pass's own (:func:`rewritable`); a new initializer
    (~15 us each) only where they are not (the data of the model as given)."""
    w = constant(conv.inputs[1])
    b_value = conv.inputs[2] if len(conv.inputs) > 2 else None
    b = constant(b_value) if b_value is not None else None
    if w is None or w.dtype.kind != "f" or (b_value is not None and b is None):
        return False
    group = int(attr(conv, "group", 1))
    transpose = conv.op_type == "ConvTranspose"
    m = w.shape[1] * group if transpose else w.shape[0]
    if transpose and group != 1:
        return False
    for vec in (scale, shift):
        if vec is not None and vec.size != m:
            return False
    b64 = np.zeros(m) if b is None else b.reshape(-1).astype(np.float64)
    base = conv.name or "conv"
    if scale is not None:
        weight = conv.inputs[1]
        in_place = weight is not None and rewritable(weight, w)
        w = scaled_per_channel(w, scale, axis=1 if transpose else 0, in_place=in_place)
        b64 = b64 * scale
        if not in_place:
            conv.replace_input_with(1, add_initializer(graph, namer, f"{base}.W_folded", w, fresh=True))
    if shift is not None:
        b64 = b64 + shift
    bias = b64.astype(w.dtype)
    new_b = written_into(b_value, b, bias) or written_into(spare, constant(spare) if spare is not None else None, bias)
    if new_b is None:
        new_b = add_initializer(graph, namer, f"{base}.B_folded", bias, fresh=True)
    if len(conv.inputs) < 3:
        conv.resize_inputs(3)
    if conv.inputs[2] is not new_b:
        conv.replace_input_with(2, new_b)
    take_place(graph, conv.outputs[0], last_out, [n for n in old_nodes if n is not conv])
    return True


class ConvBatchNormFoldPass(RewritePass):
    """``BatchNormalization(Conv(x, W, B))`` with constant W, B and BN parameters, and the
    per-channel constant Add/Sub/Mul/Div chain after the BN if any (a "scale" layer).

    Why the chain here and not only in :class:`ConvAffineFoldPass`: folded in two passes,
    every weight of such a model was scaled twice and the conv rebuilt twice (inception_v2:
    69 convs, 23 ms each pass of a 160 ms creation); the composed factors are also rounded
    once instead of twice."""

    needs = (frozenset({"Conv", "ConvTranspose"}), frozenset({"BatchNormalization"}))

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for conv in graph_nodes(graph):
            if conv.graph is not graph or not is_op(conv, ("Conv", "ConvTranspose")) or len(conv.inputs) < 2:
                continue
            bn = sole_consumer(conv.outputs[0])
            if not is_op(bn, "BatchNormalization") or bn.inputs[0] is not conv.outputs[0]:
                continue
            affine = bn_inference_affine(model, bn, None)
            w = constant(conv.inputs[1])
            if affine is None or w is None or w.dtype.kind != "f":
                continue
            scale, shift = affine
            channels = w.shape[1] * int(attr(conv, "group", 1)) if conv.op_type == "ConvTranspose" else w.shape[0]
            chain, chain_scale, chain_shift, last = follow_affine(bn.outputs[0], w.ndim, channels, w.dtype)
            if chain and scale.size == channels:
                # y = (x * scale + shift) * chain_scale + chain_shift
                if chain_scale is not None:
                    scale, shift = scale * chain_scale, shift * chain_scale
                if chain_shift is not None:
                    shift = shift + chain_shift
            else:
                chain, last = [], bn.outputs[0]
            if fold_into_conv(graph, namer, conv, scale, shift, [conv, bn, *chain], last, spare=bn.inputs[2]):
                count += 1
        return count
