"""Which MatMul/Gemm nodes have a weight that can be quantized, and why the others cannot.

Dynamic and weight-only quantization both rewrite only the constant side of a matrix
product: the second input, a float32 initializer that no one can feed at run time. This
module finds those nodes once, with a reason for every node it leaves in float, so both
tools report the same way (:class:`WeightQuantReport`) and refuse the same way when a node
the user named explicitly cannot be quantized.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from epoxy.quantization.qdq import QuantizationError

DEFAULT_OP_TYPES = ("MatMul", "Gemm")
SUPPORTED_OP_TYPES = frozenset(DEFAULT_OP_TYPES)


@dataclass(frozen=True)
class WeightQuantReport:
    """What a dynamic or weight-only quantization did: the quantized nodes and, for each node
    of a requested op type left in float, why. ``size_before``/``size_after`` are the
    serialized model sizes in bytes."""

    scheme: str
    quantized: tuple[str, ...] = ()
    kept_float: tuple[tuple[str, str], ...] = ()  # (node, why)
    size_before: int = 0
    size_after: int = 0

    @property
    def kept(self) -> dict[str, str]:
        """Node name -> why it stayed float."""
        return dict(self.kept_float)


@dataclass(frozen=True)
class WeightSite:
    """One node whose second input is a constant 2-D float32 weight.

    ``weight`` is the weight as ``[K, N]`` (a Gemm's ``transB`` undone), so every caller
    quantizes along the same axes: output channels on axis 1, blocks along axis 0.
    """

    node: onnx.NodeProto
    label: str
    weight: np.ndarray
    trans_b: bool
    #: the graph holding ``node``: the model's, or an If branch / Loop or Scan body inside it
    graph: onnx.GraphProto | None = None


def node_label(node: onnx.NodeProto, index: int) -> str:
    """The node's name, or ``op_type #index`` when it has none (as qdq.py names nodes)."""
    return node.name or f"{node.op_type} #{index}"


@dataclass(frozen=True)
class GraphScope:
    """One graph of a model with what its nodes see: the labels of its nodes (a subgraph's
    prefixed by the node and attribute holding it, ``Loop #3/body/MatMul #0``) and the
    constant initializers in scope (its own and every enclosing graph's, minus names a
    graph declares as an input, which are fed at run time)."""

    graph: onnx.GraphProto
    labels: tuple[str, ...]
    constants: dict[str, onnx.TensorProto]
    #: ``Loop #3/body`` (the holding node's label and the attribute), "" for the model's graph
    where: str = ""


def graph_scopes(model: onnx.ModelProto) -> list[GraphScope]:
    """The model's graph, then every subgraph (If branches, Loop and Scan bodies), depth first."""
    scopes: list[GraphScope] = []

    def visit(graph: onnx.GraphProto, prefix: str, outer: dict[str, onnx.TensorProto]) -> None:
        inputs = {i.name for i in graph.input}
        constants = {name: t for name, t in outer.items() if name not in inputs}
        constants.update((i.name, i) for i in graph.initializer if i.name not in inputs)
        labels = tuple(prefix + node_label(n, i) for i, n in enumerate(graph.node))
        scopes.append(GraphScope(graph, labels, constants, prefix[:-1]))
        for node, label in zip(graph.node, labels, strict=True):
            for attr in node.attribute:
                subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
                for k, sub in enumerate(subs):
                    name = attr.name if len(subs) == 1 else f"{attr.name}[{k}]"
                    visit(sub, f"{label}/{name}/", constants)

    visit(model.graph, "", {})
    return scopes


def _attr(node: onnx.NodeProto, name: str, default: float | int) -> float | int:
    for a in node.attribute:
        if a.name == name:
            return a.f if a.type == onnx.AttributeProto.FLOAT else a.i
    return default


def _why_not(node: onnx.NodeProto, inits: dict[str, onnx.TensorProto], types: dict[str, int]) -> str | None:
    """Why ``node``'s weight cannot be quantized, or None when it can."""
    if len(node.input) < 2 or not node.input[1]:
        return "it has no second input"
    name = node.input[1]
    if name not in inits:
        return f"its weight {name!r} is not a constant initializer (computed or fed at run time)"
    weight = inits[name]
    if weight.data_type != TensorProto.FLOAT:
        return f"its weight {name!r} is {TensorProto.DataType.Name(weight.data_type)}, not FLOAT"
    if len(weight.dims) != 2:
        return f"its weight {name!r} has rank {len(weight.dims)}; only 2-D [K, N] weights are quantized"
    if types.get(node.input[0], TensorProto.FLOAT) != TensorProto.FLOAT:
        return f"its input {node.input[0]!r} is not float32"
    return None


def find_sites(model: onnx.ModelProto, types: dict[str, int], *, op_types: Collection[str],
               nodes_to_include: Collection[str] | None, nodes_to_exclude: Collection[str],
               op_types_to_exclude: Collection[str]) -> tuple[list[WeightSite], list[tuple[str, str]]]:
    """The quantizable nodes, subgraphs included (a Loop body's MatMul reading an outer
    weight is the hot one of an unrolled-by-Loop RNN), and ``(node, why)`` for the rest of
    the requested ones. A node named in ``nodes_to_include`` that cannot be quantized raises
    :class:`QuantizationError`: the user asked for it by name."""
    unsupported = sorted(set(op_types) - SUPPORTED_OP_TYPES)
    if unsupported:
        raise ValueError(f"op_types {unsupported} are not supported; choose from {sorted(SUPPORTED_OP_TYPES)}")
    scopes = graph_scopes(model)
    all_labels = {label for scope in scopes for label in scope.labels}
    for what, names in (("nodes_to_exclude", nodes_to_exclude), ("nodes_to_include", nodes_to_include or ())):
        unknown = sorted(set(names) - all_labels)
        if unknown:
            raise ValueError(f"{what} names nodes the model does not have: {', '.join(unknown)}")
    sites: list[WeightSite] = []
    kept: list[tuple[str, str]] = []
    for scope in scopes:
        for node, label in zip(scope.graph.node, scope.labels, strict=True):
            site = _site(node, label, scope, types, op_types=op_types, nodes_to_include=nodes_to_include,
                         nodes_to_exclude=nodes_to_exclude, op_types_to_exclude=op_types_to_exclude, kept=kept)
            if site is not None:
                sites.append(site)
    return sites, kept


def _site(node: onnx.NodeProto, label: str, scope: GraphScope, types: dict[str, int], *, op_types: Collection[str],
          nodes_to_include: Collection[str] | None, nodes_to_exclude: Collection[str],
          op_types_to_exclude: Collection[str], kept: list[tuple[str, str]]) -> WeightSite | None:
    """``node`` as a site, or None (with the reason appended to ``kept`` when it was asked for)."""
    if node.op_type not in SUPPORTED_OP_TYPES or node.domain not in ("", "ai.onnx"):
        return None
    named = nodes_to_include is not None and label in nodes_to_include
    if nodes_to_include is not None and not named:
        return None
    if node.op_type not in op_types:
        if named:
            raise QuantizationError(f"node {label!r} ({node.op_type}) was named in nodes_to_include but "
                                    f"{node.op_type} is not in op_types", node=label, op_type=node.op_type)
        return None
    if label in nodes_to_exclude or node.op_type in op_types_to_exclude:
        kept.append((label, "excluded by name" if label in nodes_to_exclude else "its op type is excluded"))
        return None
    inits = scope.constants
    why = _why_not(node, inits, types)
    if why is None and node.op_type == "Gemm" and _attr(node, "transA", 0):
        why = "Gemm with transA=1 (only the weight side is rewritten)"
    if why is not None:
        if named:
            raise QuantizationError(f"node {label!r} ({node.op_type}) cannot be quantized: {why}",
                                    node=label, op_type=node.op_type)
        kept.append((label, why))
        return None
    trans_b = node.op_type == "Gemm" and bool(_attr(node, "transB", 0))
    w = numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)
    return WeightSite(node, label, w.T if trans_b else w, trans_b, scope.graph)


def gemm_alpha_beta(node: onnx.NodeProto) -> tuple[float, float]:
    """A Gemm's ``alpha`` and ``beta`` (1.0 when absent or not a Gemm)."""
    if node.op_type != "Gemm":
        return 1.0, 1.0
    return float(_attr(node, "alpha", 1.0)), float(_attr(node, "beta", 1.0))


def drop_unused_initializers(graph: onnx.GraphProto, candidates: Collection[str]) -> None:
    """Remove the ``candidates`` initializers that no node or graph output reads any more,
    in ``graph`` and every subgraph (a subgraph's own weight may have been quantized too)."""
    graphs = [graph]
    for g in graphs:  # grows while it is walked: every subgraph, once
        for node in g.node:
            for a in node.attribute:
                graphs.extend(([a.g] if a.HasField("g") else []) + list(a.graphs))
    used = {o.name for o in graph.output} | {name for g in graphs for node in g.node for name in node.input}
    for g in graphs:
        kept = [i for i in g.initializer if i.name not in candidates or i.name in used]
        if len(kept) != len(g.initializer):
            del g.initializer[:]
            g.initializer.extend(kept)
