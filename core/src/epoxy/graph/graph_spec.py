"""Build the provider-facing :class:`~epoxy.contract.GraphSpec` from an onnx_ir graph.

Providers never see onnx_ir objects (except opaque subgraph attributes), so the contract
stays stable when the IR library changes.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, cast

import numpy as np
import onnx
import onnx_ir as ir

from ..contract import UNKNOWN, NodeSpec, ValueType
from ..errors import InvalidGraphError
from ..load.map_types import carried_type, value_type_from_proto


def value_name(value: ir.Value) -> str:
    """``value.name`` as the str it is here: onnx_ir types it Optional (a value it creates
    has no name until a graph names it); every value of a loaded model has one (``""`` for an
    omitted optional input or output). A typing cast only."""
    return cast(str, value.name)


def value_type_of(value: ir.Value | None) -> ValueType:
    """Static type of an IR value as a contract ``ValueType``."""
    if value is None:
        return UNKNOWN
    if value.type is None:
        carried = carried_type(value)  # a map type onnx_ir cannot hold (see epoxy.load.map_types)
        if carried is not None:
            return value_type_from_proto(carried)
    return _type_from_ir(value.type, value.shape)


@functools.cache
def _numpy_dtype(data_type: ir.DataType) -> np.dtype | None:
    """numpy's dtype for an ONNX element type (None: numpy has none), once per type."""
    try:
        return data_type.numpy()
    except Exception:  # noqa: BLE001 - UNDEFINED, or a type without a numpy twin
        return None


@functools.lru_cache(maxsize=4096)
def _tensor_type(dtype: ir.DataType, dims: tuple[int | str | None, ...] | None) -> ValueType:
    """One (frozen) ValueType per element type and shape: a graph's values share a few."""
    return ValueType("tensor", int(dtype), _numpy_dtype(dtype), dims)


def _type_from_ir(type_: Any, shape: ir.Shape | None) -> ValueType:
    if type_ is None:
        return UNKNOWN
    if isinstance(type_, ir.TensorType):
        dims = None if shape is None else tuple(d if isinstance(d, int) else d.value for d in shape)
        return _tensor_type(type_.dtype, dims)
    if isinstance(type_, ir.SequenceType):
        return ValueType("sequence", element=_type_from_ir(type_.elem_type, None))
    if isinstance(type_, ir.OptionalType):
        return ValueType("optional", element=_type_from_ir(type_.elem_type, None))
    return UNKNOWN


def attribute_value(attr: ir.Attr) -> Any:
    """Python value of an attribute: numbers, str, tuples, numpy arrays, or ir.Graph."""
    kind = attr.type
    value = attr.value
    if kind == ir.AttributeType.TENSOR:
        return value.numpy()
    if kind == ir.AttributeType.TENSORS:
        return tuple(t.numpy() for t in value)
    if kind in (ir.AttributeType.INTS, ir.AttributeType.FLOATS, ir.AttributeType.STRINGS,
                ir.AttributeType.GRAPHS):
        return tuple(value)
    if kind == ir.AttributeType.SPARSE_TENSOR:
        return _sparse_to_dense(value)
    return value


def _sparse_to_dense(sparse: Any) -> np.ndarray:
    proto = sparse if isinstance(sparse, onnx.SparseTensorProto) else ir.serde.serialize_sparse_tensor(sparse)  # type: ignore[attr-defined]
    values = onnx.numpy_helper.to_array(proto.values)
    indices = onnx.numpy_helper.to_array(proto.indices)
    dense = np.zeros(int(np.prod(proto.dims)), dtype=values.dtype)
    if indices.ndim == 2:
        indices = np.ravel_multi_index(indices.T, tuple(proto.dims))
    dense[indices] = values
    return dense.reshape(tuple(proto.dims))


def outer_scope_names(graph: ir.Graph) -> tuple[str, ...]:
    """Names a (sub)graph reads that it does not define itself: its implicit inputs."""
    defined = {v.name for v in graph.inputs} | set(graph.initializers)
    used: list[str] = []
    seen: set[str] = set()
    for node in graph:
        for inp in node.inputs:
            if inp is not None and inp.name not in defined and inp.name not in seen and inp.name:
                seen.add(inp.name)
                used.append(inp.name)
        for attr in node.attributes.values():
            for sub in _subgraphs(attr):
                for name in outer_scope_names(sub):
                    if name not in defined and name not in seen:
                        seen.add(name)
                        used.append(name)
        defined.update(o.name for o in node.outputs)
    for out in graph.outputs:
        if out.name not in defined and out.name not in seen:
            seen.add(value_name(out))
            used.append(value_name(out))
    return tuple(used)


def _subgraphs(attr: ir.Attr) -> Sequence[ir.Graph]:
    if attr.type == ir.AttributeType.GRAPH:
        return (attr.value,)
    if attr.type == ir.AttributeType.GRAPHS:
        return tuple(attr.value)
    return ()


class CoreGraph:
    """The session's graph: node specs, value types, constants, producer/consumer maps."""

    def __init__(
        self,
        graph: ir.Graph,
        opsets: Mapping[str, int],
        *,
        outer_types: Mapping[str, ValueType] | None = None,
        outer_inputs: Sequence[str] = (),
    ) -> None:
        """``outer_inputs``: for a subgraph, the enclosing-scope names it reads; they become
        extra trailing inputs (typed from ``outer_types``)."""
        self.ir_graph = graph
        self.opsets = {("" if d == "ai.onnx" else d): v for d, v in opsets.items()}
        self.inputs: list[str] = [value_name(v) for v in graph.inputs]
        self.inputs += [n for n in outer_inputs if n not in self.inputs and n not in graph.initializers]
        self._input_names = frozenset(self.inputs)
        self.outputs: list[str] = [value_name(v) for v in graph.outputs]
        self._types: dict[str, ValueType] = dict(outer_types or {})
        self._constants: dict[str, ir.Value] = {}
        for name, value in graph.initializers.items():
            self._constants[name] = value
            self._types[name] = value_type_of(value)
        for value in graph.inputs:
            self._types[value_name(value)] = value_type_of(value)
        for name in outer_inputs:
            self._types.setdefault(name, UNKNOWN)
        self.nodes: list[NodeSpec] = []
        self.ir_nodes: list[ir.Node] = []
        self.implicit_inputs: dict[int, tuple[str, ...]] = {}
        self._producer: dict[str, int] = {}
        self._consumers: dict[str, list[int]] = {}
        self._value_types: dict[int, ValueType] = {}  # by id(): the graph holds every value meanwhile
        for index, node in enumerate(graph):
            self._add_node(index, node)
        self._value_types.clear()  # ids are only safe while the build holds the values
        for name in self.outputs:
            if name not in self._producer and name not in self._types and name not in (outer_types or {}):
                raise InvalidGraphError(f"graph output {name!r} is never produced")

    def _add_node(self, index: int, node: ir.Node) -> None:
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        opset = self.opsets.get(domain)
        if opset is not None and node.version is not None:
            opset = node.version  # a node inlined from a function keeps the function's opset
        if opset is None:
            raise InvalidGraphError(
                f"node {node.name or node.op_type!r} uses domain {domain or 'ai.onnx'!r} "
                "which the model does not import (opset_import)", node=node.name
            )
        # value_name's cast, inline: names of a loaded model's values are all str
        inputs = cast(tuple[str, ...], tuple("" if v is None else v.name for v in node.inputs))
        outputs = cast(tuple[str, ...], tuple(v.name for v in node.outputs))
        output_types = tuple(self._typed(v) for v in node.outputs)
        for name, value_type in zip(outputs, output_types):
            if not name:
                continue
            if name in self._producer or name in self._constants or name in self._input_names:
                raise InvalidGraphError(f"value {name!r} is defined twice (node {node.name!r})", node=node.name)
            self._producer[name] = index
            self._types[name] = value_type
        for name in inputs:
            if name:
                self._consumers.setdefault(name, []).append(index)
        implicit: tuple[str, ...] = ()
        attributes: dict[str, Any] = {}
        for attr_name, attr in node.attributes.items():
            try:
                attributes[attr_name] = attribute_value(attr)
            except Exception as exc:  # noqa: BLE001 - undefined/garbled attribute payloads
                raise InvalidGraphError(
                    f"node {node.name or node.op_type!r} ({node.op_type}): attribute {attr_name!r} "
                    f"cannot be read: {type(exc).__name__}: {exc}", node=node.name,
                ) from exc
            for sub in _subgraphs(attr):
                implicit += tuple(n for n in outer_scope_names(sub) if n not in implicit)
        if implicit:
            self.implicit_inputs[index] = implicit
            for name in implicit:
                self._consumers.setdefault(name, []).append(index)
        spec = NodeSpec(
            index=index,
            name=node.name or f"{node.op_type}_{index}",
            op_type=node.op_type,
            domain=domain,
            opset=opset,
            inputs=inputs,
            outputs=outputs,
            attributes=attributes,
            input_types=tuple(self._typed(v) for v in node.inputs),
            output_types=output_types,
            constants={n: self._constant_arrays[n] for n in inputs
                       if n in self._constants and n not in self._input_names and n in self._constant_arrays},
        )
        self.nodes.append(spec)
        self.ir_nodes.append(node)

    def _typed(self, value: ir.Value | None) -> ValueType:
        """``value_type_of(value)``, once per value: a value is read by every consumer."""
        if value is None:
            return UNKNOWN
        found = self._value_types.get(id(value))
        if found is None:
            found = self._value_types[id(value)] = value_type_of(value)
        return found

    # -- GraphSpec protocol ------------------------------------------------------------
    def value_type(self, name: str) -> ValueType:
        return self._types.get(name, UNKNOWN)

    def constant(self, name: str) -> np.ndarray | None:
        value = self._constants.get(name)
        if value is None or value.const_value is None:
            return None
        return self._constant_arrays[name]

    @cached_property
    def _constant_arrays(self) -> dict[str, np.ndarray]:
        return {n: _constant_array(n, v) for n, v in self._constants.items() if v.const_value is not None}

    def constants(self) -> dict[str, np.ndarray]:
        """All initializer values by name."""
        return self._constant_arrays

    def release_constant(self, name: str) -> None:
        """Forget the value of the constant ``name`` here, in its consumers' node specs and in
        the ``onnx_ir`` graph (their kernels keep their own copies:
        ``epoxy.plan.released_constants``); the name and its type stay."""
        self._constant_arrays.pop(name, None)
        for index in self._consumers.get(name, ()):
            constants = self.nodes[index].constants
            if isinstance(constants, dict):
                constants.pop(name, None)
        value = self._constants.get(name)
        if value is not None:
            value.const_value = None

    def producer(self, name: str) -> int | None:
        return self._producer.get(name)

    def consumers(self, name: str) -> Sequence[int]:
        return self._consumers.get(name, ())

    def node_inputs(self, index: int) -> tuple[str, ...]:
        """Explicit plus implicit (subgraph outer-scope) inputs of a node."""
        return tuple(n for n in self.nodes[index].inputs if n) + self.implicit_inputs.get(index, ())

    def to_model(self, node_indices: Sequence[int]) -> onnx.ModelProto:
        from .subgraph_export import export_nodes

        return export_nodes(self, node_indices)


def _constant_array(name: str, value: ir.Value) -> np.ndarray:
    """An initializer as a read-only array (shared by every run, so no kernel may write
    into it); a tensor whose data does not match its dims/dtype is an error naming it."""
    tensor = value.const_value
    try:
        array = np.asarray(tensor.numpy())  # type: ignore[union-attr]
    except Exception as exc:  # noqa: BLE001 - onnx_ir/numpy raise many types for bad data
        dims = list(getattr(tensor, "shape", None) or ())
        raise InvalidGraphError(
            f"initializer {name!r} (dtype {getattr(tensor, 'dtype', '?')}, dims {dims}) cannot be read: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if array.dtype.kind == "S" or (array.dtype == object and any(isinstance(v, bytes) for v in array.flat)):
        # STRING initializers come back as bytes; kernels and feeds use str (onnxruntime's
        # string tensors are text): comparing a str feed with bytes would be silently False
        array = _decoded(name, array)
    array.flags.writeable = False
    return array


def _decoded(name: str, array: np.ndarray) -> np.ndarray:
    try:
        return np.vectorize(lambda v: v.decode("utf-8") if isinstance(v, bytes) else v, otypes=[object])(array)
    except UnicodeDecodeError as exc:
        raise InvalidGraphError(f"string initializer {name!r} holds bytes that are not UTF-8 text: {exc}") from exc


