"""What every mutation family shares: the draft a case is built on, graph walking, absurd values."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx
from onnx import AttributeProto, TensorProto

ABSURD_INTS = [-1, 0, 1, 2, 3, 7, 1000, -5, -(2**31), 2**31 - 1, 2**31, 2**40, 2**62, -(2**62), 2**63 - 1,
               -(2**63)]
ABSURD_DIMS = [0, -1, -7, 2**20, 2**31, 2**40, 2**62, 2**63 - 1]
TENSOR_TYPES = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL,
                TensorProto.STRING, TensorProto.FLOAT16, TensorProto.UINT8, TensorProto.INT8, TensorProto.BFLOAT16,
                TensorProto.COMPLEX64, TensorProto.FLOAT8E4M3FN, TensorProto.UINT4, TensorProto.INT4,
                TensorProto.UNDEFINED, 99]


def type_name(elem: int) -> str:
    """``FLOAT`` for 1; the number for a type onnx does not know."""
    return TensorProto.DataType.Name(elem) if elem in TensorProto.DataType.values() else str(elem)


@dataclass
class Draft:
    """A case being built: the seed's model (a copy) and feeds, and what was done to them."""

    model: onnx.ModelProto
    feeds: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)
    data: bytes | None = None  # the serialized model, once a family wrote bytes itself
    files: dict[str, bytes] = field(default_factory=dict)  # besides model.onnx
    cwd_files: dict[str, bytes] = field(default_factory=dict)
    by_path: bool = False
    must_refuse: bool = False
    #: the declared inputs changed: the seed's feeds may no longer fit them
    inputs_changed: bool = False


def graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    """``graph`` and every subgraph under it, depth first."""
    found = [graph]
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                found.extend(graphs(attr.g))
            for g in attr.graphs:
                found.extend(graphs(g))
    return found


def any_graph(rng: random.Random, model: onnx.ModelProto) -> onnx.GraphProto:
    every = graphs(model.graph)
    return every[0] if rng.random() < 0.6 else rng.choice(every)


def any_initializer(rng: random.Random, model: onnx.ModelProto) -> onnx.TensorProto | None:
    """An initializer of a graph :func:`any_graph` picks (``None``: that graph has none)."""
    graph = any_graph(rng, model)
    return rng.choice(graph.initializer) if graph.initializer else None


def all_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Nodes of the graph, its subgraphs and the model-local functions."""
    nodes = [n for g in graphs(model.graph) for n in g.node]
    return nodes + [n for f in model.functions for n in f.node]


def any_node(rng: random.Random, model: onnx.ModelProto) -> onnx.NodeProto | None:
    nodes = all_nodes(model)
    return rng.choice(nodes) if nodes else None


def value_names(graph: onnx.GraphProto) -> list[str]:
    names = [v.name for v in graph.input] + [i.name for i in graph.initializer]
    names += [o for n in graph.node for o in n.output if o]
    return names


def apply_some(rng: random.Random, draft: Draft, mutations: Sequence[Any], most: int = 3, tries: int = 6) -> bool:
    """Apply one to ``most`` mutations drawn from ``mutations`` (each step draws again, up to
    ``tries`` times, while a drawn mutation finds nothing to act on); notes what each did."""
    applied = False
    for _ in range(rng.choice([1, 1, 1, 2, most])):
        for _ in range(tries):
            mutation = rng.choice(mutations)
            try:
                what = mutation(rng, draft)
            except Exception as exc:  # noqa: BLE001 - cannot apply here (a bad enum, onnx refusing a helper call)
                what = None
                draft.notes.append(f"{mutation.__name__} skipped ({type(exc).__name__})")
            if what:
                draft.notes.append(what)
                applied = True
                break
    return applied
