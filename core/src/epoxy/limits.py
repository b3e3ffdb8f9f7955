"""Resource limits (``SessionOptions.memory_limit_bytes`` / ``max_loop_iterations``).

Checked before anything is allocated where sizes are known: initializer dims in the proto
(before external data is read or sparse tensors densified), declared and inferred value
shapes (before optimization and planning), the planned peak, and every feed before a run.
Control-flow kernels check what they accumulate (Loop scan outputs and carried
sequences) as they go, and refuse a trip count whose projected size is over the limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from .errors import ResourceLimitError
from .graph_spec import value_type_of

#: bytes counted per stored item on top of its data (array object overhead)
ITEM_OVERHEAD = 128


def _fmt(n: int | float) -> str:
    return f"{int(n):,} bytes"


def _refuse(what: str, nbytes: int | float, limit: int, *, value: str | None, hint: str = "") -> ResourceLimitError:
    return ResourceLimitError(
        f"{what} needs {_fmt(nbytes)}, above memory_limit_bytes={limit:,}{hint}",
        value=value, nbytes=int(nbytes), limit=limit,
    )


def tensor_proto_nbytes(tensor: onnx.TensorProto | onnx.SparseTensorProto) -> float | None:
    """Dense byte size a tensor proto declares (dims x item size); a float so absurd dims
    cannot overflow; ``None`` for unknown data types or negative dims."""
    dims = list(tensor.dims)
    data_type = tensor.values.data_type if isinstance(tensor, onnx.SparseTensorProto) else tensor.data_type
    if any(d < 0 for d in dims):
        return None
    try:
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(data_type)).itemsize
    except Exception:  # noqa: BLE001 - unknown/undefined data type: the loader reports it
        return None
    return float(np.prod([float(d) for d in dims])) * itemsize


def _graphs(graph: onnx.GraphProto) -> Iterable[onnx.GraphProto]:
    stack = [graph]
    while stack:
        g = stack.pop()
        yield g
        for node in g.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    stack.append(attr.g)
                stack.extend(attr.graphs)


def check_proto_sizes(proto: onnx.ModelProto, limit: int, source: str) -> None:
    """Initializers (dense, sparse, external) and Constant tensors above the limit."""
    for graph in _graphs(proto.graph):
        tensors: list[tuple[str, Any]] = [(f"initializer {t.name!r}", t) for t in graph.initializer]
        tensors += [(f"sparse initializer {t.values.name!r}", t) for t in graph.sparse_initializer]
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    tensors.append((f"node {node.name or node.op_type!r} attribute {attr.name!r}", attr.t))
                elif attr.type == onnx.AttributeProto.SPARSE_TENSOR:
                    tensors.append((f"node {node.name or node.op_type!r} attribute {attr.name!r}", attr.sparse_tensor))
        for what, tensor in tensors:
            nbytes = tensor_proto_nbytes(tensor)
            if nbytes is not None and nbytes > limit:
                raise _refuse(f"{source}: {what} (dims {list(tensor.dims)})", nbytes, limit,
                              value=getattr(tensor, "name", None) or what)


def _ir_graphs(graph: ir.Graph) -> Iterable[ir.Graph]:
    stack = [graph]
    while stack:
        g = stack.pop()
        yield g
        for node in g:
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    stack.append(attr.value)
                elif attr.type == ir.AttributeType.GRAPHS:
                    stack.extend(attr.value)


def check_static_values(graph: ir.Graph, limit: int) -> None:
    """Every value whose declared or inferred shape is static and above the limit."""
    for g in _ir_graphs(graph):
        values: list[tuple[ir.Value, str]] = [(v, "graph input") for v in g.inputs]
        values += [(v, f"output of node {n.name or n.op_type!r} ({n.op_type})") for n in g for v in n.outputs]
        for value, where in values:
            vt = value_type_of(value)
            if vt.kind != "tensor" or not vt.is_static or vt.dtype is None or vt.dtype == np.dtype(object):
                continue
            nbytes = float(np.prod([float(d) for d in vt.shape])) * vt.dtype.itemsize  # type: ignore[union-attr]
            if nbytes > limit:
                raise _refuse(f"value {value.name!r} ({where}, shape {list(vt.shape)}, {vt.dtype})",  # type: ignore[arg-type]
                              nbytes, limit, value=value.name, hint="; refused before allocation")


def check_planned_peak(peak: int, limit: int) -> None:
    if peak > limit:
        raise _refuse("the memory plan (planned peak of values live at once)", peak, limit, value=None)


def value_nbytes(value: Any) -> int:
    """Bytes a run-time value holds: arrays, sequences (lists) of them, None."""
    if value is None:
        return 0
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (list, tuple)):
        return sum(value_nbytes(v) + ITEM_OVERHEAD for v in value)
    return int(getattr(value, "nbytes", 0) or 0)


def check_feeds(feeds: Mapping[str, Any], limit: int) -> None:
    total = 0
    for name, value in feeds.items():
        nbytes = value_nbytes(value)
        if nbytes > limit:
            shape = list(value.shape) if isinstance(value, np.ndarray) else f"{len(value)} items"
            raise _refuse(f"input {name!r} ({shape})", nbytes, limit, value=name)
        total += nbytes
    if total > limit:
        raise _refuse(f"the feeds together ({', '.join(feeds)})", total, limit, value=None)


def check_loop(node: str, iteration: int, trip_count: int | None, held: int, per_iteration: int,
               limit: int | None, max_iterations: int | None) -> None:
    """Called by the Loop kernel after each iteration with the bytes it holds so far."""
    if max_iterations is not None and iteration > max_iterations:
        raise ResourceLimitError(
            f"Loop {node!r} ran {iteration:,} iterations, above max_loop_iterations={max_iterations:,}"
            + ("" if trip_count is None else f" (trip count {trip_count:,})"),
            value=node, limit=max_iterations,
        )
    if limit is None:
        return
    if held > limit:
        raise _refuse(f"Loop {node!r}: after {iteration:,} iterations its scan outputs and carried values",
                      held, limit, value=node)
    if trip_count is not None and iteration == 1 and per_iteration > 0:
        projected = float(trip_count) * per_iteration
        if projected > limit:
            raise _refuse(f"Loop {node!r}: trip count {trip_count:,} x {per_iteration:,} bytes per iteration",
                          projected, limit, value=node, hint="; refused after the first iteration")
