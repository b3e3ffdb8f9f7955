"""Shared by the tests of the QDQ-on-codes ops (QuantizedAdd/Mul, QuantizedLookup,
QuantizedGlobalAveragePool): random codes, an epoxy session at one optimization level, and
onnxruntime running the QDQ graph as written (the oracle)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

import epoxy


def codes(rng: np.random.Generator, dtype: Any, shape: Any) -> np.ndarray:
    """Uniform 8-bit codes over the dtype's whole range."""
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def run_epoxy(model: onnx.ModelProto, feeds: dict[str, np.ndarray], level: str,
              jit: bool = True) -> tuple[np.ndarray, list[str]]:
    """The first output and the optimized graph's op types (``disable``: the graph as written)."""
    sess = epoxy.InferenceSession(model.SerializeToString(), epoxy.SessionOptions(graph_optimization_level=level),
                                  providers=[("cpu", {"jit": jit})])
    return sess.run(None, feeds)[0], [n.op_type for n in sess._graph.nodes]


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """onnxruntime with its optimizer off: the QDQ graph's float reading as written."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


class StubNode:
    """The little of a NodeSpec the ops' kernel builders read (no attributes set): for calling a
    kernel directly with inputs a session would refuse earlier."""

    def __init__(self, name: str, op_type: str) -> None:
        self.name, self.qualified_op = name, f"com.epoxy.cpu::{op_type}"

    @staticmethod
    def attr(name: str, default: Any = None) -> Any:
        return default
