"""Models for the load-time passes' tests (core/tests/core/test_load_folds_fills.py and
tests/integration/test_load_time_passes.py, which loads this file by path)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def one(value: float, dtype: type) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array([value], dtype))


def fills_model(ir_version: int = 8) -> onnx.ModelProto:
    """Fills folded while loading (no value: float zero; an int64 fill; a shape given by a
    Constant node; a weight a Conv+BN fold scales) and fills left to the pass (a shape a feed
    may override, a graph output, a shape made by Concat)."""
    i64 = TensorProto.INT64
    inits = [numpy_helper.from_array(np.array(s, np.int64), n) for n, s in (
        ("w_shape", [4, 3, 3, 3]), ("zeros_shape", [2, 3]), ("ints_shape", [5]), ("out_shape", [2]),
        ("half", [2]))] + [numpy_helper.from_array(np.full(4, v, np.float32), n)
                           for n, v in (("gamma", 1.5), ("beta", 0.1), ("mean", 0.2), ("var", 0.9))]
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], ["w"], value=one(0.02, np.float32)),
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["bn"]),
        helper.make_node("ConstantOfShape", ["zeros_shape"], ["zeros"]),
        helper.make_node("Add", ["zeros", "feed"], ["plus"]),
        helper.make_node("ConstantOfShape", ["ints_shape"], ["ints"], value=one(7, np.int64)),
        helper.make_node("Constant", [], ["const_shape"], value=numpy_helper.from_array(np.array([3], np.int64))),
        helper.make_node("ConstantOfShape", ["const_shape"], ["from_constant"]),
        helper.make_node("Mul", ["ints", "ints"], ["ints_squared"]),
        helper.make_node("Neg", ["from_constant"], ["negated"]),
        helper.make_node("ConstantOfShape", ["override_shape"], ["overridable"]),
        helper.make_node("ConstantOfShape", ["out_shape"], ["as_output"]),
        helper.make_node("Concat", ["half", "half"], ["concat_shape"], axis=0),
        helper.make_node("ConstantOfShape", ["concat_shape"], ["from_concat"]),
    ]
    graph = helper.make_graph(
        nodes, "fills", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
                         helper.make_tensor_value_info("feed", TensorProto.FLOAT, [2, 3]),
                         helper.make_tensor_value_info("override_shape", i64, [1])],
        [helper.make_tensor_value_info(n, t, None) for n, t in (
            ("bn", F), ("plus", F), ("ints_squared", i64), ("negated", F), ("overridable", F), ("as_output", F),
            ("from_concat", F))],
        initializer=inits + [numpy_helper.from_array(np.array([2], np.int64), "override_shape")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=ir_version)
