"""The static dimensions a shape computation reads, as constants.

Why: TorchScript exports compute shapes from ``Shape`` at run time even where the dimension
is fixed: ``x.view(-1, x.size(-1))`` becomes ``Concat([-1], Unsqueeze(Squeeze(Slice(Shape(x),
-1))))``. Such a Reshape target is not a constant, so the passes that need one (GPT-2's
flattened linear layers, ``flattened_gemm.py``) cannot see that it only flattens, and the
chain is a handful of steps of the first runs. Where shape inference knows the dimensions a
``Shape`` (with ``start``/``end``), a ``Slice`` of a shape or a ``Gather`` from a shape reads,
its result is that constant; the constant folding pass after this one folds the Unsqueeze,
Squeeze and Concat that follow. A model's static dimensions are checked against every feed
(a feed of another shape is refused), so the constants hold for every run.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ...kit.passes import Namer, RewritePass, add_initializer, attr, constant, graph_nodes, producer_of


def _static(dims: list[object]) -> np.ndarray | None:
    """``dims`` as an int64 vector when every one is a known int."""
    if not all(isinstance(d, int) for d in dims):
        return None
    return np.array(dims, dtype=np.int64)


def _shape_source(value: ir.Value | None) -> list[object] | None:
    """The dims (ints or symbolic) ``value`` holds when it is a ``Shape`` node's output."""
    node = producer_of(value, "Shape")
    if node is None or not node.inputs or node.inputs[0] is None or node.inputs[0].shape is None:
        return None
    dims: list[object] = list(node.inputs[0].shape)
    rank = len(dims)
    start, end = attr(node, "start"), attr(node, "end")
    start = 0 if start is None else int(start)
    end = rank if end is None else int(end)
    return dims[slice(*(max(0, min(rank, b + rank if b < 0 else b)) for b in (start, end)))]


def _shape_value(node: ir.Node) -> np.ndarray | None:
    """The constant a Shape, a Slice of a shape or a Gather from a shape makes, if static."""
    if node.op_type == "Shape":
        dims = _shape_source(node.outputs[0])
        return None if dims is None else _static(dims)
    dims = _shape_source(node.inputs[0] if node.inputs else None)
    if dims is None:
        return None
    positions = np.arange(len(dims))
    if node.op_type == "Gather":
        index = constant(node.inputs[1]) if len(node.inputs) == 2 else None
        if index is None or index.dtype.kind not in "iu" or int(attr(node, "axis", 0)) not in (0, -1):
            return None
        if index.size and (index.min() < -len(dims) or index.max() >= len(dims)):
            return None  # out of range: the kernel reports it
        picked = positions[index.astype(np.int64)]
    else:  # Slice (opset 10 on: bounds as inputs) of the one axis a shape has
        bounds = [constant(v) if v is not None else None for v in node.inputs[1:5]]
        if len(bounds) < 2 or any(b is None for b in bounds[:2]) or any(
                v is not None and b is None for v, b in zip(node.inputs[3:5], bounds[2:])):
            return None
        starts, ends = bounds[0], bounds[1]
        axes = bounds[2] if len(bounds) > 2 else None
        steps = bounds[3] if len(bounds) > 3 else None
        if starts.size != 1 or ends.size != 1 or (axes is not None and int(axes.reshape(-1)[0]) not in (0, -1)):  # type: ignore[union-attr]
            return None
        step = 1 if steps is None else int(steps.reshape(-1)[0])
        if step == 0:
            return None
        picked = positions[int(starts.reshape(-1)[0]):int(ends.reshape(-1)[0]):step]  # type: ignore[union-attr]
    found = _static([dims[int(i)] for i in picked.reshape(-1)])
    return None if found is None else found.reshape(picked.shape)


class StaticShapePass(RewritePass):
    """``Shape`` / ``Slice(Shape)`` / ``Gather(Shape)`` over static dimensions -> initializers."""

    needs = (frozenset({"Shape"}),)

    max_sweeps = 1

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for node in graph_nodes(graph):
            if node.domain != "" or node.op_type not in ("Shape", "Slice", "Gather") or len(node.outputs) != 1:
                continue
            if node.op_type == "Slice" and len(node.inputs) < 3:  # opset < 10: bounds as attributes
                continue
            out = node.outputs[0]
            if out.is_graph_output():
                continue
            value = _shape_value(node)
            if value is None:
                continue
            name = out.name or namer("shape")
            out.name = None
            ir.convenience.replace_all_uses_with(out, add_initializer(graph, None, name, value))
            graph.remove(node, safe=True)
            count += 1
        return count
