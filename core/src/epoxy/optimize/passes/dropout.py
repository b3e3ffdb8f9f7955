"""Dropout elimination: at inference a Dropout is the identity (when its mask is unused)."""

from __future__ import annotations

import onnx_ir as ir

from ...kit.passes import Namer, RewritePass, bypass, constant, graph_nodes, is_op, opset_of


def _inference_mode(model: ir.Model, node: ir.Node) -> bool:
    opset = opset_of(model, node)
    if opset < 7:
        # is_test=0 asks for training behavior in the first versions
        return bool(node.attributes.get_int("is_test", 0))
    if opset < 12:
        return True
    if len(node.inputs) < 3 or node.inputs[2] is None:
        return True
    training = constant(node.inputs[2])
    return training is not None and training.size == 1 and not bool(training.reshape(-1)[0])


class DropoutEliminationPass(RewritePass):
    """``y = Dropout(x)`` in inference mode, mask unread: readers of ``y`` read ``x``."""

    needs = (frozenset({"Dropout"}),)

    max_sweeps = 1

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for node in graph_nodes(graph):
            if not is_op(node, "Dropout") or not node.inputs or node.inputs[0] is None:
                continue
            if not _inference_mode(model, node):
                continue
            if bypass(graph, node, node.inputs[0]):
                count += 1
        return count
