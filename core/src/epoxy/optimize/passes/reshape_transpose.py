"""Reshape and Transpose chain simplifications.

- ``Transpose(Transpose(x, p1), p2)`` -> ``Transpose(x, p)`` with ``p[i] = p1[p2[i]]``,
  or nothing when ``p`` is the identity; a lone identity Transpose is removed too. Where
  something else reads the inner Transpose it stays, and the outer one reads ``x``.
- ``Reshape(Reshape(x, s1), s2)`` -> ``Reshape(x, s2)`` when ``s2`` is a constant without
  0 entries (a 0 would copy a dimension of the intermediate, not of ``x``).
- ``Reshape(x, s)`` whose output has the same known static shape as ``x`` is removed.
- ``Reshape(Transpose(Reshape(y, [b*h, s, d]), (0, 2, 1)), [b, h, d, s])`` -> ``Transpose(y,
  (0, 1, 3, 2))`` for a rank-4 ``y`` [b, h, s, d] (the dynamo exporter's transposed key: heads
  merged into a batch of matrices, transposed, split back), where shape inference shows the
  merge keeps s and d and the split restores b and h (the merge then only groups the leading
  dimensions, so the element order is the transpose's).
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
    producer_of,
    replace,
    same_dim,
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
        inner = producer_of(node.inputs[0], "Transpose")
        shared = inner is not None and (len(inner.outputs[0].uses()) > 1 or inner.outputs[0].is_graph_output())
        if shared and inner.inputs[0] is not None:  # type: ignore[union-attr]
            # a transpose others read too stays for them; this one reads its input directly
            first = attr(inner, "perm")  # type: ignore[arg-type]
            if first is not None and len(first) == len(perm):
                node.replace_input_with(0, inner.inputs[0])  # type: ignore[union-attr]
                node.attributes["perm"] = ir.AttrInt64s("perm", [first[i] for i in perm])
                return 1
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
        if is_op(nxt, "Transpose") and self._batched_transpose(graph, namer, node, nxt):
            return 1
        if not is_op(nxt, "Reshape") or nxt.inputs[0] is not node.outputs[0]:
            return 0
        s2 = constant(nxt.inputs[1]) if len(nxt.inputs) > 1 else None
        if s2 is None or (s2 == 0).any():
            return 0
        new = make_node(namer, "Reshape", [x, nxt.inputs[1]], name=nxt.name or "reshape", version=nxt.version)
        copy_attributes(nxt, new)
        replace(graph, [node, nxt], [new], [nxt.outputs[0]], [new.outputs[0]])
        return 1

    @staticmethod
    def _batched_transpose(graph: ir.Graph, namer: Namer, merge: ir.Node, transpose: ir.Node) -> bool:
        """The batched-transpose detour of the module docstring, from its merging Reshape."""
        split = sole_consumer(transpose.outputs[0])
        if attr(transpose, "perm") != [0, 2, 1] or not is_op(split, "Reshape") \
                or split.inputs[0] is not transpose.outputs[0]:
            return False
        y = merge.inputs[0]
        heads, merged, out = y.shape if y is not None else None, merge.outputs[0].shape, split.outputs[0].shape
        if heads is None or merged is None or out is None or len(heads) != 4 or len(merged) != 3 or len(out) != 4:
            return False
        b, h, s, d = heads
        if not (same_dim(merged[1], s) and same_dim(merged[2], d)):
            return False
        if not all(same_dim(a, e) for a, e in zip(out, (b, h, d, s))):
            return False
        new = make_node(namer, "Transpose", [y], {"perm": [0, 1, 3, 2]}, name=split.name or "transpose")
        replace(graph, [merge, transpose, split], [new], [split.outputs[0]], [new.outputs[0]])
        return True
