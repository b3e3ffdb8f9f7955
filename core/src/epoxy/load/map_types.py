"""Map-typed values (``map(K, V)``, ``seq(map(...))``...) carried beside onnx_ir.

onnx_ir cannot hold map types (deserializing one raises ``NotImplementedError``), yet
scikit-learn models exported to ONNX read and write them (DictVectorizer inputs, ZipMap
outputs of classifiers). The loader therefore takes them out of the protobuf right before
onnx_ir reads it (after the checker and shape inference, which know maps) and puts each
value's type on its ``ir.Value`` as metadata (``value.meta[MAP_TYPE_KEY]``: the TypeProto);
:func:`epoxy.graph.graph_spec.value_type_of` reads it from there, so providers, feeds and
``get_inputs()`` see the real type (``ValueType(kind="map")``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir

from ..contract import UNKNOWN, ValueType
from ..graph.dtypes import onnx_to_numpy

#: ``ir.Value.meta`` key holding the ``onnx.TypeProto`` of a value whose type contains a map
MAP_TYPE_KEY = "epoxy.map_type"


def has_map(type_proto: onnx.TypeProto) -> bool:
    """Whether a map occurs anywhere in ``type_proto`` (``seq(map)``, ``optional(map)``...)."""
    kind = type_proto.WhichOneof("value")
    if kind == "map_type":
        return True
    if kind == "sequence_type":
        return has_map(type_proto.sequence_type.elem_type)
    if kind == "optional_type":
        return has_map(type_proto.optional_type.elem_type)
    return False


def value_type_from_proto(type_proto: onnx.TypeProto) -> ValueType:
    """An ``onnx.TypeProto`` as a contract :class:`ValueType` (maps included)."""
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        tt = type_proto.tensor_type
        shape = None
        if tt.HasField("shape"):
            shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
        return ValueType("tensor", tt.elem_type, _numpy(tt.elem_type), shape)
    if kind == "sequence_type":
        return ValueType("sequence", element=value_type_from_proto(type_proto.sequence_type.elem_type))
    if kind == "optional_type":
        return ValueType("optional", element=value_type_from_proto(type_proto.optional_type.elem_type))
    if kind == "map_type":
        mt = type_proto.map_type
        return ValueType("map", key_dtype=_numpy(mt.key_type), element=value_type_from_proto(mt.value_type))
    return UNKNOWN


def _numpy(elem_type: int) -> np.dtype | None:
    try:
        return onnx_to_numpy(elem_type) if elem_type else None
    except Exception:  # noqa: BLE001 - an element type numpy has no dtype for
        return None


def carried_type(value: ir.Value) -> onnx.TypeProto | None:
    """The map-containing type the loader put on ``value``, if any."""
    return value.meta.get(MAP_TYPE_KEY)


@dataclass
class MapTypes:
    """Map types taken out of one graph: value name -> TypeProto, and those of its
    subgraphs by (node index, attribute name, position in a GRAPHS attribute)."""

    values: dict[str, onnx.TypeProto] = field(default_factory=dict)
    subgraphs: dict[tuple[int, str, int], MapTypes] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.values) or any(self.subgraphs.values())


def _graph_attrs(node: onnx.NodeProto) -> Iterator[tuple[str, int, onnx.GraphProto]]:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.name, 0, attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for k, g in enumerate(attr.graphs):
                yield attr.name, k, g


def _graph_has_map(graph: onnx.GraphProto) -> bool:
    if any(has_map(vi.type) for vi in (*graph.input, *graph.output, *graph.value_info)):
        return True
    return any(_graph_has_map(g) for node in graph.node for _, _, g in _graph_attrs(node))


def model_has_maps(proto: onnx.ModelProto) -> bool:
    """Whether any value of the model (subgraphs and functions too) is declared map-typed."""
    if _graph_has_map(proto.graph):
        return True
    return any(has_map(vi.type) for f in proto.functions for vi in getattr(f, "value_info", ()))


def _strip_graph(graph: onnx.GraphProto) -> MapTypes:
    table = MapTypes()
    for vi in (*graph.input, *graph.output, *graph.value_info):
        if has_map(vi.type):
            kept = onnx.TypeProto()
            kept.CopyFrom(vi.type)
            table.values.setdefault(vi.name, kept)
            vi.ClearField("type")
    for index, node in enumerate(graph.node):
        for name, k, sub in _graph_attrs(node):
            inner = _strip_graph(sub)
            if inner:
                table.subgraphs[(index, name, k)] = inner
    return table


def strip_map_types(proto: onnx.ModelProto) -> MapTypes:
    """Remove every map-containing type from ``proto`` (edited in place) and return them.

    Graph inputs, outputs and value_info entries keep their names with no type (which
    onnx_ir reads as "type unknown"); a model-local function's map-typed value_info is
    dropped (its values are typed again, as tensors or unknown, once inlined)."""
    table = _strip_graph(proto.graph)
    for function in proto.functions:
        infos = getattr(function, "value_info", None)
        if infos is not None and any(has_map(vi.type) for vi in infos):
            kept = [vi for vi in infos if not has_map(vi.type)]
            del infos[:]
            infos.extend(kept)
    return table


def _ir_subgraph(node: ir.Node, name: str, k: int) -> ir.Graph | None:
    attr = node.attributes.get(name)
    if attr is None:
        return None
    if attr.type == ir.AttributeType.GRAPH:
        return attr.value if k == 0 else None
    if attr.type == ir.AttributeType.GRAPHS:
        graphs = list(attr.value)
        return graphs[k] if k < len(graphs) else None
    return None


def attach_map_types(graph: ir.Graph, table: MapTypes) -> None:
    """Put each recorded type on the value of that name (``value.meta[MAP_TYPE_KEY]``)."""
    if not table:
        return
    nodes = list(graph)
    if table.values:
        for value in _graph_values(graph, nodes):
            tp = table.values.get(value.name or "")
            if tp is not None:
                value.meta[MAP_TYPE_KEY] = tp
    for (index, name, k), inner in table.subgraphs.items():
        sub = _ir_subgraph(nodes[index], name, k) if index < len(nodes) else None
        if sub is not None:
            attach_map_types(sub, inner)


def _graph_values(graph: ir.Graph, nodes: list[ir.Node]) -> Iterator[ir.Value]:
    yield from graph.inputs
    yield from graph.outputs
    for node in nodes:
        yield from node.outputs


def restore_map_types(proto: onnx.ModelProto, model: ir.Model) -> None:
    """Put the carried map types back into a protobuf serialized from ``model`` (graph
    inputs, outputs and value_info of the main graph and its subgraphs), so that what is
    written is the model's real typing."""
    _restore_graph(proto.graph, model.graph)


def _restore_graph(graph: onnx.GraphProto, ir_graph: ir.Graph) -> None:
    nodes = list(ir_graph)
    carried = {v.name: tp for v in _graph_values(ir_graph, nodes) if (tp := carried_type(v)) is not None}
    if carried:
        listed: set[str] = set()
        for vi in (*graph.input, *graph.output, *graph.value_info):
            tp = carried.get(vi.name)
            if tp is not None:
                vi.type.CopyFrom(tp)
                listed.add(vi.name)
        declared = {vi.name for vi in graph.input} | {vi.name for vi in graph.output}
        for name, tp in carried.items():
            if name not in listed and name not in declared:
                graph.value_info.add(name=name).type.CopyFrom(tp)
    if len(nodes) != len(graph.node):
        return
    for node, ir_node in zip(graph.node, nodes):
        for name, k, sub in _graph_attrs(node):
            ir_sub = _ir_subgraph(ir_node, name, k)
            if ir_sub is not None:
                _restore_graph(sub, ir_sub)
