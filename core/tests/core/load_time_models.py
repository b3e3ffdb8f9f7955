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


def reshaped_fills_model(opset: int = 17, bad_axes: bool = True) -> onnx.ModelProto:
    """Fills reshaped by the constant-folding pass's rules (Unsqueeze, Squeeze, Reshape,
    Transpose; axes as an attribute before opset 13, as an input from 13), and reshapes left
    to the pass: axes a feed may override, axes the rule refuses (repeated: ``bad_axes``,
    which onnxruntime refuses to load), a fill also read by another node (it stays beside its
    reshape); a fill an Identity graph output reads is left to the passes (the identity
    elimination that runs before the fold gives the ConstantOfShape the output's name)."""
    i64 = TensorProto.INT64
    axes_as_input = opset >= 13

    def axes(node_input: str, axes_name: str, values: list[int], output: str, op: str) -> onnx.NodeProto:
        if axes_as_input:
            return helper.make_node(op, [node_input, axes_name], [output])
        return helper.make_node(op, [node_input], [output], axes=values)

    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (
        ("scale_shape", [4]), ("plane_shape", [1, 6, 1]), ("axes_12", [1, 2]), ("axes_02", [0, 2]),
        ("to_2x3", [2, 3]), ("repeated", [1, 1]), ("out_shape", [3]))]
    nodes = [
        helper.make_node("ConstantOfShape", ["scale_shape"], ["scale"], value=one(0.5, np.float32)),
        axes("scale", "axes_12", [1, 2], "scale_chw", "Unsqueeze"),  # [4] -> [4, 1, 1]
        helper.make_node("Mul", ["x", "scale_chw"], ["scaled"]),
        helper.make_node("ConstantOfShape", ["plane_shape"], ["plane"], value=one(2.0, np.float32)),
        axes("plane", "axes_02", [0, 2], "squeezed", "Squeeze"),  # [1, 6, 1] -> [6]
        helper.make_node("Reshape", ["squeezed", "to_2x3"], ["grid"]),
        helper.make_node("Transpose", ["grid"], ["grid_t"], perm=[1, 0]),
        helper.make_node("Add", ["grid_t", "feed"], ["plus"]),
        axes("scale", "axes_feed", [0], "by_feed", "Unsqueeze") if axes_as_input else
        helper.make_node("Unsqueeze", ["scale"], ["by_feed"], axes=[0]),
        helper.make_node("Neg", ["by_feed"], ["negated"]),
        helper.make_node("ConstantOfShape", ["out_shape"], ["row"], value=one(3, np.int64)),
        helper.make_node("Identity", ["row"], ["row_out"]),
    ]
    outputs = [("scaled", F, [1, 4, 2, 2]), ("plus", F, [3, 2]), ("negated", F, [1, 4]), ("row_out", i64, [3])]
    if bad_axes:
        nodes.append(axes("row", "repeated", [1, 1], "bad_axes", "Unsqueeze"))
        outputs.append(("bad_axes", i64, ["a", "b", "c"]))
    inputs = [helper.make_tensor_value_info("x", F, [1, 4, 2, 2]), helper.make_tensor_value_info("feed", F, [3, 2])]
    if axes_as_input:
        inputs.append(helper.make_tensor_value_info("axes_feed", i64, [1]))
        inits.append(numpy_helper.from_array(np.array([0], np.int64), "axes_feed"))
    graph = helper.make_graph(
        nodes, "reshaped_fills", inputs, [helper.make_tensor_value_info(*output) for output in outputs],
        initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
