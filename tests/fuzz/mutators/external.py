"""External-data tricks: the model's initializers (dense or sparse) moved to a data file, then
the location made to escape the model's folder (a relative ``..``, an absolute path, a file
that exists only in the working directory), made too long or odd, the offset/length past the
file, the file truncated or missing; and mmap-sized models (>= 1 MiB, the size epoxy maps
instead of parsing) whose large initializer has a corrupt ``data_type``.

A location that escapes is given a bait: the very bytes expected, where the escaping path
leads. A session that then works read them, and the case is marked ``must_refuse``.
"""

from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from .common import ABSURD_DIMS, Draft, type_name

DATA = "weights.bin"
MMAP_SIZE = 1 << 20


def _promote_feed(draft: Draft) -> bool:
    """No initializer to move out: make a fed numeric input one (its feed becomes its value)."""
    if not draft.feeds:
        return False
    for value in draft.model.graph.input:
        array = draft.feeds.get(value.name)
        if isinstance(array, np.ndarray) and array.dtype.kind in "fiub" and array.dtype.type.__module__ == "numpy":
            draft.model.graph.initializer.append(numpy_helper.from_array(array, value.name))
            draft.model.graph.input.remove(value)
            del draft.feeds[value.name]
            return True
    return False


def _raw(tensor: TensorProto) -> bytes | None:
    if tensor.data_type == TensorProto.STRING or tensor.data_location == TensorProto.EXTERNAL:
        return None
    if tensor.HasField("raw_data"):
        return tensor.raw_data
    return numpy_helper.from_array(numpy_helper.to_array(tensor)).raw_data


def _externalize(tensors: list[TensorProto], location: str) -> bytes:
    """Move the tensors' data to one file at ``location``; returns the file's bytes."""
    data = bytearray()
    for tensor in tensors:
        raw = _raw(tensor)
        if raw is None:
            continue
        offset = len(data)
        data += raw
        for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
            tensor.ClearField(field)
        tensor.raw_data = raw  # onnx's helper wants it there, then it goes
        onnx.external_data_helper.set_external_data(tensor, location, offset, len(raw))
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
    return bytes(data)


def _escape(rng: random.Random, draft: Draft, tensors: list[TensorProto], data: bytes) -> str:
    """Point the data somewhere outside the model's folder, and put the bytes there."""
    choice = rng.randrange(3)
    if choice == 0:
        location = rng.choice(["../outside.bin", "sub/../../outside.bin"])
        draft.files["../outside.bin"] = data
        if location.startswith("sub/"):
            draft.files["sub/keep.txt"] = b""
        what = f"location {location!r}, the data beside the model's folder"
    elif choice == 1:
        location = DATA
        draft.files.pop(DATA, None)
        draft.cwd_files[DATA] = data
        what = f"location {location!r}, the data only in the working directory"
    else:
        location = rng.choice(["/etc/passwd", "/proc/self/environ", "/dev/zero", "/"])
        what = f"absolute location {location!r}"
    for tensor in tensors:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    draft.must_refuse = True
    return what


def _entry(tensor: TensorProto, key: str) -> onnx.StringStringEntryProto:
    for entry in tensor.external_data:
        if entry.key == key:
            return entry
    entry = tensor.external_data.add()
    entry.key = key
    return entry


def external_data(rng: random.Random, draft: Draft) -> str | None:
    graph = draft.model.graph
    if DATA in draft.files or draft.cwd_files or draft.must_refuse:
        return None  # one trick per case: a second would rewrite the first one's files
    sparse = rng.random() < 0.3
    if sparse:
        if not graph.sparse_initializer and not _make_sparse(graph, draft):
            return None
        tensors = [t for s in graph.sparse_initializer for t in (s.values, s.indices)]
    else:
        if not graph.initializer and not _promote_feed(draft):
            return None
        tensors = list(graph.initializer)
    data = _externalize(tensors, DATA)
    tensors = [t for t in tensors if t.data_location == TensorProto.EXTERNAL]
    if not tensors:
        return None
    draft.files[DATA] = data
    draft.by_path = True  # external data is found from the model's path
    kind = "sparse " if sparse else ""
    choice = rng.randrange(9)
    if choice == 0:
        what = "intact"
    elif choice == 1:
        draft.files[DATA] = data[: rng.randrange(len(data) + 1)]
        what = "file truncated"
    elif choice == 2:
        del draft.files[DATA]
        what = "file missing"
    elif choice == 3:
        key = rng.choice(["offset", "length"])
        _entry(rng.choice(tensors), key).value = rng.choice(
            ["-1", "99999999999", "abc", "", "1e3", str(len(data) + 4), str(2**64)])
        what = f"{key} set absurd"
    elif choice in (4, 5):
        what = _escape(rng, draft, tensors, data)
    elif choice == 6:
        location = rng.choice(["a" * 5000, "d/" * 3000 + "w.bin", "x" * 256 + ".bin", "weights.bin\x00.txt", ".", "",
                               "sub", "C:\\w.bin", "~/w.bin"])
        _entry(rng.choice(tensors), "location").value = location
        draft.files["sub/keep.txt"] = b""
        what = f"location {location[:24]!r} ({len(location)} chars)"
    elif choice == 7:
        tensor = rng.choice(tensors)
        tensor.dims[:] = [rng.choice(ABSURD_DIMS[1:])]
        what = f"{tensor.name!r} given absurd dims"
    else:
        _entry(rng.choice(tensors), rng.choice(["checksum", "location", "bogus"])).value = "zzz"
        what = "odd key added"
    return f"{kind}external data: {what}"


def _make_sparse(graph: onnx.GraphProto, draft: Draft) -> bool:
    """Turn a dense float initializer (or a promoted feed) into a sparse one of the same name."""
    dense = [t for t in graph.initializer if t.data_type == TensorProto.FLOAT]
    if not dense and _promote_feed(draft):
        dense = [t for t in graph.initializer if t.data_type == TensorProto.FLOAT]
    if not dense:
        return False
    tensor = dense[0]
    array = numpy_helper.to_array(tensor)
    flat = array.reshape(-1)
    indices = np.flatnonzero(flat).astype(np.int64)
    values = numpy_helper.from_array(flat[indices], tensor.name)
    graph.initializer.remove(tensor)
    graph.sparse_initializer.append(onnx.helper.make_sparse_tensor(
        values, numpy_helper.from_array(indices, f"{tensor.name}_indices"), list(array.shape)))
    return True


def mmap_sized(rng: random.Random, draft: Draft) -> str | None:
    """A model file >= 1 MiB (mapped, not parsed) whose large initializer may be corrupt."""
    graph = draft.model.graph
    count = (MMAP_SIZE // 4) + rng.randrange(1, 4096)
    big = numpy_helper.from_array(np.zeros(count, np.float32), f"big_{len(graph.initializer)}")
    kind = rng.choice([0, 0, 99, TensorProto.FLOAT, TensorProto.STRING, TensorProto.BFLOAT16, TensorProto.INT4,
                       -1, 2**31 - 1])
    big.data_type = kind
    if rng.random() < 0.3:
        big.dims[:] = [rng.choice(ABSURD_DIMS)]
    used = next((n for n in graph.node if n.input), None)
    if used is not None and rng.random() < 0.5:
        slot = rng.randrange(len(used.input))
        used.input[slot] = big.name
    graph.initializer.append(big)
    draft.by_path = True  # only a file is mapped
    return f"mmap-sized model: {count * 4} byte {big.name!r}, data_type {type_name(kind)}, dims {list(big.dims)}"


MUTATIONS = [external_data, external_data, external_data, mmap_sized]
