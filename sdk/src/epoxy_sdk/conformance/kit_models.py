"""The small models the API scope runs, and fused chains generated from what a provider claims.

A compiling provider's group path (``capability`` -> ``FusedGroup`` -> ``compile``) is only
exercised by models of several neighbouring nodes it claims, so chains are built from the
ops a provider answers for in ``capability`` (asked on one-node models), not from a fixed
list it may not run: a provider that claims Relu and Tanh gets Relu -> Tanh -> Relu.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

OPSET = 17
SHAPE = (2, 3)


def kit_model() -> onnx.ModelProto:
    """Add -> Relu -> Mul -> MatMul: the API scope's whole-model check."""
    nodes = [
        helper.make_node("Add", ["x", "x"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "x"], ["m"], name="mul"),
        helper.make_node("MatMul", ["m", "w"], ["y"], name="matmul"),
    ]
    w = onnx.numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, "w")
    graph = helper.make_graph(nodes, "api_scope", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def kit_input() -> np.ndarray:
    return np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)


#: op -> attributes; every one maps any float32 tensor to a finite float32 tensor of the
#: same shape, so they chain in any order (binary ones take the running value twice)
CHAINABLE: dict[str, dict[str, Any]] = {
    "Relu": {}, "Sigmoid": {}, "Tanh": {}, "Abs": {}, "Neg": {}, "Softsign": {}, "Softplus": {},
    "Elu": {"alpha": 0.5}, "LeakyRelu": {"alpha": 0.1}, "HardSigmoid": {}, "Erf": {}, "Sin": {},
    "Cos": {}, "Identity": {}, "Floor": {}, "Ceil": {}, "Add": {}, "Mul": {}, "Sub": {}, "Max": {}, "Min": {},
}
BINARY = frozenset({"Add", "Mul", "Sub", "Max", "Min"})


def _node(op: str, src: str, out: str, name: str) -> onnx.NodeProto:
    inputs = [src, src] if op in BINARY else [src]
    return helper.make_node(op, inputs, [out], name=name, **CHAINABLE[op])


def chain_model(ops: Sequence[str], *, tap: bool = False) -> onnx.ModelProto:
    """x -> ops[0] -> ops[1] -> ... -> y. ``tap``: the first intermediate is a graph output
    too, so a group must hand out a value it also uses inside."""
    nodes, src = [], "x"
    for i, op in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"v{i}"
        nodes.append(_node(op, src, out, f"{op.lower()}_{i}"))
        src = out
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(SHAPE))]
    if tap and len(ops) > 1:
        outputs.append(helper.make_tensor_value_info("v0", TensorProto.FLOAT, list(SHAPE)))
    graph = helper.make_graph(nodes, "kit_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                              outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def single_op_model(op: str) -> onnx.ModelProto:
    return chain_model([op])


@dataclass(frozen=True)
class ChainCase:
    """A generated chain: its id (the ops joined), the model, and what it exercises."""

    id: str
    ops: tuple[str, ...]
    tap: bool

    def model(self) -> onnx.ModelProto:
        return chain_model(self.ops, tap=self.tap)


def chains(claimed: Sequence[str], length: int = 3) -> list[ChainCase]:
    """Chains over the claimed chainable ops: sliding windows of ``length`` (each op appears
    in some chain, neighbours vary), one chain of all of them (up to 8), and a tapped chain
    whose first intermediate is also a graph output."""
    ops = [op for op in CHAINABLE if op in set(claimed)]
    if len(ops) < 2:
        return []
    cases: list[ChainCase] = []
    width = min(length, len(ops))
    for start in range(0, len(ops) - width + 1):
        window = tuple(ops[start:start + width])
        cases.append(ChainCase("-".join(window), window, False))
    everything = tuple(ops[:8])
    if everything not in {c.ops for c in cases}:
        cases.append(ChainCase("-".join(everything), everything, False))
    tapped = tuple(ops[:width])
    cases.append(ChainCase("tap:" + "-".join(tapped), tapped, True))
    return cases


def claimed_chainable_ops(capability_of: Callable[[onnx.ModelProto], set[int]]) -> list[str]:
    """The chainable ops whose one-node model's node the provider claims.
    ``capability_of(model)``: the node indices the provider claims (as nodes or in groups)."""
    return [op for op in CHAINABLE if 0 in capability_of(single_op_model(op))]
