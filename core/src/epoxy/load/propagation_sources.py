"""Whether onnx's data propagation could learn anything in a model, read from an inference
run without it.

Why: loading infers shapes twice, without data propagation (strict: declarations inference
disagrees with are found; long 1-D values, which propagation would crawl, are found) and
then with it. Propagation starts only at a node whose op has a propagation function
(``Shape``, ``Size``, ``Concat``, ``Gather``, ``Slice``, ``Add``...) reading a value it can
hold as data: any input of ``Shape``/``Size``, an integer initializer or a value of rank 0 or 1
(its elements, known or not) for the others; a value it made itself comes from such a start.
When no node of the main graph reads such an input in the first run's types (every input of
every propagating node has a known rank of 2 or more, and there is no ``Shape``/``Size``),
the second run would infer exactly what the first did, and is skipped (squeezenet,
densenet121, resnet50 and most CNNs: their Concat/Add/Mul read feature maps). A model with
subgraphs or local functions always gets the second run.
"""

from __future__ import annotations

import functools

import onnx

#: ops whose shape alone is data to propagation (any input rank)
_SHAPE_READERS = frozenset({"Shape", "Size"})


@functools.cache
def _propagating_ops() -> frozenset[str]:
    """ONNX-domain op types with a data propagation function at any opset (onnx's schemas)."""
    return frozenset(schema.name for schema in onnx.defs.get_all_schemas_with_history()
                     if schema.domain in ("", "ai.onnx") and schema.has_data_propagation_function)


def _ranks(graph: onnx.GraphProto, names: set[str]) -> dict[str, int]:
    """The known ranks of ``names`` in ``graph``'s types (only those are read: a transformer
    declares thousands of values)."""
    ranks: dict[str, int] = {}
    for info in (*graph.input, *graph.value_info, *graph.output):
        if info.name in names:
            tensor = info.type.tensor_type if info.type.HasField("tensor_type") else None
            if tensor is not None and tensor.HasField("shape"):
                ranks[info.name] = len(tensor.shape.dim)
    for tensor in graph.initializer:  # an initializer's dims win (a declaration may be wrong)
        if tensor.name in names:
            ranks[tensor.name] = len(tensor.dims)
    return ranks


def propagation_has_no_source(inferred: onnx.ModelProto) -> bool:
    """True when ``inferred`` (a model with the types of an inference run without data
    propagation) has no node propagation could start from (see the module docstring)."""
    if inferred.functions:
        return False
    graph = inferred.graph
    propagating = _propagating_ops()
    nodes = [node for node in graph.node if node.op_type in propagating and node.domain in ("", "ai.onnx")]
    if any(node.op_type in _SHAPE_READERS for node in nodes):
        return False
    if any(attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
           for node in graph.node for attr in node.attribute):
        return False
    if not nodes:
        return True
    read = {name for node in nodes for name in node.input if name}
    ranks = _ranks(graph, read)
    # an integer initializer is data only at rank 0 or 1 too
    return all(ranks.get(name, 0) >= 2 for name in read)
