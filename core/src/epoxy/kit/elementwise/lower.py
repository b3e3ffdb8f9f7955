"""ONNX nodes -> a :class:`~.program.Program`: attributes, baked constants, a whole group.

Shared by every backend so a fused group means the same program everywhere: the attribute
defaults come from :mod:`.ops`, Clip's constant bounds become attributes, and a size-1
constant operand becomes a literal when dropping it cannot change the output shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...contract import GraphSpec, NodeSpec
from .ops import LOWERED, OPS, PARAM_INPUTS
from .program import Program, ProgramBuilder, Ref


def node_attrs(node: NodeSpec, consts: Mapping[int, np.ndarray]) -> dict[str, Any]:
    """The program attributes of ``node``: its ONNX attributes with the op's defaults, and
    Clip's bounds (attributes before opset 11, constant inputs 1 and 2 from it on)."""
    op = node.op_type
    spec = OPS.get(LOWERED.get(op, op))
    attrs = {name: node.attr(name, default) for name, default in (spec.attrs.items() if spec else ())}
    if op == "Clip" and node.opset >= 11:
        for i, name, default in ((1, "min", -np.inf), (2, "max", np.inf)):
            bound = consts.get(i)
            attrs[name] = float(bound.reshape(-1)[0]) if bound is not None else default
    return attrs


def param_inputs_constant(node: NodeSpec, consts: Mapping[int, np.ndarray]) -> bool:
    """False when an input the program needs as an attribute (Clip's bounds) is computed."""
    if node.op_type == "Clip" and node.opset < 11:
        return True
    return all(i >= len(node.inputs) or not node.inputs[i] or i in consts
               for i in PARAM_INPUTS.get(node.op_type, ()))


def bakeable(value: np.ndarray | None, out_rank: int | None, other_ranks: Sequence[int | None]) -> bool:
    """A size-1 constant becomes a literal when dropping it cannot change the output shape."""
    if value is None or value.size != 1 or value.dtype.kind not in "fbiu":
        return False
    if value.ndim == 0:
        return True
    return out_rank is not None and value.ndim <= out_rank and any(r == out_rank for r in other_ranks)


def _rank(graph: GraphSpec, name: str) -> int | None:
    shape = graph.value_type(name).shape
    return None if shape is None else len(shape)


def fixed_constant(graph: GraphSpec, name: str) -> np.ndarray | None:
    """``name``'s value when it is a constant no feed can replace: an initializer that is
    also a graph input may be fed (onnxruntime's overridable initializers), so baking its
    value into a program would silently ignore the feed."""
    if not name or name in graph.inputs:
        return None
    return graph.constant(name)


def constants_of(graph: GraphSpec, node: NodeSpec) -> dict[int, np.ndarray]:
    """The node's constant inputs (no feed can replace them) by position."""
    out = {}
    for i, name in enumerate(node.inputs):
        value = fixed_constant(graph, name)
        if value is not None:
            out[i] = value
    return out


def lower_group(graph: GraphSpec, node_indices: Sequence[int], inputs: Sequence[str],
                outputs: Sequence[str]) -> tuple[Program, list[int]]:
    """The program of a fused group, and which of ``inputs`` (positions) it loads, in order;
    the others are constants baked in as literals. ``inputs``/``outputs``: the group's
    boundary (:func:`epoxy.kit.boundary`), nodes run in index (topological) order."""
    out_rank = _rank(graph, outputs[0]) if outputs else None
    ranks = {name: _rank(graph, name) for name in inputs}
    refs: dict[str, Ref] = {}
    used: list[int] = []
    for k, name in enumerate(inputs):
        c = fixed_constant(graph, name)
        others = [r for n, r in ranks.items() if n != name and fixed_constant(graph, n) is None]
        if bakeable(c, out_rank, others):
            refs[name] = ("lit", float(np.asarray(c, dtype=np.float64).reshape(-1)[0]))
        else:
            refs[name] = ("in", len(used))
            used.append(k)
    b = ProgramBuilder(len(used))
    for i in sorted(node_indices):
        node = graph.nodes[i]
        skip = PARAM_INPUTS.get(node.op_type, ())
        args = [refs[n] for j, n in enumerate(node.inputs) if n and j not in skip]
        op = LOWERED.get(node.op_type, node.op_type)
        refs[node.outputs[0]] = b.add(op, args, node_attrs(node, constants_of(graph, node)))
    return b.build([refs[o] for o in outputs]), used
