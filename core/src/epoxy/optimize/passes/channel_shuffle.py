"""ShuffleNet's channel shuffle as one op: ``Reshape(x, [N, G, C/G, H, W]) -> Transpose(perm=[0,
2, 1, 3, 4]) -> Reshape(., [N, C, H, W])`` becomes ``com.epoxy.cpu::ChannelShuffle(x, group=G)``.

Why: as written it is three ops and, on the cpu provider's channels-last int8 codes, three
copies (each reshape of a channels-last view copies, and the depthwise layer after it copies
the result back to channels last): 94 us a shuffle on [136, 28, 28] codes. As one op it is one
pass over the codes that keeps them channels last (``epoxy_ep_cpu/ops/channel_shuffle.py``).
Exact: a permutation of channels. Level ``extended`` (an op of the cpu provider's domain), cpu only.

What is required: x of rank 4 whose channels, height and width the inferred shapes give; the
first Reshape's output of rank 5 splitting the channels as ``[G, C/G]`` and keeping the other
dims; the Transpose swapping those two axes; the second Reshape's output of x's shape; each
intermediate read only by the next op.
"""

from __future__ import annotations

import onnx_ir as ir

from ...kit.passes import Namer, RewritePass, attr, become, ensure_opset, graph_nodes, is_op, sole_consumer
from .qdq_pairs import DOMAIN, DOMAIN_VERSION  # the cpu provider's op domain, named once

OP_TYPE = "ChannelShuffle"
_SWAP = [0, 2, 1, 3, 4]


def _dims(value: ir.Value | None) -> list[object] | None:
    """The inferred dims (ints or symbolic names), or None when the shape is unknown."""
    if value is None or value.shape is None:
        return None
    return [d if isinstance(d, int) else str(d) for d in value.shape]


def shuffle_group(first: ir.Node, transpose: ir.Node, last: ir.Node) -> int | None:
    """G when ``first -> transpose -> last`` is a channel shuffle of a 4-D input, else None."""
    x = first.inputs[0]
    x_dims, split, out = _dims(x), _dims(first.outputs[0]), _dims(last.outputs[0])
    if x_dims is None or split is None or out is None or len(x_dims) != 4 or len(split) != 5:
        return None
    c = x_dims[1]
    group, per_group = split[1], split[2]
    if not (isinstance(c, int) and isinstance(group, int) and isinstance(per_group, int)):
        return None
    if group < 2 or per_group < 1 or group * per_group != c or [split[0], *split[3:]] != [x_dims[0], *x_dims[2:]]:
        return None
    if attr(transpose, "perm") != _SWAP or out != x_dims:
        return None
    return group


class ChannelShufflePass(RewritePass):
    """``Reshape -> Transpose -> Reshape`` channel shuffles -> ``ChannelShuffle``."""

    needs = (frozenset({"Reshape"}), frozenset({"Transpose"}))

    max_sweeps = 1

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for first in graph_nodes(graph):
            if first.graph is not graph or not is_op(first, "Reshape") or first.inputs[0] is None:
                continue
            transpose = sole_consumer(first.outputs[0])
            if not is_op(transpose, "Transpose"):
                continue
            last = sole_consumer(transpose.outputs[0])
            if not is_op(last, "Reshape") or last.inputs[0] is not transpose.outputs[0]:
                continue
            group = shuffle_group(first, transpose, last)
            if group is None:
                continue
            # the Transpose becomes the shuffle, reading x: no new node (see kit.passes.become)
            transpose.replace_input_with(0, first.inputs[0])
            become(graph, transpose, OP_TYPE, {"group": group}, domain=DOMAIN, version=DOMAIN_VERSION,
                   tail=[first, last], out=last.outputs[0])
            count += 1
        if count:
            ensure_opset(model, DOMAIN, DOMAIN_VERSION)
        return count
