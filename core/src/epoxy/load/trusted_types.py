"""The tensor types of a model's intermediate values, set without onnx_ir's value_info
deserializer.

Why: after shape inference (or in a session-cache hit, a model epoxy typed itself) the
value_info holds one plain tensor type per intermediate value. onnx_ir reads each through
its general path (frozen shape with dim denotations, type denotation, metadata, doc string:
~10 us a value, a third of its deserializer's time on squeezenet); setting the type and
shape directly costs ~1.3 us (session creation 2-3.5 % faster on the exporter models and
the light CNNs: bench/README, session 43). Only plain entries for the main graph's node
outputs and initializers, named once, are taken: anything else (denotations, metadata,
non-tensor types, graph inputs, a name declared twice) stays for onnx_ir, so the graph
comes out as onnx_ir alone would build it.
"""

from __future__ import annotations

from collections import Counter

import onnx
import onnx_ir as ir

#: a plain tensor type: (ONNX element type, dims or None for an unknown rank); a dim is an
#: int, a symbol (str) or None (unknown)
PlainType = tuple[int, "tuple[int | str | None, ...] | None"]


def take_plain_types(graph: onnx.GraphProto) -> dict[str, PlainType]:
    """Remove from ``graph.value_info`` the plain tensor types of values its nodes produce and
    of its initializers, returning them by value name (see :func:`apply_plain_types`)."""
    produced = {name for node in graph.node for name in node.output if name}
    produced.update(tensor.name for tensor in graph.initializer)
    produced.difference_update(info.name for info in graph.input)
    declared = Counter(info.name for info in graph.value_info)
    taken: dict[str, PlainType] = {}
    kept: list[onnx.ValueInfoProto] = []
    for info in graph.value_info:
        plain = _plain(info) if info.name in produced and declared[info.name] == 1 else None
        if plain is None:
            kept.append(info)
        else:
            taken[info.name] = plain
    if taken:
        kept = [_copied(info) for info in kept]
        del graph.value_info[:]
        graph.value_info.extend(kept)
    return taken


def apply_plain_types(graph: ir.Graph, types: dict[str, PlainType]) -> None:
    """Set the types ``take_plain_types`` took on the node outputs and initializers they
    name, as onnx_ir's deserializer would have (a frozen shape, then the tensor type)."""
    if not types:
        return
    tensor_types: dict[int, ir.TensorType] = {}
    values = [value for node in graph for value in node.outputs]
    values += graph.initializers.values()
    for value in values:
        found = types.get(value.name) if value.name else None
        if found is None:
            continue
        elem, dims = found
        value.shape = None if dims is None else ir.Shape(dims, frozen=True)
        value.type = tensor_types.get(elem) or tensor_types.setdefault(elem, ir.TensorType(ir.DataType(elem)))


def _plain(info: onnx.ValueInfoProto) -> PlainType | None:
    type_proto = info.type
    if (info.doc_string or len(info.metadata_props) or type_proto.denotation
            or type_proto.WhichOneof("value") != "tensor_type"):
        return None
    tensor = type_proto.tensor_type
    if not tensor.HasField("elem_type") or tensor.elem_type not in _KNOWN_TYPES:
        return None
    if not tensor.HasField("shape"):
        return tensor.elem_type, None
    dims: list[int | str | None] = []
    for dim in tensor.shape.dim:
        if dim.denotation:
            return None
        which = dim.WhichOneof("value")
        dims.append(dim.dim_value if which == "dim_value" else dim.dim_param if which == "dim_param" else None)
    return tensor.elem_type, tuple(dims)


def _copied(info: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    copy = onnx.ValueInfoProto()
    copy.CopyFrom(info)
    return copy


_KNOWN_TYPES = frozenset(int(t) for t in ir.DataType)
