"""Small models built with onnx.helper for core tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def chain(ops: Sequence[str], shape: Sequence[int] = (2, 3), opset: int = 17) -> onnx.ModelProto:
    """x -> op0 -> op1 -> ... -> y; binary ops take a constant ``c{i}`` of ones."""
    nodes, inits = [], []
    current = "x"
    for i, op in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"v{i}"
        if op in ("Add", "Mul", "Sub"):
            inits.append(numpy_helper.from_array(np.full(shape, i + 1, np.float32), f"c{i}"))
            nodes.append(helper.make_node(op, [current, f"c{i}"], [out], name=f"n{i}_{op.lower()}"))
        else:
            nodes.append(helper.make_node(op, [current], [out], name=f"n{i}_{op.lower()}"))
        current = out
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def diamond() -> onnx.ModelProto:
    """a = Neg(x); b = Relu(a); c = Add(a, b): grouping {a, c} without b is not convex."""
    nodes = [
        helper.make_node("Neg", ["x"], ["a"], name="a"),
        helper.make_node("Relu", ["a"], ["b"], name="b"),
        helper.make_node("Add", ["a", "b"], ["y"], name="c"),
    ]
    graph = helper.make_graph(
        nodes, "diamond",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
