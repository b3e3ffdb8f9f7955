"""Walks over an ``onnx_ir`` graph and the graphs nested in its nodes' attributes.

Why not ``onnx_ir.traversal.RecursiveGraphIterator`` (or ``Model.graphs()``, built on it):
it starts a generator per node to look for subgraphs, ~1.5 us a node, and a session walks
its model this way several times while it is built (fresh names, the Gradient check, the
weights dropped with the session). These look at a node's attributes only when it has some,
and into an attribute only when it holds graphs.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir

_GRAPH = ir.AttributeType.GRAPH
_GRAPHS = ir.AttributeType.GRAPHS


def node_subgraphs(node: ir.Node) -> list[ir.Graph]:
    """The graphs ``node``'s attributes hold (an If's branches, a Loop's body...)."""
    found: list[ir.Graph] = []
    for attr in node.attributes.values():
        kind = attr.type
        if (kind is _GRAPH or kind is _GRAPHS) and isinstance(attr, ir.Attr):
            if kind is _GRAPH:
                found.append(attr.value)
            else:
                found.extend(attr.value)
    return found


def _holds_graphs(node: ir.Node) -> bool:
    for attr in node.attributes.values():
        kind = attr.type
        if kind is _GRAPH or kind is _GRAPHS:
            return True
    return False


def all_nodes(graph: ir.Graph) -> Iterator[ir.Node]:
    """Every node of ``graph`` in order, each followed by the nodes of its subgraphs."""
    for node in graph:
        yield node
        if node.attributes and _holds_graphs(node):
            for sub in node_subgraphs(node):
                yield from all_nodes(sub)


def all_graphs(graph: ir.Graph) -> Iterator[ir.Graph]:
    """``graph`` and every graph nested in it."""
    yield graph
    for node in graph:
        if node.attributes and _holds_graphs(node):
            for sub in node_subgraphs(node):
                yield from all_graphs(sub)
