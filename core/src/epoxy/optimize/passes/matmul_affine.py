"""A per-channel constant scale/shift after a MatMul of constant weights -> its weights and bias.

``Mul(Transpose(Add(MatMul(x, W), b)), g)`` with ``g`` constant along the axis the Transpose
moves W's columns to (any chain of such Add/Sub/Mul/Div, the bias Add and the Transpose each
optional) is ``Transpose(Add(MatMul(x, W * g), b * g + shift))``.

Why: ConvNeXt's layer scale, ``gamma * permute(linear(x))``, reaches ONNX as MatMul -> Add ->
Transpose -> Mul(gamma of shape (C, 1, 1)): an elementwise pass over every block's output
(~2.4 us of a ~40 us block at batch 1 on the exporter convnext) for a product by a
constant the weights can carry. The factors are composed in float64 and each weight is
rounded once, as the Conv folds do (:mod:`.conv_affine`).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ...kit.passes import (
    Namer,
    RewritePass,
    add_initializer,
    channel_vector,
    constant,
    graph_nodes,
    is_op,
    other_input,
    rank_of,
    rewritable,
    scaled_per_channel,
    sole_consumer,
    take_place,
    written_into,
)
from .affine_chain import follow_affine


def _bias_add(value: ir.Value, rank: int, columns: int,
              dtype: np.dtype) -> tuple[ir.Node, int, np.ndarray, np.ndarray] | None:
    """``value``'s sole reader when it adds a constant along the last axis: (the Add, the
    constant's input index, the constant, the constant as a vector of ``columns``)."""
    add = sole_consumer(value)
    if add is None or not is_op(add, "Add"):
        return None
    found = other_input(add, value)
    bias = constant(found[0]) if found is not None else None
    vector = None if bias is None or bias.dtype != dtype else channel_vector(bias, rank, columns, rank - 1)
    if found is None or bias is None or vector is None:
        return None
    return add, found[1], bias, vector


def _moved_axis(value: ir.Value, rank: int) -> tuple[ir.Node, int] | None:
    """``value``'s sole reader when it is a Transpose: (it, where it moves the last axis)."""
    transpose = sole_consumer(value)
    if transpose is None or not is_op(transpose, "Transpose"):
        return None
    perm = transpose.attributes.get_ints("perm", None)
    perm = list(range(rank))[::-1] if perm is None else list(perm)
    if sorted(perm) != list(range(rank)):
        return None
    return transpose, perm.index(rank - 1)


class MatMulAffineFoldPass(RewritePass):
    """Fold per-channel constant Add/Sub/Mul/Div chains after a MatMul (through its bias Add and
    a Transpose) into its constant weights and bias."""

    needs = (frozenset({"MatMul"}), frozenset({"Mul", "Div", "Add", "Sub"}))

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for mm in graph_nodes(graph):
            # op_type first: one attribute read for the nodes that are not MatMuls (most)
            if mm.op_type != "MatMul" or mm.graph is not graph or not is_op(mm, "MatMul") or len(mm.inputs) != 2:
                continue
            w = constant(mm.inputs[1])
            rank = rank_of(mm.outputs[0])
            if w is None or w.ndim != 2 or w.dtype.kind != "f" or rank is None or rank < 1:
                continue
            if self._fold(graph, namer, mm, w, rank):
                count += 1
        return count

    @staticmethod
    def _fold(graph: ir.Graph, namer: Namer, mm: ir.Node, w: np.ndarray, rank: int) -> bool:
        columns = w.shape[1]
        start = mm.outputs[0]
        bias = _bias_add(start, rank, columns, w.dtype)
        if bias is not None:
            start = bias[0].outputs[0]
        moved = _moved_axis(start, rank)
        axis = rank - 1
        if moved is not None:
            start, axis = moved[0].outputs[0], moved[1]
        nodes, scale, shift, last = follow_affine(start, rank, columns, w.dtype, axis)
        if shift is not None and not shift.any():
            shift = None  # a chain of products alone (its shift is zeros)
        if not nodes or (shift is not None and bias is None):
            return False  # nothing to fold, or a shift with no bias to carry it
        base = mm.name or "matmul"
        if scale is not None:
            weight = mm.inputs[1]
            in_place = rewritable(weight, w)  # type: ignore[arg-type]
            w = scaled_per_channel(w, scale, axis=1, in_place=in_place)
            if not in_place:
                mm.replace_input_with(1, add_initializer(graph, namer, f"{base}.W_folded", w, fresh=True))
        if bias is not None:
            add, index, b, vector = bias
            b64 = np.broadcast_to(vector, (columns,)).astype(np.float64)
            b64 = b64 * (1.0 if scale is None else scale) + (0.0 if shift is None else shift)
            data = b64.astype(w.dtype).reshape(b.shape if b.size == columns else (columns,))
            new_b = written_into(add.inputs[index], b, data)
            if new_b is None:
                add.replace_input_with(index, add_initializer(graph, namer, f"{base}.B_folded", data, fresh=True))
        take_place(graph, start, last, nodes)
        return True
