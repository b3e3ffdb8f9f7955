"""Reshape and Transpose chain simplifications.

- ``Transpose(Transpose(x, p1), p2)`` -> ``Transpose(x, p)`` with ``p[i] = p1[p2[i]]``,
  or nothing when ``p`` is the identity; a lone identity Transpose is removed too.
- ``Reshape(Reshape(x, s1), s2)`` -> ``Reshape(x, s2)`` when ``s2`` is a constant without
  0 entries (a 0 would copy a dimension of the intermediate, not of ``x``).
- ``Reshape(x, s)`` whose output has the same known static shape as ``x`` is removed.
"""

from __future__ import annotations

import onnx_ir as ir

from ...kit.passes import (
    Namer,
    RewritePass,
    attr,
    bypass,
    constant,
    copy_attributes,
    graph_nodes,
    is_op,
    make_node,
    opset_of,
    replace,
    sole_consumer,
    static_shape,
)


class ReshapeTransposeSimplifyPass(RewritePass):

    needs = (frozenset({"Transpose", "Reshape"}),)
    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for node in graph_nodes(graph):
            if node.graph is not graph:
                continue
            if is_op(node, "Transpose"):
                count += self._transpose(graph, namer, node)
            elif is_op(node, "Reshape") and opset_of(model, node) >= 5:
                count += self._reshape(graph, namer, node)
        return count

    def _transpose(self, graph: ir.Graph, namer, node: ir.Node) -> int:
        perm = attr(node, "perm")
        if perm is None or node.inputs[0] is None:
            return 0
        if perm == list(range(len(perm))):
            return int(bypass(graph, node, node.inputs[0]))
        nxt = sole_consumer(node.outputs[0])
        if not is_op(nxt, "Transpose"):
            return 0
        perm2 = attr(nxt, "perm")
        if perm2 is None or len(perm2) != len(perm):
            return 0
        combined = [perm[i] for i in perm2]
        new = make_node(namer, "Transpose", [node.inputs[0]], {"perm": combined}, name=nxt.name or "transpose",
                        version=nxt.version)
        replace(graph, [node, nxt], [new], [nxt.outputs[0]], [new.outputs[0]])
        return 1

    def _reshape(self, graph: ir.Graph, namer, node: ir.Node) -> int:
        x = node.inputs[0]
        if x is None or len(node.inputs) < 2:
            return 0
        shape_in, shape_out = static_shape(x), static_shape(node.outputs[0])
        if shape_in is not None and shape_in == shape_out:
            return int(bypass(graph, node, x))
        nxt = sole_consumer(node.outputs[0])
        if not is_op(nxt, "Reshape") or nxt.inputs[0] is not node.outputs[0]:
            return 0
        s2 = constant(nxt.inputs[1]) if len(nxt.inputs) > 1 else None
        if s2 is None or (s2 == 0).any():
            return 0
        new = make_node(namer, "Reshape", [x, nxt.inputs[1]], name=nxt.name or "reshape", version=nxt.version)
        copy_attributes(nxt, new)
        replace(graph, [node, nxt], [new], [nxt.outputs[0]], [new.outputs[0]])
        return 1
