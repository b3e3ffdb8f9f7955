"""Fold weight plumbing whose inputs are all constants into initializers.

Only data-movement ops whose numpy evaluation is exact are folded here (ConstantOfShape,
Unsqueeze, Squeeze, Reshape, Transpose, Concat, Identity), so the fusion passes that follow
see weights as initializers: e.g. models generating their weights with ``ConstantOfShape``
or unsqueezing per-channel vectors. Everything else constant (arithmetic...) is folded by
the plan builder with the providers' own kernels.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from ...kit.passes import Namer, RewritePass, add_initializer, attr, constant, graph_nodes, is_op, opset_of


def _axes(node: ir.Node, opset: int, since: int, args: list[np.ndarray | None]) -> list[int] | None:
    if opset >= since:
        return None if len(args) < 2 or args[1] is None else [int(a) for a in args[1].reshape(-1)]
    found = attr(node, "axes")
    return None if found is None else [int(a) for a in found]


def _constant_of_shape(node: ir.Node, opset: int, args: list) -> np.ndarray:
    shape = tuple(int(d) for d in args[0].reshape(-1))
    value = node.attributes.get("value")
    fill = np.zeros(1, dtype=np.float32) if value is None else value.value.numpy().reshape(-1)
    return np.full(shape, fill[0], dtype=fill.dtype)


def _unsqueeze(node: ir.Node, opset: int, args: list) -> np.ndarray | None:
    x = args[0]
    axes = _axes(node, opset, 13, args)
    if axes is None:
        return None
    rank = x.ndim + len(axes)
    axes = sorted(a + rank if a < 0 else a for a in axes)
    if len(set(axes)) != len(axes) or any(not 0 <= a < rank for a in axes):
        return None
    out = x
    for a in axes:
        out = np.expand_dims(out, a)
    return out


def _squeeze(node: ir.Node, opset: int, args: list) -> np.ndarray | None:
    x = args[0]
    axes = _axes(node, opset, 13, args)
    if axes is None:
        return np.squeeze(x)
    axes = [a + x.ndim if a < 0 else a for a in axes]
    if any(not 0 <= a < x.ndim or x.shape[a] != 1 for a in axes):
        return None
    return np.squeeze(x, axis=tuple(axes))


def _reshape(node: ir.Node, opset: int, args: list) -> np.ndarray | None:
    x = args[0]
    if opset < 5:
        return None
    shape = [int(d) for d in args[1].reshape(-1)]
    allowzero = opset >= 14 and bool(attr(node, "allowzero", 0))
    if not allowzero:
        shape = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(shape)]
    if shape.count(-1) > 1:
        return None
    try:
        return x.reshape(shape)
    except ValueError:
        return None


def _transpose(node: ir.Node, opset: int, args: list) -> np.ndarray | None:
    perm = attr(node, "perm")
    return np.transpose(args[0], None if perm is None else tuple(perm))


def _concat(node: ir.Node, opset: int, args: list) -> np.ndarray | None:
    axis = attr(node, "axis")
    if axis is None or any(a is None for a in args) or len({a.dtype for a in args}) != 1:
        return None
    return np.concatenate(args, axis=axis)


FOLDERS: dict[str, tuple[int, Callable[..., np.ndarray | None]]] = {
    # op: (number of inputs read, evaluator)
    "ConstantOfShape": (1, _constant_of_shape),
    "Unsqueeze": (2, _unsqueeze),
    "Squeeze": (2, _squeeze),
    "Reshape": (2, _reshape),
    "Transpose": (1, _transpose),
    "Identity": (1, lambda node, opset, args: args[0]),
    "Concat": (-1, _concat),
}


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
                result = fn(node, opset_of(model, node), args)
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
