"""One opset per domain for the whole written graph.

A session's graph mixes versions (the optimizer's Gelu is opset 20 in an opset-17 model:
``node.version``), which ONNX files cannot say: a file imports one version per domain and
model-local functions must import the same. The compiled model therefore imports, per
domain, the highest version its nodes need; a node whose schema changed between its own
version and that one is rewritten by onnx's version converter (``epoxy.graph.export_opsets``,
the rule subgraph exports already follow), so every reader of the file (onnxruntime, epoxy
without the provider) runs what the session ran.
"""

from __future__ import annotations

from typing import Any

import onnx
from onnx import helper

from ..graph.export_opsets import SubgraphExportError, convert_nodes, plan_opsets


def uniform_opsets(proto: onnx.ModelProto, graph: Any) -> tuple[list[list[onnx.NodeProto]], str]:
    """Per node of ``graph`` (in order), the node protos standing for it in ``proto``, with
    ``proto``'s opset imports raised where nodes need it; and a note when the graph cannot be
    written at one version per domain (then nodes stay as they are, the note says which)."""
    per_node = [[node] for node in proto.graph.node]
    try:
        target, stale = plan_opsets(graph, list(range(len(graph.nodes))))
        by_source: dict[int, list[int]] = {}
        for position, source in stale.items():
            by_source.setdefault(source, []).append(position)
        infos = _value_infos(proto.graph)
        used = set(infos) | {o for node in proto.graph.node for o in node.output}
        for source, positions in sorted(by_source.items()):
            converted = convert_nodes([proto.graph.node[p] for p in positions], source, target[""], used,
                                      lambda name: infos.get(name) or helper.make_empty_tensor_value_info(name))
            for position, nodes in zip(positions, converted):
                per_node[position] = nodes
    except SubgraphExportError as exc:
        return [[node] for node in proto.graph.node], f"nodes keep versions the opset imports do not say: {exc}"
    imports = {("" if op.domain == "ai.onnx" else op.domain): op for op in proto.opset_import}
    for domain, version in target.items():
        if domain in imports:
            imports[domain].version = max(imports[domain].version, version)
        else:
            proto.opset_import.append(helper.make_opsetid(domain, version))
    return per_node, ""


def _value_infos(graph: onnx.GraphProto) -> dict[str, onnx.ValueInfoProto]:
    infos = {v.name: v for v in (*graph.input, *graph.value_info, *graph.output)}
    for tensor in graph.initializer:
        infos.setdefault(tensor.name, helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims))
    return infos
