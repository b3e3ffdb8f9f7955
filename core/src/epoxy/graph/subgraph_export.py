"""Export a group of nodes as a standalone ONNX model (what compile-based providers need)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import onnx
import onnx_ir as ir
from onnx import helper, numpy_helper

from ..contract import ValueType
from ..kit.groups import boundary
from .export_opsets import convert_nodes, plan_opsets

if TYPE_CHECKING:
    from .graph_spec import CoreGraph


def _value_info(name: str, vt: ValueType) -> onnx.ValueInfoProto:
    if vt.kind == "tensor":
        shape = None if vt.shape is None else [d if d is not None else None for d in vt.shape]
        return helper.make_tensor_value_info(name, vt.elem_type, shape)
    return helper.make_empty_tensor_value_info(name)


def export_nodes(graph: CoreGraph, node_indices: Sequence[int]) -> onnx.ModelProto:
    """A model holding exactly these nodes; constants they read become initializers.

    Its opset imports fit every node, including ones optimizer passes created at a newer
    version than the model imports (see :mod:`epoxy.graph.export_opsets`)."""
    order = sorted(node_indices)
    inputs, outputs = boundary(graph, order)
    initializers = []
    feed_inputs = []
    for name in inputs:
        const = graph.constant(name)
        if const is not None:
            initializers.append(numpy_helper.from_array(const, name))
        else:
            feed_inputs.append(_value_info(name, graph.value_type(name)))
    nodes = [ir.serde.serialize_node(graph.ir_nodes[i]) for i in order]
    opsets, stale = plan_opsets(graph, order)
    if stale:
        nodes = _convert_stale(graph, nodes, stale, opsets[""])
    g = helper.make_graph(
        nodes,
        "epoxy_subgraph",
        feed_inputs,
        [_value_info(n, graph.value_type(n)) for n in outputs],
        initializer=initializers,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()],
                             producer_name="epoxy")


def _convert_stale(graph: CoreGraph, nodes: list[onnx.NodeProto], stale: dict[int, int],
                   target: int) -> list[onnx.NodeProto]:
    """``nodes`` with each stale one (position -> its opset) rewritten for ``target``."""
    used = {name for n in nodes for name in (*n.input, *n.output) if name}
    replaced: dict[int, list[onnx.NodeProto]] = {}
    for source in sorted(set(stale.values())):
        positions = [p for p, v in stale.items() if v == source]
        converted = convert_nodes([nodes[p] for p in positions], source, target, used,
                                  lambda name: _value_info(name, graph.value_type(name)))
        replaced.update(zip(positions, converted))
    return [m for p, n in enumerate(nodes) for m in replaced.get(p, [n])]
