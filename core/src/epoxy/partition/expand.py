"""Partition, expanding the function-defined nodes nobody claims into their bodies.

A node no provider claims may still run: ONNX defines many ops as functions of simpler ones
(Celu, Range, LayerNormalization at old opsets...). The partitioner reports which nodes went
unclaimed; those with a schema function are expanded in place (``epoxy.load.functions``) and
the graph partitioned again, up to :data:`MAX_ROUNDS` times (bodies may hold more such ops).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

import onnx_ir as ir

from ..contract import ValueType
from ..errors import UnsupportedOpError
from ..graph.graph_spec import CoreGraph
from ..graph.names import FreshNames
from ..load.functions import MAX_ROUNDS, expand_node, names_in, schema_function
from .partitioner import Partition, partition


def expand_unclaimed(ir_graph: ir.Graph, graph: CoreGraph, unclaimed: Sequence[int],
                     opsets: MutableMapping[str, int] | None = None, notes: list[str] | None = None) -> int:
    """Expand the function-defined nodes among ``unclaimed`` (indices the partitioner found no
    provider for); returns how many were expanded."""
    todo = []
    for index in unclaimed:
        spec = graph.nodes[index]
        found = schema_function(graph.ir_nodes[index], spec.opset)
        if found is not None:
            todo.append((index, found))
    if not todo:
        return 0
    used_values, used_nodes = names_in(ir_graph)
    used_values.update(graph.inputs)
    values, node_names = FreshNames(used_values), FreshNames(used_nodes | {n.name for n in graph.nodes})
    for index, (function, defaults) in todo:
        spec = graph.nodes[index]
        added = expand_node(ir_graph, graph.ir_nodes[index], function, defaults, caller_name=spec.name,
                            values=values, node_names=node_names, opsets=opsets)
        if notes is not None:
            notes.append(f"node {spec.name!r} ({spec.qualified_op}) is run by no provider: expanded into "
                         f"its ONNX function body ({len(added)} nodes named {spec.name}/...)")
    return len(todo)


def partition_graph(
    ir_graph: ir.Graph,
    opsets: MutableMapping[str, int],
    providers: Sequence[tuple[str, Any]],
    fallback: str | None,
    *,
    outer_inputs: Sequence[str] = (),
    outer_types: Mapping[str, ValueType] | None = None,
    on_expand: Callable[[], None] | None = None,
    notes: list[str] | None = None,
) -> tuple[CoreGraph, Partition]:
    """Build the CoreGraph and partition it; unclaimed function-defined nodes are expanded
    and the graph partitioned again (capability is asked once per round)."""

    def build() -> CoreGraph:
        return CoreGraph(ir_graph, opsets, outer_types=outer_types, outer_inputs=outer_inputs)

    graph = build()
    for _ in range(MAX_ROUNDS):
        try:
            return graph, partition(graph, providers, fallback=fallback)
        except UnsupportedOpError as exc:
            if not expand_unclaimed(ir_graph, graph, exc.unclaimed, opsets, notes):
                raise
        if on_expand is not None:
            on_expand()
        graph = build()
    return graph, partition(graph, providers, fallback=fallback)
