"""A set of a model's nodes as a model of its own, fed with real intermediate values.

The subgraph's inputs are the values its nodes read but do not produce (initializers stay
initializers); each is fed with the value the reference computed for it in the full model,
so the nodes see exactly the data they saw there. Its outputs are the values named, else
every value it produces.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .feeds import Feeds
from .model_io import node_reads


class NotExtractable(Exception):
    """The node set cannot stand alone (a value it reads was never captured)."""


@dataclass
class Subgraph:
    """A candidate: the model, its feeds, and which of the original nodes it holds."""

    model: Any
    feeds: Feeds
    nodes: list[int]


def connected(model: Any, nodes: Collection[int]) -> bool:
    """Whether ``nodes`` form one piece when a value links its producer and its readers."""
    chosen = sorted(nodes)
    if not chosen:
        return False
    produced = {o: i for i in chosen for o in model.graph.node[i].output if o}
    links: dict[int, set[int]] = {i: set() for i in chosen}
    for i in chosen:
        for name in node_reads(model.graph.node[i]):
            j = produced.get(name)
            if j is not None and j != i:
                links[i].add(j)
                links[j].add(i)
    seen = {chosen[0]}
    todo = [chosen[0]]
    while todo:
        for j in links[todo.pop()]:
            if j not in seen:
                seen.add(j)
                todo.append(j)
    return len(seen) == len(chosen)


def _value_info(name: str, value: np.ndarray | None) -> Any:
    import onnx
    from onnx import helper

    if value is None or value.dtype.kind in "OUSV":  # typeless: the loader infers it
        return onnx.ValueInfoProto(name=name)
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape))


def extract(model: Any, nodes: Collection[int], values: Mapping[str, np.ndarray], feeds: Mapping[str, np.ndarray],
            outputs: Sequence[str] | None = None) -> Subgraph:
    """The model of ``nodes`` (indices into ``model.graph.node``), its inputs fed from
    ``values`` (intermediate values) or ``feeds`` (the graph's own inputs)."""
    from onnx import helper

    chosen = sorted(nodes)
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    produced: list[str] = [o for i in chosen for o in graph.node[i].output if o]
    made = set(produced)
    inputs: list[str] = []
    for i in chosen:
        for name in node_reads(graph.node[i]):
            if name not in made and name not in initializers and name not in inputs:
                inputs.append(name)
    sub_feeds: Feeds = {}
    for name in inputs:
        value = feeds.get(name, values.get(name))
        if value is None:
            raise NotExtractable(f"value {name!r} was not captured (not a tensor, or never computed)")
        sub_feeds[name] = np.asarray(value)
    used_inits = [initializers[n] for i in chosen for n in node_reads(graph.node[i]) if n in initializers]
    unique_inits = list({t.name: t for t in used_inits}.values())
    wanted = list(outputs) if outputs else produced
    sub = helper.make_graph(
        [graph.node[i] for i in chosen], f"{graph.name or 'model'}_reduced",
        [_value_info(n, sub_feeds[n]) for n in inputs],
        [_value_info(n, values.get(n)) for n in wanted],
        initializer=unique_inits,
    )
    reduced = helper.make_model(sub, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    reduced.functions.extend(model.functions)
    return Subgraph(reduced, sub_feeds, chosen)
