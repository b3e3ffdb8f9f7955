"""Load large models without a second copy of their weights.

``onnx.load`` holds the file's bytes and the parsed protobuf at once (two copies of every
weight), and turning the tensors into numpy arrays makes a third. Here the file is memory
mapped, the protobuf wire format is walked just deep enough (ModelProto.graph ->
GraphProto.initializer -> TensorProto.raw_data) to cut large ``raw_data`` fields out of a
small skeleton that protobuf parses; each of those tensors is copied out of the mapping into
its own (read-only) numpy array and its mapped pages dropped, so the weights exist about
once while loading instead of three times.
"""

from __future__ import annotations

import contextlib
import math
import mmap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

#: raw_data fields at least this long are left in the file instead of the protobuf
MIN_MAPPED_BYTES = 1 << 16

_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA = 7, 5, 9
_LENGTH_DELIMITED = 2


class WireFormatError(ValueError):
    """The bytes are not a well-formed protobuf message."""


def _varint(buf: mmap.mmap | bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireFormatError("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(buf: mmap.mmap | bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int, int, int]]:
    """(field number, wire type, field start, value start, value end, field end) per field."""
    pos = start
    while pos < end:
        field_start = pos
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _varint(buf, pos, end)
            value_start = value_end = pos
        elif wire == 1:
            value_start, pos = pos, pos + 8
            value_end = pos
        elif wire == 5:
            value_start, pos = pos, pos + 4
            value_end = pos
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            value_start, pos = pos, pos + length
            value_end = pos
        else:
            raise WireFormatError(f"unsupported wire type {wire}")
        if pos > end:
            raise WireFormatError("field runs past the end of its message")
        yield field, wire, field_start, value_start, value_end, pos


def _length_delimited(field: int, payload: bytes | bytearray) -> bytes:
    return _encode_varint((field << 3) | _LENGTH_DELIMITED) + _encode_varint(len(payload)) + bytes(payload)


@dataclass(frozen=True)
class MappedSpan:
    """Where initializer number ``index`` keeps its raw data in the mapped file."""

    index: int
    offset: int
    length: int


def _strip_tensor(buf: mmap.mmap, start: int, end: int, index: int, spans: list[MappedSpan]) -> bytearray:
    out = bytearray()
    for field, wire, fs, vs, ve, fe in _fields(buf, start, end):
        if field == _TENSOR_RAW_DATA and wire == _LENGTH_DELIMITED and ve - vs >= MIN_MAPPED_BYTES:
            spans.append(MappedSpan(index, vs, ve - vs))
        else:
            out += buf[fs:fe]
    return out


def _strip_graph(buf: mmap.mmap, start: int, end: int, spans: list[MappedSpan], index: int) -> tuple[bytearray, int]:
    """The graph without its large raw data, and the index of the next initializer (a
    graph field repeated in the file is merged by protobuf: its initializers follow on)."""
    out = bytearray()
    kept = start  # fields from here on are copied as they are, in one slice per run
    for field, wire, fs, vs, ve, fe in _fields(buf, start, end):
        if field == _GRAPH_INITIALIZER and wire == _LENGTH_DELIMITED:
            if ve - vs >= MIN_MAPPED_BYTES:  # smaller tensors cannot hold a raw_data to cut out
                out += buf[kept:fs]
                out += _length_delimited(field, _strip_tensor(buf, vs, ve, index, spans))
                kept = fe
            index += 1
    out += buf[kept:end]
    return out, index


#: data types whose raw data is one fixed-width little-endian item per element, as numpy
#: reads it (sub-byte types are packed, strings have no raw form: those stay in the proto)
_MAPPABLE = {t.value: t.numpy() for t in ir.DataType
             if t not in (ir.DataType.UNDEFINED, ir.DataType.STRING) and t.bitwidth % 8 == 0}


def _mappable_dtype(tensor: onnx.TensorProto, length: int) -> np.dtype | None:
    """The dtype to view ``length`` bytes of ``tensor``'s raw data as, when they are exactly
    its elements (else the bytes go back into the proto: the loader checks them there and
    names the tensor, as for a model read from bytes)."""
    dtype = _MAPPABLE.get(tensor.data_type)
    if dtype is None or any(d < 0 for d in tensor.dims):
        return None
    return dtype if dtype.itemsize * math.prod(tensor.dims) == length else None


def load_mapped(path: Path, file_backed: Callable[[onnx.GraphProto], set[str]] | None = None,
                ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Parse ``path`` with its large initializers as numpy arrays copied out of the mapped file.

    Returns the protobuf (those initializers keep dims and type but no data) and the
    arrays by initializer name. ``file_backed(graph)`` names initializers left as views of
    the mapping (no copy, pages read only if touched): an epoxy compiled model's weights that
    only its compiled groups read, which their blobs replace (:mod:`epoxy.aot.reader`).
    """
    with open(path, "rb") as f:
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    spans: list[MappedSpan] = []
    skeleton = bytearray()
    index = 0
    for field, wire, fs, vs, ve, fe in _fields(mapping, 0, len(mapping)):
        if field == _MODEL_GRAPH and wire == _LENGTH_DELIMITED:
            graph, index = _strip_graph(mapping, vs, ve, spans, index)
            skeleton += _length_delimited(field, graph)
        else:
            skeleton += mapping[fs:fe]
    proto = onnx.ModelProto()
    proto.ParseFromString(bytes(skeleton))
    arrays: dict[str, np.ndarray] = {}
    lazy = file_backed(proto.graph) if file_backed is not None else set()
    with _small_pages():
        _copy_spans(mapping, spans, proto, lazy, arrays)
    if not lazy.intersection(arrays):
        mapping.close()  # else the views keep it open (closing it under them is refused)
    return proto, arrays


def _copy_spans(mapping: mmap.mmap, spans: list[MappedSpan], proto: onnx.ModelProto, lazy: set[str],
                arrays: dict[str, np.ndarray]) -> None:
    for span in spans:
        if span.index >= len(proto.graph.initializer):
            raise WireFormatError(f"initializer number {span.index} is not in the parsed graph")
        tensor = proto.graph.initializer[span.index]
        dtype = _mappable_dtype(tensor, span.length)
        if dtype is None:
            tensor.raw_data = mapping[span.offset:span.offset + span.length]
            arrays.pop(tensor.name, None)
            continue
        view = np.frombuffer(mapping, dtype=dtype.newbyteorder("<"), count=span.length // dtype.itemsize,
                             offset=span.offset)
        if tensor.name in lazy and dtype.isnative:
            arrays[tensor.name] = view.reshape(tuple(tensor.dims))  # read-only: the mapping is
            continue
        # an anonymous copy (numpy asks for huge pages: GEMMs over file-backed 4 KiB pages
        # ran ~20% slower), then the mapped pages are dropped so peak memory stays ~1 copy
        array = view.astype(dtype, copy=True).reshape(tuple(tensor.dims))
        array.flags.writeable = False
        arrays[tensor.name] = array
        del view
        _drop_pages(mapping, span.offset, span.length)


@contextlib.contextmanager
def _small_pages() -> Iterator[None]:
    """numpy's large arrays allocated on 4 KiB pages while weights are copied out of the file.

    Why: numpy asks the kernel for transparent huge pages on every array of 4 MiB and more,
    and where free memory is fragmented the kernel compacts memory on the first touch of each
    2 MiB page. Measured on this workplace's 2-vCPU VM (vgg19's 548 MB of weights from the
    session cache, four creations in a row, two processes each way): 175-1730 ms with huge
    pages, 350-580 ms without, and the runs that follow within 2% either way (vgg19 and the
    bert encoder, 1 thread). Longer series still show an occasional 1.5 s load without huge
    pages: the VM's memory, which no page size avoids."""
    toggle = getattr(getattr(getattr(np, "_core", None), "multiarray", None), "_set_madvise_hugepage", None)
    if toggle is None:
        yield
        return
    previous = toggle(False)
    try:
        yield
    finally:
        toggle(previous)


def _drop_pages(mapping: mmap.mmap, offset: int, length: int) -> None:
    """Release the mapped pages of a byte range from this process (re-read if touched)."""
    start = offset - offset % mmap.PAGESIZE
    try:
        mapping.madvise(mmap.MADV_DONTNEED, start, length + (offset - start))
    except (AttributeError, OSError, ValueError):  # platforms without madvise: pages stay until close
        pass
