"""Runs and error measures the quantization tests share (imported by the test modules)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from epoxy.session import InferenceSession


def run_ort(model: onnx.ModelProto, x, *, optimize: bool) -> np.ndarray:
    """The first output on onnxruntime; ``optimize=False`` runs the graph as written (float
    after each DequantizeLinear), ``True`` lets onnxruntime fuse QDQ into integer kernels."""
    options = ort.SessionOptions()
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, x)[0]


def run_epoxy(model: onnx.ModelProto, x) -> np.ndarray:
    return np.asarray(InferenceSession(model, providers=["cpu"]).run(None, x)[0])


def rel(a: np.ndarray, ref: np.ndarray) -> float:
    """Relative L2 error of ``a`` against ``ref``."""
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


def xy_model(nodes, inits, x_shape, y_shape, opset: int = 13) -> onnx.ModelProto:
    """A graph from float32 input ``x`` to float32 output ``y`` with float32 initializers."""
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
