"""The cpu provider runs the value-moving ops the core's ``QDQPassThroughPass`` puts on the codes
(8-bit MaxPool, Concat, Reshape, Transpose; Relu as Max): a session at level extended equals one
at level basic bit for bit, and its graph shows the op reading codes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy

SHAPE = [1, 4, 9, 9]
CASES = {
    "maxpool": ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, {}),
    "reshape": ("Reshape", {}, {"shape": np.array([1, -1], np.int64)}),
    "transpose": ("Transpose", {"perm": [0, 2, 3, 1]}, {}),
    "concat": ("Concat", {"axis": 1}, {}),
    "relu": ("Relu", {}, {}),
}


def _model(op: str, attrs: dict, extra: dict) -> bytes:
    """x -> Q -> DQ -> op (Concat: with itself) -> Q -> DQ, one scale and zero point throughout."""
    inits = {"s": np.array(0.05, np.float32), "z": np.array(128, np.uint8), **extra}
    data = ["xd", "xd"] if op == "Concat" else ["xd"]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node(op, data + list(extra), ["o"], **attrs),
             helper.make_node("QuantizeLinear", ["o", "s", "z"], ["oq"]),
             helper.make_node("DequantizeLinear", ["oq", "s", "z"], ["y"])]
    graph = helper.make_graph(nodes, "qdq_move", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9).SerializeToString()


@pytest.mark.parametrize("case", sorted(CASES))
def test_moves_on_codes_equal_the_qdq_reading(case):
    op, attrs, extra = CASES[case]
    model = _model(op, attrs, extra)
    x = (np.random.default_rng(1).standard_normal(SHAPE) * 3).astype(np.float32)
    runs = {}
    for level in ("basic", "extended"):
        sess = epoxy.InferenceSession(model, epoxy.SessionOptions(graph_optimization_level=level), providers=["cpu"])
        runs[level] = sess.run(None, {"x": x})[0]
        if level == "extended":  # the op reads codes: one DQ left, after it
            kinds = [n.op_type for n in sess._graph.nodes]
            assert kinds[-2:] == ["Max" if op == "Relu" else op, "DequantizeLinear"], kinds
            assert {d.provider for d in sess.partition_report().nodes} == {"cpu"}
    np.testing.assert_array_equal(runs["extended"], runs["basic"])
