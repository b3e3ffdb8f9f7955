"""Resource limits (``SessionOptions.memory_limit_bytes`` / ``max_loop_iterations``).

Checked before anything is allocated where sizes are known: initializer dims in the proto
(before external data is read or sparse tensors densified; sparse tensors are measured
even without a limit, against the memory the process can get), tensors holding less data
than their dims say (before anything is sized from those dims), declared ranks, declared and
inferred value shapes (before optimization and planning), the planned peak, and every feed
before a run.
Control-flow kernels check what they accumulate (Loop scan outputs and carried
sequences) as they go, and refuse a trip count whose projected size is over the limit.
Kernels of ops whose output shape comes from tensor values (ConstantOfShape, Expand,
Range, Tile, Pad, Resize, OneHot, MaxUnpool, CenterCropPad, Col2Im, DFT, STFT, windows,
MelWeightMatrix) check that output before allocating it, against the limit
and, with or without one, against the memory the process can still get
(:func:`output_size_check`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from ..errors import InvalidGraphError, ResourceLimitError
from ..graph.graph_spec import value_type_of
from ..load.proto_tensors import FoundTensor, dense_parts, model_graphs, model_tensors

#: bytes counted per stored item on top of its data (array object overhead)
ITEM_OVERHEAD = 128


def _fmt(n: float) -> str:
    return f"{int(n):,} bytes"


def _refuse(what: str, nbytes: float, limit: int, *, value: str | None, hint: str = "") -> ResourceLimitError:
    return ResourceLimitError(
        f"{what} needs {_fmt(nbytes)}, above memory_limit_bytes={limit:,}{hint}",
        value=value, nbytes=int(nbytes), limit=limit,
    )


def _itemsizes() -> dict[int, int]:
    sizes: dict[int, int] = {}
    for data_type in onnx.TensorProto.DataType.values():
        try:
            sizes[data_type] = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(data_type)).itemsize
        except Exception:  # noqa: BLE001 - UNDEFINED, or a type numpy cannot hold
            continue
    return sizes


#: bytes per element by ONNX data type, as numpy stores it (looked up per tensor at load)
_ITEMSIZE = _itemsizes()


def item_size(data_type: int) -> int | None:
    """Bytes per element of an ONNX data type as numpy holds it; None for unknown types."""
    return _ITEMSIZE.get(data_type)


def tensor_proto_nbytes(tensor: onnx.TensorProto | onnx.SparseTensorProto) -> float | None:
    """Dense byte size a tensor proto declares (dims x item size); a float so absurd dims
    cannot overflow; ``None`` for unknown data types or negative dims."""
    dims = tensor.dims
    data_type = tensor.values.data_type if isinstance(tensor, onnx.SparseTensorProto) else tensor.data_type
    itemsize = _ITEMSIZE.get(data_type)
    if itemsize is None or any(d < 0 for d in dims):  # unknown/undefined data type: the loader reports it
        return None
    return float(math.prod(float(d) for d in dims)) * itemsize


def allocation_cap(limit: int | None) -> int:
    """The most one allocation sized by the model's declarations (not by data it holds) may
    take: ``memory_limit_bytes`` when set, else the memory this process can still get, never
    above :data:`MAX_OUTPUT_BYTES`. Without a limit a session still gets this bound, so a
    hostile size is a clear error instead of a ``MemoryError`` or the OOM killer."""
    if limit is not None:
        return limit
    free = _recent_available_memory()
    return MAX_OUTPUT_BYTES if free is None else min(free, MAX_OUTPUT_BYTES)


#: how long a reading of the available memory serves plan builds: reading /proc/meminfo and the
#: cgroup files costs ~0.1 ms, 4 % of a small model's session-cache hit, and a plan's cap only
#: tells credible sizes from hostile ones
_MEMORY_READING_TTL_S = 1.0
_memory_reading: tuple[float, int | None] = (-math.inf, None)


def _recent_available_memory() -> int | None:
    """:func:`available_memory`, read again when the last reading is over a second old."""
    global _memory_reading
    taken, free = _memory_reading
    now = time.monotonic()
    if now - taken > _MEMORY_READING_TTL_S:
        free = available_memory()
        _memory_reading = (now, free)
    return free


def check_proto_sizes(proto: onnx.ModelProto, limit: int | None, source: str,
                      tensors: Sequence[FoundTensor] | None = None) -> None:
    """Tensors whose declared size is over the limit, before any is read or densified:
    initializers (dense, sparse, external) and tensor attributes, in every graph, subgraph
    and function body. Without a limit only sparse tensors are measured (densifying them
    allocates their declared size), against :func:`allocation_cap`. ``tensors``: the
    model's, when the caller walked them already."""
    cap: int | None = limit
    for found in model_tensors(proto) if tensors is None else tensors:
        tensor, sparse = found.tensor, isinstance(found.tensor, onnx.SparseTensorProto)
        if limit is None and not sparse:
            continue
        nbytes = tensor_proto_nbytes(tensor)
        if nbytes is None:
            continue
        if cap is None:  # read once, and only for a model with sparse tensors
            cap = allocation_cap(None)
        if nbytes > cap:
            what = f"{source}: {found.what} (dims {list(tensor.dims)})"
            value = getattr(tensor, "name", None) or (tensor.values.name if sparse else None) or found.what
            if limit is not None:
                raise _refuse(what, nbytes, limit, value=value)
            raise ResourceLimitError(f"{what} needs {_fmt(nbytes)} once densified, more than the {_fmt(cap)} "
                                     "this process can get (set SessionOptions.memory_limit_bytes for a fixed cap); "
                                     "refused before allocation", value=value, nbytes=int(nbytes), limit=cap)


#: declared ranks above this are refused: no array library holds that many dims (numpy: 64),
#: and reading a shape costs time per dim (a 100,000-dim input took 4 s to load)
MAX_DECLARED_RANK = 1024


def check_declared_ranks(proto: onnx.ModelProto, source: str) -> None:
    """Refuse, naming the value, a declared shape or initializer above :data:`MAX_DECLARED_RANK`
    dims, before shape inference and the IR walk them dim by dim."""
    def rank(vi: onnx.ValueInfoProto) -> int:
        return len(vi.type.tensor_type.shape.dim) if vi.type.HasField("tensor_type") else 0

    def refuse(what: str, dims: int) -> InvalidGraphError:
        return InvalidGraphError(f"{source}: {what} is declared with {dims:,} dims; ranks above "
                                 f"{MAX_DECLARED_RANK} are refused (no array library holds them)")

    for graph in model_graphs(proto):  # names are formatted only for the value refused
        for vi in (*graph.input, *graph.output, *graph.value_info):
            if (dims := rank(vi)) > MAX_DECLARED_RANK:
                raise refuse(f"value {vi.name!r}", dims)
        for t in graph.initializer:
            if len(t.dims) > MAX_DECLARED_RANK:
                raise refuse(f"initializer {t.name!r}", len(t.dims))
    for f in proto.functions:
        for vi in f.value_info:
            if (dims := rank(vi)) > MAX_DECLARED_RANK:
                raise refuse(f"value {vi.name!r} of function {f.name!r}", dims)


#: tensors declaring at most this many bytes are not compared with the data they hold here
#: (reading them allocates little; a mismatch is still found when they are read)
UNCHECKED_TENSOR_BYTES = 1 << 20

_BITS = {t.value: t.bitwidth for t in ir.DataType if t not in (ir.DataType.UNDEFINED, ir.DataType.STRING)}
_COMPLEX = {onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128}
_KNOWN_TYPES = {t.value for t in ir.DataType if t != ir.DataType.UNDEFINED}


def tensor_data_elements(tensor: onnx.TensorProto) -> int | None:
    """How many elements the data a tensor proto holds can stand for (raw bytes or typed
    fields; sub-byte types packed as the spec packs them); ``None`` for unknown types."""
    if tensor.data_type == onnx.TensorProto.STRING:
        return len(tensor.string_data)
    bits = _BITS.get(tensor.data_type)
    if bits is None:
        return None
    if tensor.HasField("raw_data"):
        return len(tensor.raw_data) * 8 // bits
    per_int32 = 8 // bits if bits < 8 else 1  # int32_data holds one byte of packed 2/4-bit values
    halves = 2 if tensor.data_type in _COMPLEX else 1  # complex: two floats per element
    return max(len(tensor.int32_data) * per_int32, len(tensor.int64_data), len(tensor.uint64_data),
               len(tensor.float_data) // halves, len(tensor.double_data) // halves)


def check_proto_data(proto: onnx.ModelProto, source: str, held_elsewhere: frozenset[str] = frozenset(),
                     tensors: Sequence[FoundTensor] | None = None) -> None:
    """Tensors that declare more elements than their data holds are refused before anything
    is sized from their dims (unpacking 4-bit data, or a tensor without data read as zeros,
    allocates the declared size): an :class:`~epoxy.errors.InvalidGraphError` naming the
    tensor, its dims and type; so are negative dims and unknown data types. Call it once
    external data is read; ``held_elsewhere``: names of initializers whose data was kept out
    of the proto (memory-mapped, checked there); ``tensors``: the model's, when the caller
    walked them already."""
    for found in model_tensors(proto) if tensors is None else tensors:
        for what, tensor in dense_parts(found):
            if any(d < 0 for d in tensor.dims):
                raise InvalidGraphError(f"{source}: {what} has a negative dim in {list(tensor.dims)}")
            if tensor.data_type not in _KNOWN_TYPES:
                raise InvalidGraphError(f"{source}: {what} has data type {tensor.data_type}, which is "
                                        f"{'UNDEFINED' if tensor.data_type == 0 else 'not an ONNX type'}")
            if tensor.name in held_elsewhere or tensor.data_location == onnx.TensorProto.EXTERNAL:
                continue
            nbytes = tensor_proto_nbytes(tensor)
            if nbytes is None or nbytes <= UNCHECKED_TENSOR_BYTES:
                continue
            if tensor.HasField("raw_data") and _BITS.get(tensor.data_type, 8) % 8 == 0:
                continue  # whole-byte raw data is only viewed, never sized from dims (and reading it copies)
            held = tensor_data_elements(tensor)
            declared = math.prod(tensor.dims)
            if held is not None and held < declared:
                dtype = onnx.TensorProto.DataType.Name(tensor.data_type)
                raise InvalidGraphError(
                    f"{source}: {what} declares dims {list(tensor.dims)} ({declared:,} elements of {dtype}) "
                    f"but holds data for {held:,}; refused before allocation")


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
            nbytes = float(np.prod([float(d) for d in vt.shape])) * vt.dtype.itemsize  # type: ignore[arg-type, union-attr]  # static: int dims
            if nbytes > limit:
                raise _refuse(f"value {value.name!r} ({where}, shape {list(vt.shape)}, {vt.dtype})",  # type: ignore[arg-type]
                              nbytes, limit, value=value.name, hint="; refused before allocation")


def check_planned_peak(peak: int, limit: int) -> None:
    if peak > limit:
        raise _refuse("the memory plan (planned peak of values live at once)", peak, limit, value=None)


def value_nbytes(value: Any) -> int:
    """Bytes a run-time value holds: arrays, sequences (lists) of them, maps (dicts), None."""
    if value is None:
        return 0
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (list, tuple)):
        return sum(value_nbytes(v) + ITEM_OVERHEAD for v in value)
    if isinstance(value, dict):  # a map: its keys and values are Python scalars
        return ITEM_OVERHEAD * len(value)
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


# -- outputs sized from tensor values at run time ---------------------------------------------
# ConstantOfShape, Expand, Range, Tile, Pad, Resize... compute their output shape from input
# *values*, so neither shape inference nor the planner can size them: their kernels call an
# ``output_size_check`` before allocating. Without ``memory_limit_bytes`` the cap is the
# memory the process can still get (a clear error instead of a MemoryError, or the OOM killer
# after numpy's pages are touched); with it, the smaller of the two.

_SESSION_LIMIT: ContextVar[int | None] = ContextVar("epoxy_memory_limit_bytes", default=None)

#: outputs up to this size are not compared with the free memory (reading it would cost
#: more than allocating them)
UNMEASURED_BYTES = 1 << 26
#: no output may be larger, whatever the machine: numpy's size arithmetic overflows near it
MAX_OUTPUT_BYTES = 1 << 48


@contextmanager
def memory_limit_scope(limit: int | None) -> Iterator[None]:
    """The ``memory_limit_bytes`` kernel factories see while a session builds its plan;
    :func:`output_size_check` binds it into each kernel (runs need no lookup, and the
    parallel executor's threads get the same limit)."""
    token = _SESSION_LIMIT.set(limit)
    try:
        yield
    finally:
        _SESSION_LIMIT.reset(token)


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no cgroup limit


def _cgroup_room() -> int | None:
    """Bytes left under this process's cgroup memory limit (v2, then v1); None if unlimited."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            base = "/sys/fs/cgroup" + line[3:].rstrip("/")
            limit, used = _read_int(f"{base}/memory.max"), _read_int(f"{base}/memory.current")
            if limit is None:
                limit, used = _read_int("/sys/fs/cgroup/memory.max"), _read_int("/sys/fs/cgroup/memory.current")
            if limit is not None and used is not None:
                return max(0, limit - used)
    limit = _read_int("/sys/fs/cgroup/memory/memory.limit_in_bytes")
    used = _read_int("/sys/fs/cgroup/memory/memory.usage_in_bytes")
    if limit is not None and used is not None and limit < 1 << 60:
        return max(0, limit - used)
    return None


def available_memory() -> int | None:
    """Bytes this process can still allocate: free RAM plus free swap (``MemAvailable`` +
    ``SwapFree``), capped by a cgroup limit; total RAM where only that is known; None when
    nothing is (then only :data:`MAX_OUTPUT_BYTES` applies)."""
    fields: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("MemAvailable", "SwapFree"):
                    fields[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    free: int | None = None
    if "MemAvailable" in fields:
        free = fields["MemAvailable"] + fields.get("SwapFree", 0)
    else:
        try:
            free = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            free = None
    room = _cgroup_room()
    if room is not None:
        free = room if free is None else min(free, room)
    return free


def output_size_check(what: str, value: str | None = None) -> Callable[[Sequence[int], np.dtype], None]:
    """A check to call before allocating an output whose shape comes from tensor values.

    ``what`` names the node in errors (``node 'x' (Expand)``), ``value`` its output. Made in
    a kernel factory: the session's limit (:func:`memory_limit_scope`) is bound now. The
    returned ``check(shape, dtype)`` raises :class:`ResourceLimitError` with the shape and
    bytes; small outputs cost one product and one comparison."""
    limit = _SESSION_LIMIT.get()
    cheap = UNMEASURED_BYTES if limit is None else min(limit, UNMEASURED_BYTES)

    def check(shape: Sequence[int], dtype: np.dtype) -> None:
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > cheap and min(shape) >= 0:  # negative dims: the kernel reports them
            _check_large(f"{what}: output shape {list(shape)} ({dtype})", nbytes, limit, value)

    return check


def _check_large(what: str, nbytes: int, limit: int | None, value: str | None) -> None:
    hint = "; refused before allocation"
    if limit is not None and nbytes > limit:
        raise _refuse(what, nbytes, limit, value=value, hint=hint)
    if nbytes > MAX_OUTPUT_BYTES:
        raise ResourceLimitError(f"{what} needs {_fmt(nbytes)}, more than any machine can allocate{hint}",
                                 value=value, nbytes=nbytes, limit=MAX_OUTPUT_BYTES)
    free = available_memory()
    if free is not None and nbytes > free:
        raise ResourceLimitError(
            f"{what} needs {_fmt(nbytes)}, more than the {_fmt(free)} of memory this process can still get "
            f"(set SessionOptions.memory_limit_bytes for a fixed cap){hint}",
            value=value, nbytes=nbytes, limit=free,
        )
