"""The model as an ``onnx.ModelProto`` whatever it was given as, and facts about its graph
the checks need: who produces each value, who consumes it."""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

from ..errors import InvalidArgumentError


def load_proto(model: Any) -> tuple[Any, str]:
    """(ModelProto, a label for reports) from a path, bytes or a ModelProto."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model, model.graph.name or "<model>"
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model)), "<bytes>"
    if isinstance(model, (str, os.PathLike)):
        try:
            return onnx.load(os.fspath(model)), os.fspath(model)
        except (OSError, ValueError) as exc:
            raise InvalidArgumentError(f"cannot read model {os.fspath(model)!r}: {exc}") from exc
    raise InvalidArgumentError(f"model must be a path, bytes or onnx.ModelProto, got {type(model).__name__}")


def producers(model: Any) -> dict[str, int]:
    """value name -> index of the top-level node producing it."""
    return {out: i for i, node in enumerate(model.graph.node) for out in node.output if out}


def subgraph_reads(node: Any) -> set[str]:
    """Names a node's subgraphs (If/Loop/Scan bodies) read from the enclosing scope."""
    reads: set[str] = set()
    for attr in node.attribute:
        graphs = list(attr.graphs) + ([attr.g] if attr.HasField("g") else [])
        for graph in graphs:
            defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
            for inner in graph.node:
                defined.update(o for o in inner.output if o)
            for inner in graph.node:
                reads.update(n for n in inner.input if n and n not in defined)
                reads.update(n for n in subgraph_reads(inner) if n not in defined)
    return reads


def node_reads(node: Any) -> list[str]:
    """Every value a node reads: its inputs, then what its subgraphs read from outside."""
    names = [n for n in node.input if n]
    return names + sorted(subgraph_reads(node) - set(names))


def consumers(model: Any) -> dict[str, list[int]]:
    """value name -> indices of the top-level nodes reading it."""
    out: dict[str, list[int]] = defaultdict(list)
    for i, node in enumerate(model.graph.node):
        for name in node_reads(node):
            out[name].append(i)
    return out


def downstream(model: Any, name: str) -> set[str]:
    """Every value computed (directly or not) from ``name``."""
    readers = consumers(model)
    seen: set[str] = set()
    todo = [name]
    while todo:
        for index in readers.get(todo.pop(), []):
            for out in model.graph.node[index].output:
                if out and out not in seen:
                    seen.add(out)
                    todo.append(out)
    return seen
