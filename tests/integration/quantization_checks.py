"""Runs and error measures the quantization tests share (imported by the test modules)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

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
