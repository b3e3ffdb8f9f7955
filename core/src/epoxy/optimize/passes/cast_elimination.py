"""Cast elimination: readers of ``y = Cast(x, to=T)`` read ``x`` when ``x`` already is a ``T``.

Why: exporters keep the dtype round trips a model's Python code makes even where they change
nothing: TorchScript's Llama writes every RMSNorm as ``Cast(x, float)`` ... ``Cast(n, float)``
then ``Mul(n, weight)`` on float32 tensors. Each such Cast is a step of a run (~1 us of
copying on a small tensor), and the one between the norm and its weight hid the weight from
the RMSNorm fusion. A Cast to the type it reads is the identity (ONNX: values unchanged,
``saturate`` applies to float8 conversions only), so this is exact. ``CastLike`` likewise
when its target's type equals its input's.
"""

from __future__ import annotations

import onnx_ir as ir

from ...kit.passes import Namer, RewritePass, attr, bypass, dtype_of, graph_nodes, is_op


def _same_type_cast(node: ir.Node) -> bool:
    """Whether ``node`` is a Cast or CastLike whose input already has the target type."""
    if len(node.outputs) != 1 or not node.inputs or node.inputs[0] is None:
        return False
    source = dtype_of(node.inputs[0])
    if source is None:
        return False
    if node.op_type == "Cast":
        to = attr(node, "to")
        return to is not None and int(to) == source
    return len(node.inputs) == 2 and dtype_of(node.inputs[1]) == source


class CastEliminationPass(RewritePass):
    """``y = Cast(x, to=dtype(x))`` (or CastLike to its own type): readers of ``y`` read ``x``;
    a graph output keeps its name (``kit.passes.bypass``)."""

    needs = (frozenset({"Cast", "CastLike"}),)

    max_sweeps = 1

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for node in graph_nodes(graph):
            source = node.inputs[0] if node.inputs else None
            if is_op(node, ("Cast", "CastLike")) and source is not None and _same_type_cast(node) \
                    and bypass(graph, node, source):
                count += 1
        return count
