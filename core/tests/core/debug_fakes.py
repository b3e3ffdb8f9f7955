"""Providers with planted bugs and a ~20-node model for the validate/reduce tests.

``buggy`` claims Relu, Neg and Mul; its Relu is wrong by 1% (``max(x, 0) * 1.01``), the
other two are right, so a check must tell the planted node from its correct neighbours.
``raiser`` claims Neg and Sub; its Neg raises.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from fakes import Factory, mini_factory
from onnx import TensorProto, helper, numpy_helper

from epoxy.kit import KernelProvider, KernelRegistry
from epoxy.testing import registry_with

BUGGY = KernelRegistry()
BUGGY.register("Relu", (1, 6, 13, 14))(lambda node: lambda x: (np.maximum(x, 0) * 1.01).astype(x.dtype))
BUGGY.register("Neg", (1, 6, 13))(lambda node: np.negative)
BUGGY.register("Mul", (1, 7, 13, 14))(lambda node: np.multiply)

RAISER = KernelRegistry()


def _raising(node: Any) -> Any:
    def run(x: np.ndarray) -> np.ndarray:
        raise RuntimeError("planted failure in Neg")

    return run


RAISER.register("Neg", (1, 6, 13))(_raising)
RAISER.register("Sub", (1, 7, 13, 14))(lambda node: np.subtract)


def _factory(name: str, kernels: KernelRegistry) -> Factory:
    factory = Factory(name, lambda d, o: KernelProvider(name, d, kernels, o), priority=60)
    factory.supported_ops = kernels.ops  # type: ignore[method-assign]
    return factory


def planted_registry() -> Any:
    """The mini cpu (the reference) plus ``buggy`` and ``raiser``."""
    return registry_with(_factory("buggy", BUGGY), _factory("raiser", RAISER), mini_factory(),
                         plugin_name="debug-fakes")


def chain_model(seed: int = 3) -> onnx.ModelProto:
    """20 nodes; exactly one Relu (``relu_planted``), several Neg and Mul (correct on buggy)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) * 0.3, "W1"),
             numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) * 0.3, "W2"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
             numpy_helper.from_array(np.float32(0.5).reshape(()), "half")]
    spec = [  # (name, op, inputs, output)
        ("mm1", "MatMul", ["x", "W1"], "t1"), ("add1", "Add", ["t1", "b"], "t2"), ("mul1", "Mul", ["t2", "half"], "t3"),
        ("neg1", "Neg", ["t3"], "t4"), ("sub1", "Sub", ["t4", "x"], "t5"), ("mul2", "Mul", ["t5", "half"], "t6"),
        ("add2", "Add", ["t6", "t3"], "t7"), ("neg2", "Neg", ["t7"], "t8"), ("mm2", "MatMul", ["t8", "W2"], "t9"),
        ("add3", "Add", ["t9", "b"], "t10"), ("relu_planted", "Relu", ["t10"], "t11"),
        ("mul3", "Mul", ["t11", "half"], "t12"), ("sub2", "Sub", ["t12", "t8"], "t13"),
        ("neg3", "Neg", ["t13"], "t14"), ("add4", "Add", ["t14", "t11"], "t15"),
        ("mul4", "Mul", ["t15", "half"], "t16"),
        ("id1", "Identity", ["t16"], "t17"), ("sub3", "Sub", ["t17", "t12"], "t18"), ("neg4", "Neg", ["t18"], "t19"),
        ("add5", "Add", ["t19", "t17"], "y"),
    ]
    nodes = [helper.make_node(op, ins, [out], name=name) for name, op, ins, out in spec]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
