"""Fold weight plumbing whose inputs are all constants into initializers.

Only data-movement ops whose numpy evaluation is exact are folded here (ConstantOfShape,
Unsqueeze, Squeeze, Reshape, Transpose, Concat, Identity), so the fusion passes that follow
see weights as initializers: e.g. models generating their weights with ``ConstantOfShape``
or unsqueezing per-channel vectors. Everything else constant (arithmetic...) is folded by
the plan builder with the providers' own kernels.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx_ir as ir

from ...graph.fold_rules import FOLDERS
from ...kit.passes import Namer, RewritePass, add_initializer, attr, constant, graph_nodes, is_op, opset_of


class ConstantFoldingPass(RewritePass):
    """Replace a foldable node whose inputs are all initializers by an initializer."""

    needs = (frozenset(FOLDERS),)

    max_sweeps = 1  # nodes are visited in order, so chains fold in one sweep

    def __init__(self, max_elements: int = 1 << 28) -> None:
        super().__init__()
        self.max_elements = max_elements

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for node in graph_nodes(graph):
            entry = FOLDERS.get(node.op_type)
            if entry is None or not is_op(node, node.op_type) or len(node.outputs) != 1:
                continue
            out = node.outputs[0]
            if out.is_graph_output() or node.attributes.get("value") is not None and node.op_type != "ConstantOfShape":
                continue
            arity, fn = entry
            inputs = list(node.inputs) if arity < 0 else list(node.inputs[:arity])
            args = [None if v is None else constant(v) for v in inputs]
            if not args or any(a is None and v is not None for a, v in zip(args, inputs)) or args[0] is None:
                continue
            if node.op_type == "ConstantOfShape" and int(np.prod(args[0])) > self.max_elements:
                continue
            try:
                result = fn(functools.partial(attr, node), opset_of(model, node), args)
            except Exception:  # malformed node: leave it to the kernel to report
                result = None
            if result is None or result.dtype == object:
                continue
            name = out.name or namer("folded")
            out.name = None
            # a ConstantOfShape's np.full is the fold's own; other folds may return views
            value = add_initializer(graph, None, name, np.asarray(result), fresh=node.op_type == "ConstantOfShape")
            ir.convenience.replace_all_uses_with(out, value)
            graph.remove(node, safe=True)
            count += 1
        return count
