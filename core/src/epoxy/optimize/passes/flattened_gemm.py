"""Reshape -> Gemm -> Reshape around a linear layer -> MatMul (+ Add) on the unflattened tensor.

Why: Gemm takes matrices, so exporters flatten a [batch, seq, K] activation to rows, run
the Gemm and reshape the result back (GPT-2's ``Conv1D`` layers: ``addmm`` on a view, by
both torch.onnx exporters). Three steps a linear layer on tensors of a few hundred elements,
and the reshape back hides what follows (GELU, the residual Add) from the providers'
fusions. When the shapes say the round trip only flattens and restores the leading
dimensions, ``MatMul(x, W) [+ C]`` on ``x`` itself computes the same rows: the same products
and sums up to float rounding (the level is ``extended``).

The shapes that say so (shape inference's, symbolic dimensions compared by name): the
flattening target is ``[-1, K]`` (a constant, or ``Concat([-1], [x.shape[-1]])`` computed from
``Shape(x)``: the Gemm after it then needs x's last dimension to be K); the result has rank
q <= rank(x), x's first q - 1 dimensions and N columns; x's trailing dimensions multiply to K
where known. Where x has more dimensions (merged attention heads) or a last dimension not
known statically, ``x`` is read through ``Reshape(x, [0, .., 0, K])``, which fails exactly where
the flattening and the reshape back would.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from ...kit.passes import (
    Namer,
    RewritePass,
    add_initializer,
    attr,
    constant,
    dtype_of,
    graph_nodes,
    is_op,
    make_node,
    producer_of,
    replace,
    same_dim,
    sole_consumer,
)

_LINEAR_TYPES = (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16)


def _row_bias(c: ir.Value | None, n: int) -> bool:
    """Whether Gemm's C adds one row to every row: shape [N] or [1, N] (or a scalar)."""
    if c is None:
        return True
    if c.shape is None or len(c.shape) > 2:
        return False
    dims = list(c.shape)
    if len(dims) == 2 and dims[0] != 1:
        return False
    return not dims or dims[-1] in (1, n)


def _last_dim_of(value: ir.Value | None, x: ir.Value) -> bool:
    """Whether ``value`` is ``[x.shape[-1]]`` as TorchScript computes it: ``Slice(Shape(x),
    [-1], [end])`` (end past the rank), possibly as ``Unsqueeze(Squeeze(..))``, or
    ``Unsqueeze(Gather(Shape(x), -1))``."""
    node = producer_of(value)
    if is_op(node, "Unsqueeze"):
        inner = producer_of(node.inputs[0]) if node.inputs else None
        if is_op(inner, "Squeeze"):
            node = producer_of(inner.inputs[0]) if inner.inputs else None
        elif is_op(inner, "Gather"):
            index = constant(inner.inputs[1]) if len(inner.inputs) == 2 else None
            shape = producer_of(inner.inputs[0])
            return (index is not None and index.size == 1 and int(index.reshape(-1)[0]) == -1
                    and is_op(shape, "Shape") and shape.inputs[0] is x and not shape.attributes)
        else:
            return False
    if not is_op(node, "Slice") or len(node.inputs) < 3:
        return False
    starts, ends = constant(node.inputs[1]), constant(node.inputs[2])
    steps = constant(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None else np.ones(1)
    shape = producer_of(node.inputs[0])
    if starts is None or ends is None or steps is None or not is_op(shape, "Shape") or shape.inputs[0] is not x:
        return False
    rank = len(x.shape) if x.shape is not None else None
    return (starts.size == 1 and int(starts.reshape(-1)[0]) == -1 and int(steps.reshape(-1)[0]) == 1
            and rank is not None and int(ends.reshape(-1)[0]) >= rank and not shape.attributes)


def _rows_of(target: ir.Value | None, x: ir.Value, k: int) -> bool:
    """Whether Reshape(x, ``target``) makes rows of ``k`` wherever the Gemm after it runs: the
    constant ``[-1, k]``, or ``Concat([-1], [x.shape[-1]])`` (the Gemm then needs that to be
    ``k``)."""
    c = constant(target)
    if c is not None:
        return [int(t) for t in c.reshape(-1)] == [-1, k]
    concat = producer_of(target, "Concat")
    if concat is None or len(concat.inputs) != 2 or int(attr(concat, "axis", 0)) != 0:
        return False
    first = constant(concat.inputs[0])
    return first is not None and [int(t) for t in first.reshape(-1)] == [-1] and _last_dim_of(concat.inputs[1], x)


class FlattenedGemmPass(RewritePass):
    """``Reshape(Gemm(Reshape(x, [-1, K]), W, C), S)`` -> ``[Add](MatMul(x, W'), C)`` (see above)."""

    needs = (frozenset({"Gemm"}), frozenset({"Reshape"}))

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for gemm in graph_nodes(graph):
            if gemm.graph is not graph or not is_op(gemm, "Gemm") or not 2 <= len(gemm.inputs) <= 3:
                continue
            found = self._match(gemm)
            if found is None:
                continue
            flatten, x, back, k, transposed = found
            c = gemm.inputs[2] if len(gemm.inputs) > 2 else None
            base = gemm.name or "linear"
            weight = gemm.inputs[1]
            if transposed:  # MatMul reads W as [K, N]: a transposed copy (the Gemm's goes with it)
                weight = add_initializer(graph, namer, f"{base}.W_t",
                                         np.ascontiguousarray(constant(weight).T), fresh=True)  # type: ignore[union-attr]
            new_nodes = []
            result = back.outputs[0].shape
            if len(x.shape) != len(result) or not isinstance(x.shape[-1], int):  # type: ignore[arg-type, index]
                # x's trailing dims as K columns: [0, .., 0, K] keeps the leading ones (_match)
                lead = len(result) - 1  # type: ignore[arg-type]
                target = add_initializer(graph, namer, f"{base}.rows", np.array([0] * lead + [k], np.int64), fresh=True)
                rows = make_node(namer, "Reshape", [x, target], name=f"{base}/rows")
                rows.outputs[0].shape = ir.Shape(list(result[:lead]) + [k])  # type: ignore[index]
                rows.outputs[0].type = x.type
                new_nodes.append(rows)
                x = rows.outputs[0]
            product = make_node(namer, "MatMul", [x, weight], name=f"{base}/matmul" if c is not None else base)
            new_nodes.append(product)
            out = product.outputs[0]
            if c is not None:
                out.shape, out.type = back.outputs[0].shape, back.outputs[0].type
                add = make_node(namer, "Add", [out, c], name=base)
                new_nodes.append(add)
                out = add.outputs[0]
            replace(graph, [flatten, gemm, back], new_nodes, [back.outputs[0]], [out])
            count += 1
        return count

    @staticmethod
    def _match(gemm: ir.Node) -> tuple[ir.Node, ir.Value, ir.Node, int, bool] | None:
        """(the flattening Reshape, x, the Reshape back, K, whether W is transposed), or None."""
        if float(attr(gemm, "alpha", 1.0)) != 1.0 or int(attr(gemm, "transA", 0)):
            return None
        c = gemm.inputs[2] if len(gemm.inputs) > 2 else None
        if c is not None and float(attr(gemm, "beta", 1.0)) != 1.0:
            return None
        flatten = producer_of(gemm.inputs[0])
        back = sole_consumer(gemm.outputs[0])
        if not is_op(flatten, "Reshape") or not is_op(back, "Reshape") or back.inputs[0] is not gemm.outputs[0]:
            return None
        if sole_consumer(flatten.outputs[0]) is not gemm or gemm.inputs[1] is flatten.outputs[0]:
            return None
        x, w = flatten.inputs[0], constant(gemm.inputs[1])
        if x is None or w is None or w.ndim != 2 or len(flatten.inputs) < 2 or dtype_of(x) not in _LINEAR_TYPES:
            return None
        k, n = (w.shape[1], w.shape[0]) if int(attr(gemm, "transB", 0)) else w.shape
        if not _rows_of(flatten.inputs[1], x, int(k)) or not _row_bias(c, n):
            return None
        shape, result = x.shape, back.outputs[0].shape
        if shape is None or result is None or len(result) < 2 or len(shape) < len(result):
            return None
        lead = len(result) - 1
        if not all(same_dim(a, b) for a, b in zip(shape[:lead], result[:lead])) or result[-1] != n:
            return None
        rest = [d for d in shape[lead:] if isinstance(d, int)]
        if len(rest) == len(shape) - lead and math.prod(rest) != k:
            return None
        return flatten, x, back, int(k), bool(int(attr(gemm, "transB", 0)))
