"""Small model builders shared by the ep-openvino tests (imported by its unique name)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def make_model(nodes, inputs, outputs, initializers=(), opset=18):
    """A checked ModelProto from helper-made nodes and (name, elem_type, shape) tuples."""
    graph = helper.make_graph(
        nodes, "t",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in dict(initializers).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def conv_net(rng, *, middle=None, channels=8):
    """conv -> relu -> [middle op] -> conv -> relu -> global pool, random weights.

    ``middle``: a node type inserted between the two conv blocks (shape preserving).
    """
    w1 = (rng.standard_normal((channels, 3, 3, 3)) * 0.2).astype(np.float32)
    b1 = (rng.standard_normal(channels) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((channels, channels, 3, 3)) * 0.2).astype(np.float32)
    b2 = (rng.standard_normal(channels) * 0.1).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
    ]
    src = "r1"
    if middle is not None:
        nodes.append(helper.make_node(middle, ["r1"], ["m"], name="middle"))
        src = "m"
    nodes += [
        helper.make_node("Conv", [src, "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["y"], name="pool"),
    ]
    return make_model(
        nodes, [("x", TensorProto.FLOAT, ["N", 3, 16, 16])], [("y", TensorProto.FLOAT, ["N", channels, 1, 1])],
        {"w1": w1, "b1": b1, "w2": w2, "b2": b2}, opset=18,
    )
