"""Minimal hostile models, reduced from fuzzing (issue #16): each is the smallest model that
crashed, stalled or blindly allocated in the loader before it was fixed.

``CRASHERS`` are loaded in a subprocess by the tests: before the fix they killed the process
(segfault in onnx's shape inference) or ran for minutes, and a regression must fail a test,
not take pytest down.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=23, functions=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "hostile", inputs, outputs, initializer=list(inits))
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("local", 1)] if functions else [])
    return helper.make_model(graph, opset_imports=imports, functions=list(functions))


def _vi(name: str, shape: Sequence[int | str] | None, elem: int = F) -> onnx.ValueInfoProto:
    """A value of ``elem`` type; ``shape`` None: type only (outputs inference fills in)."""
    if shape is None:
        return helper.make_value_info(name, helper.make_tensor_type_proto(elem, None))
    return helper.make_tensor_value_info(name, elem, shape)


def layer_norm(axis: int, *, after_relu: bool = False, op: str = "LayerNormalization") -> onnx.ModelProto:
    """x[2,3,4,5] -> LayerNormalization(axis) -> y, mean, inv_std (RMSNormalization: y);
    ``after_relu``: its input is an intermediate (its rank known only from inference)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu")] if after_relu else []
    outputs = ["y", "mean", "inv_std"] if op == "LayerNormalization" else ["y"]
    nodes.append(helper.make_node(op, ["r" if after_relu else "x", "scale"], outputs, name="norm", axis=axis))
    return _model(nodes, [_vi("x", [2, 3, 4, 5])], [_vi(o, None) for o in outputs],
                  [numpy_helper.from_array(np.ones(5, np.float32), "scale")])


def gather_nd(batch_dims: int, indices_shape: Sequence[int] = (2, 1)) -> onnx.ModelProto:
    """data[2,3,4], indices (declared shape) -> GatherND(batch_dims)."""
    node = helper.make_node("GatherND", ["data", "indices"], ["y"], name="gather", batch_dims=batch_dims)
    return _model([node], [_vi("data", [2, 3, 4]), _vi("indices", list(indices_shape), TensorProto.INT64)],
                  [_vi("y", None)])


def gather_nd_after_expand() -> onnx.ModelProto:
    """Expand to the constant shape [2, -10]: onnx infers indices of shape [2, -10] itself."""
    nodes = [helper.make_node("Expand", ["z", "shape"], ["indices"], name="expand"),
             helper.make_node("GatherND", ["data", "indices"], ["y"], name="gather")]
    return _model(nodes, [_vi("data", [2, 3, 4]), _vi("z", [1, 1], TensorProto.INT64)], [_vi("y", None)],
                  [numpy_helper.from_array(np.array([2, -10], np.int64), "shape")])


def split(num_outputs: int) -> onnx.ModelProto:
    """x[4,6] -> Split(axis=1, num_outputs) with two outputs."""
    node = helper.make_node("Split", ["x"], ["a", "b"], name="split", axis=1, num_outputs=num_outputs)
    return _model([node], [_vi("x", [4, 6])], [_vi("a", None), _vi("b", None)], opset=18)


def split_num_outputs_mistyped() -> onnx.ModelProto:
    """Split-18 whose ``num_outputs`` says TYPE_PROTO but holds ``i = 3`` (the fuzzer's
    crash-split-num-outputs-mistyped): onnx's inference reads ``i`` and aborts on 4 outputs."""
    model = split(3)
    node = model.graph.node[0]
    node.output.extend(["c", "d"])
    model.graph.output.extend([_vi("c", None), _vi("d", None)])
    attr = next(a for a in node.attribute if a.name == "num_outputs")
    attr.type = onnx.AttributeProto.TYPE_PROTO
    return model


def layer_norm_in_function(axis: int) -> onnx.ModelProto:
    """A local function whose LayerNormalization takes ``axis`` from the call's attribute."""
    body = helper.make_node("LayerNormalization", ["x", "s"], ["y", "mean"], name="inner_norm")  # 2 outputs: crashed
    body.attribute.add(name="axis", type=onnx.AttributeProto.INT, ref_attr_name="ax")
    function = helper.make_function("local", "Norm", ["x", "s"], ["y"], [body], [helper.make_opsetid("", 23)],
                                    attributes=["ax"])
    call = helper.make_node("Norm", ["x", "scale"], ["y"], name="call", domain="local", ax=axis)
    return _model([call], [_vi("x", [2, 3, 4, 5])], [_vi("y", None)],
                  [numpy_helper.from_array(np.ones(5, np.float32), "scale")], functions=[function])


def layer_norm_in_if(axis: int) -> onnx.ModelProto:
    """If(cond) whose then-branch normalizes the outer ``x`` with ``axis``."""
    def branch(name: str, op_axis: int | None) -> onnx.GraphProto:
        node = (helper.make_node("LayerNormalization", ["x", "scale"], [f"{name}_y", f"{name}_mean"],
                                 name=f"{name}_norm", axis=op_axis) if op_axis is not None
                else helper.make_node("Identity", ["x"], [f"{name}_y"], name=f"{name}_id"))
        return helper.make_graph([node], name, [], [_vi(f"{name}_y", None)])

    node = helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch("then", axis),
                            else_branch=branch("else", None))
    return _model([node], [_vi("x", [2, 3, 4, 5]), _vi("cond", [], TensorProto.BOOL)], [_vi("y", None)],
                  [numpy_helper.from_array(np.ones(5, np.float32), "scale")])


#: name -> (builder, what loading must give: an exception class name, or "loaded")
CRASHERS: dict[str, tuple[Callable[[], onnx.ModelProto], str]] = {
    # segfaults in onnx's LayerNormalization inference: axis cast to a negative int
    "layer_norm_axis_2**31": (lambda: layer_norm(2**31), "InvalidGraphError"),
    "layer_norm_axis_2**32-1": (lambda: layer_norm(2**32 - 1), "InvalidGraphError"),
    "layer_norm_axis_in_function": (lambda: layer_norm_in_function(2**31 + 5), "InvalidGraphError"),
    "layer_norm_axis_in_if": (lambda: layer_norm_in_if(3 * 2**31), "InvalidGraphError"),
    # segfaults in onnx's GatherND inference: a negative index into the data shape
    "gather_nd_batch_dims_-9": (lambda: gather_nd(-9), "InvalidGraphError"),
    "gather_nd_batch_dims_-2**31": (lambda: gather_nd(-(2**31)), "InvalidGraphError"),
    "gather_nd_declared_negative_dim": (lambda: gather_nd(0, (2, -10)), "loaded"),
    "gather_nd_inferred_negative_dim": (gather_nd_after_expand, "loaded"),
    # onnx's Split inference sizes a vector of num_outputs entries (minutes, then OOM)
    "split_num_outputs_2**31": (lambda: split(2**31), "InvalidGraphError"),
    # onnx's Split inference reads num_outputs' int field whatever its declared type (SIGABRT)
    "split_num_outputs_mistyped": (split_num_outputs_mistyped, "InvalidGraphError"),
}

#: loaded, then inferred again as after an expansion (functions.reinfer_shapes): the
#: loaded model's own types bring the negative dim back to GatherND
#: crashers loaded with ``check="off"``: the checker would refuse them first, and a user may turn it off
UNCHECKED = {"split_num_outputs_mistyped"}

REINFER_CRASHERS: dict[str, tuple[Callable[[], onnx.ModelProto], str]] = {
    "reinfer_gather_nd_inferred_negative_dim": (gather_nd_after_expand, "loaded"),
}
