"""Identity elimination: readers of ``y = Identity(x)`` read ``x``.

The core's own pass, not onnx_ir's ``IdentityEliminationPass``: that one, for an Identity
between two graph outputs (``a`` and ``b = Identity(a)``, what exporters write for a model
returning the same tensor twice), renames ``a`` to ``b`` and the model loses its output
``a`` (``get_outputs()`` said ``['b', 'b']``). ``kit.passes.bypass`` keeps such nodes.
"""

from __future__ import annotations

import onnx_ir as ir

from ...kit.passes import Namer, RewritePass, bypass, graph_nodes, is_op


class IdentityEliminationPass(RewritePass):
    """``y = Identity(x)``: readers of ``y`` read ``x``; a graph output keeps its name."""

    needs = (frozenset({"Identity"}),)

    max_sweeps = 1

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for node in graph_nodes(graph):
            if is_op(node, "Identity") and len(node.inputs) == 1 and node.inputs[0] is not None \
                    and len(node.outputs) == 1 and bypass(graph, node, node.inputs[0]):
                count += 1
        return count
