"""Constant nodes lifted to initializers on the protobuf, before onnx_ir builds the graph.

Why here and not only in the optimizer: TorchScript exports are a third Constant nodes
(ts-llama: 214 of 608). Each one costs onnx_ir a node to deserialize and the optimizer's
:class:`~epoxy.optimize.passes.LiftConstantsPass` a graph edit (~15 us); moving its tensor
into ``graph.initializer`` is a protobuf copy (~3 us). The rule is the pass's, so the
optimized graph is the same either way: a ``Constant`` of the ONNX domain whose one
attribute is a ``value`` tensor and whose output is not an output of its graph becomes an
initializer of the graph it sits in (subgraphs included). The pass still runs afterwards for
what this leaves (inlined function bodies, a proto the caller owns).
"""

from __future__ import annotations

import onnx

from .proto_tensors import node_graphs


def imports_onnx(proto: onnx.ModelProto, since: int = 1) -> bool:
    """Whether ``proto`` imports the ONNX domain (spelled ``""``) at ``since`` or later.
    Why it matters here: the checks report a node of an unimported domain or opset (and read
    ``"ai.onnx"`` as another domain unless imported); work done before them may only take
    nodes they would find nothing to say about (the optimizer's pass takes the others)."""
    return any(entry.domain == "" and entry.version >= since for entry in proto.opset_import)


def _liftable(node: onnx.NodeProto) -> bool:
    if node.op_type != "Constant" or node.domain != "" or len(node.attribute) != 1:
        return False
    attr = node.attribute[0]
    return attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR and len(node.output) == 1


def lift_constant_nodes(proto: onnx.ModelProto) -> int:
    """Lift the liftable Constant nodes of ``proto`` (edited in place) into initializers;
    how many were lifted. Function bodies are left alone (onnx_ir inlines them later)."""
    if not imports_onnx(proto):
        return 0
    lifted = 0
    graphs = [proto.graph]
    while graphs:
        graph = graphs.pop()
        graphs.extend(node_graphs(graph.node))
        # a graph output cannot be an initializer of its own graph; a name already taken
        # (a malformed model) is left for the checks to report
        taken = {o.name for o in graph.output}
        taken.update(t.name for t in graph.initializer)
        taken.update(i.name for i in graph.input)
        nodes = graph.node
        positions = []
        for i, node in enumerate(nodes):
            if node.op_type == "Constant" and _liftable(node) and node.output[0] and node.output[0] not in taken:
                taken.add(node.output[0])
                positions.append(i)
        if not positions:
            continue
        for i in positions:
            node = nodes[i]
            tensor = graph.initializer.add()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
        for i in reversed(positions):
            del nodes[i]
        lifted += len(positions)
    return lifted
