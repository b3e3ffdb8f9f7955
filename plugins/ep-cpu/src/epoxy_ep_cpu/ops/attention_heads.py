"""The head views around ``FusedAttentionCore`` taken into it: its inputs read as the
projections' [batch, seq, heads x depth] outputs and its output written merged back.

Why: torch's exporters split each projection into heads with ``Reshape([b, s, h, d])`` and
``Transpose(0, 2, 1, 3)`` (``(0, 2, 3, 1)`` for a key already transposed) and merge the
context back with ``Transpose(0, 2, 1, 3)`` and ``Reshape([b, s, h x d])``: eight steps a
layer at ~1.2 us each on the small tensors of a batch-1 model, where the views themselves
cost ~0.2 us inside one kernel (a BERT layer of 16 tokens runs its whole attention in ~15 us).
Each view pair is taken only where shape inference says it is exactly that split or merge
(the projection's and the view's leading dimensions the same, the head depth a constant
dividing the width) and where nothing else reads its intermediates (a split Reshape that
something else reads stays for it); the kernel then makes the same views and copies, so the
values are the same bits.

Attributes written on the fused node: ``q_split`` / ``k_split`` / ``v_split`` the head depth
that input is split by (0: the input is heads already), ``merge`` 1 when the output is merged.
"""

from __future__ import annotations

import onnx_ir as ir

from epoxy.kit.passes import (
    Namer,
    RewritePass,
    attr,
    graph_nodes,
    is_op,
    producer_of,
    same_dim,
    sole_consumer,
    take_place,
)

from .fused import DOMAIN

#: the perm that splits [b, s, h, d] into heads per input (the key may come transposed)
_SPLITS = {"q_split": ((0, 2, 1, 3),), "k_split": ((0, 2, 1, 3), (0, 2, 3, 1)), "v_split": ((0, 2, 1, 3),)}
#: the perm each input's split uses, as the kernel's code: 1 plain heads, 2 keys transposed
SPLIT_CODES = {(0, 2, 1, 3): 1, (0, 2, 3, 1): 2}



def _perm(node: ir.Node) -> tuple[int, ...] | None:
    perm = attr(node, "perm")
    return None if perm is None else tuple(int(p) for p in perm)


def _head_layout(flat: ir.Shape | None, heads: ir.Shape | None) -> int | None:
    """The head depth d when ``heads`` = [b, s, h, d] splits ``flat`` = [b, s, h x d] (b and s
    the same dims, d a constant dividing the constant width, h consistent), else None."""
    if flat is None or heads is None or len(flat) != 3 or len(heads) != 4:
        return None
    width, h, d = flat[2], heads[2], heads[3]
    if not (same_dim(flat[0], heads[0]) and same_dim(flat[1], heads[1])):
        return None
    if not isinstance(width, int) or not isinstance(d, int) or d <= 0 or width % d:
        return None
    if isinstance(h, int) and h * d != width:
        return None
    return d


def _split_of(value: ir.Value | None, core: ir.Node, perms: tuple[tuple[int, ...], ...]
              ) -> tuple[ir.Value, int, int, list[ir.Node]] | None:
    """(the projection, head depth, split code, the views that go) when ``value``, read by
    ``core`` (and Shape nodes), is ``Transpose(Reshape(x, ..), perm)`` splitting x into heads;
    each view goes unless something else reads it."""
    transpose = producer_of(value, "Transpose")
    if transpose is None or _perm(transpose) not in perms or not _read_for_shape_only(value, core):
        return None
    reshape = producer_of(transpose.inputs[0], "Reshape")
    if reshape is None or transpose.inputs[0].is_graph_output():  # type: ignore[union-attr]
        return None
    x = reshape.inputs[0]
    depth = _head_layout(x.shape if x is not None else None, transpose.inputs[0].shape)  # type: ignore[union-attr]
    if x is None or depth is None:
        return None
    # a view something else reads (TorchScript reads their Shape) stays for it
    if len(value.uses()) > 1:  # type: ignore[union-attr]
        views = []
    elif len(transpose.inputs[0].uses()) > 1:  # type: ignore[union-attr]
        views = [transpose]
    else:
        views = [transpose, reshape]
    return x, depth, SPLIT_CODES[_perm(transpose)], views  # type: ignore[index]


def _read_for_shape_only(value: ir.Value | None, core: ir.Node) -> bool:
    """Whether ``core`` reads ``value`` once and anything else reads only its shape (``Shape``
    nodes: their results are cached per input shape, so after a shape's second run the view
    they read is computed for nothing and the shape-caching plan drops it)."""
    if value is None or value.is_graph_output():
        return False
    readers = [use.node for use in value.uses()]
    return sum(node is core for node in readers) == 1 and all(
        node is core or is_op(node, "Shape") for node in readers)


def _merge_of(core: ir.Node) -> tuple[ir.Value, list[ir.Node]] | None:
    """(the merged value, [Transpose, Reshape]) when the core's output is read only as
    ``Reshape(Transpose(y, (0, 2, 1, 3)), ..)`` merging its heads back to [b, s, h x d]."""
    y = core.outputs[0]
    transpose = sole_consumer(y)
    if not is_op(transpose, "Transpose") or _perm(transpose) != (0, 2, 1, 3):
        return None
    reshape = sole_consumer(transpose.outputs[0])
    if not is_op(reshape, "Reshape") or reshape.inputs[0] is not transpose.outputs[0]:
        return None
    merged = reshape.outputs[0]
    if _head_layout(merged.shape, transpose.outputs[0].shape) is None:
        return None
    return merged, [transpose, reshape]


class CpuAttentionHeadViewsPass(RewritePass):
    """Each ``FusedAttentionCore`` takes the head split of its q, k and v and the merge of its
    output (those of them that match, see the module docstring)."""

    needs = (frozenset({"FusedAttentionCore"}), frozenset({"Transpose"}))

    max_sweeps = 1

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for core in graph_nodes(graph):
            if core.graph is not graph or not is_op(core, "FusedAttentionCore", DOMAIN) or len(core.inputs) < 3:
                continue
            taken = 0
            for index, (name, perms) in enumerate(_SPLITS.items()):
                if int(attr(core, name, 0)):
                    continue
                found = _split_of(core.inputs[index], core, perms)
                if found is None:
                    continue
                x, depth, code, views = found
                core.replace_input_with(index, x)
                core.attributes[name] = ir.AttrInt64(name, depth)
                core.attributes[f"{name}_layout"] = ir.AttrInt64(f"{name}_layout", code)
                if views:
                    graph.remove(views, safe=True)
                taken += 1
            merge = _merge_of(core) if not int(attr(core, "merge", 0)) else None
            if merge is not None:
                merged, views = merge
                core.attributes["merge"] = ir.AttrInt64("merge", 1)
                take_place(graph, core.outputs[0], merged, views)
                taken += 1
            count += bool(taken)
        return count

