"""MatMul + Add -> Gemm, for 2-D operands only and only when the Gemm computes the same.

``Add(MatMul(A, B), C)`` equals ``Gemm(A, B, C)`` (alpha = beta = 1) when A and B are
matrices and C broadcasts to the (M, N) result without changing its shape.
"""

from __future__ import annotations

import onnx_ir as ir

from ...kit.passes import (
    Namer,
    RewritePass,
    dtype_of,
    graph_nodes,
    is_op,
    make_node,
    opset_of,
    other_input,
    rank_of,
    replace,
    sole_consumer,
)

_GEMM_TYPES = (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16)


def _broadcasts_into(c: ir.Value, m, n) -> bool:
    """True when ``c``'s (known) shape broadcasts to (m, n) keeping (m, n)."""
    if c.shape is None or len(c.shape) > 2:
        return False
    dims = [1] * (2 - len(c.shape)) + list(c.shape)
    for d, full in zip(dims, (m, n)):
        if d == 1:
            continue
        if not (isinstance(d, int) and isinstance(full, int) and d == full):
            return False
    return True


class MatMulAddToGemmPass(RewritePass):

    needs = (frozenset({"MatMul"}), frozenset({"Add"}))
    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for mm in graph_nodes(graph):
            if mm.graph is not graph or not is_op(mm, "MatMul") or len(mm.inputs) != 2:
                continue
            a, b = mm.inputs
            if rank_of(a) != 2 or rank_of(b) != 2 or dtype_of(a) not in _GEMM_TYPES:
                continue
            if opset_of(model, mm) < 7:  # Gemm before 7 needed a broadcast attribute
                continue
            add = sole_consumer(mm.outputs[0])
            if not is_op(add, "Add"):
                continue
            found = other_input(add, mm.outputs[0])
            if found is None or found[0] is None or dtype_of(found[0]) != dtype_of(a):
                continue
            c = found[0]
            m, n = a.shape[0], b.shape[1]  # type: ignore[union-attr, index]  # rank_of(a), rank_of(b) == 2: shapes known
            if not _broadcasts_into(c, m, n):
                continue
            gemm = make_node(namer, "Gemm", [a, b, c], name=add.name or "gemm", version=mm.version)
            replace(graph, [mm, add], [gemm], [add.outputs[0]], [gemm.outputs[0]])
            count += 1
        return count
