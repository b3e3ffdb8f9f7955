"""Dropping a session's ``onnx_ir`` model's weights when the session goes.

Why: an ``onnx_ir`` graph is a web of reference cycles (values know their producers and
users), so a model nobody holds any more waits for the garbage collector's next full pass,
which counts objects, not bytes: a few hundred nodes holding hundreds of megabytes of
weights can stay in memory long after ``del session``. Forgetting the tensors when the
session is freed returns their memory at once, as onnxruntime's does.
"""

from __future__ import annotations

import onnx_ir as ir

from .walk import all_graphs


def drop_constant_data(model: ir.Model) -> None:
    """Forget every initializer's data in ``model``'s graphs (the graph structure stays)."""
    for graph in all_graphs(model.graph):
        for value in graph.initializers.values():
            value.const_value = None
