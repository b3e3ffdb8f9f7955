"""The Open Inference Protocol v2 infer request and reply as pure functions over bytes and
headers: JSON tensors (row-major ``data``) and Triton's binary tensor extension
(``Inference-Header-Content-Length``, ``binary_data_size``, ``binary_data`` /
``binary_data_output``), so any HTTP layer (Ray Serve here) only moves bytes."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..datatypes import to_numpy, to_protocol
from ..errors import BadRequest, PayloadTooLarge, ServeError

HEADER_LENGTH = "inference-header-content-length"
JSON_TYPE = "application/json"
BINARY_TYPE = "application/octet-stream"

#: Content-Encoding -> how to undo it (tritonclient's request_compression_algorithm)
DECOMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "identity": lambda body: body,
    "gzip": gzip.decompress,
    "deflate": zlib.decompress,
}


@dataclass(frozen=True)
class RequestedOutput:
    """An output the client asked for, and whether it wants it as binary data."""

    name: str
    binary: bool


@dataclass
class InferRequest:
    """A decoded infer request: the tensors by input name, the outputs asked for (None: all,
    each as ``binary_default`` says), and the request id to echo."""

    inputs: dict[str, np.ndarray]
    outputs: tuple[RequestedOutput, ...] | None = None
    id: str | None = None
    binary_default: bool = False
    parameters: dict[str, Any] = field(default_factory=dict)

    def selected(self, names: Sequence[str]) -> list[RequestedOutput]:
        """The outputs to send, in the model's order when all are asked for; BadRequest for a
        requested output the model does not have (checked before the model runs)."""
        if self.outputs is None:
            return [RequestedOutput(name, self.binary_default) for name in names]
        for out in self.outputs:
            if out.name not in names:
                raise BadRequest(f"requested output {out.name!r} is not an output of the model; "
                                 f"outputs: {', '.join(names)}")
        return list(self.outputs)


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"{what} must be a non-negative integer, got {value!r}")
    return value


def _flatten(data: Any) -> list[Any]:
    """Row-major ``data`` may be flat or nested as the shape; either way one flat list."""
    if not isinstance(data, list):
        return [data]
    if not any(isinstance(item, list) for item in data):
        return data
    flat: list[Any] = []
    for item in data:
        flat.extend(_flatten(item))
    return flat


def _bytes_elements(raw: bytes, count: int, name: str) -> np.ndarray:
    """BYTES binary data: each element a 4-byte little-endian length then the bytes."""
    items: list[bytes] = []
    pos = 0
    while pos < len(raw):
        if pos + 4 > len(raw):
            raise BadRequest(f"input {name!r}: BYTES binary data ends inside an element length")
        size = int.from_bytes(raw[pos:pos + 4], "little")
        pos += 4
        if pos + size > len(raw):
            raise BadRequest(f"input {name!r}: BYTES element of {size} bytes runs past the data")
        items.append(raw[pos:pos + size])
        pos += size
    if len(items) != count:
        raise BadRequest(f"input {name!r}: shape holds {count} elements, BYTES data has {len(items)}")
    array = np.empty(count, dtype=object)
    array[:] = items
    return array


def _json_elements(data: Any, dtype: np.dtype, count: int, name: str, datatype: str) -> np.ndarray:
    flat = _flatten(data)
    if len(flat) != count:
        raise BadRequest(f"input {name!r}: shape holds {count} elements, data has {len(flat)}")
    if datatype == "BYTES":
        array = np.empty(count, dtype=object)
        array[:] = [item.encode() if isinstance(item, str) else item for item in flat]
        if not all(isinstance(item, bytes) for item in array):
            raise BadRequest(f"input {name!r}: BYTES data must be strings")
        return array
    kinds = (bool,) if dtype.kind == "b" else (int, float) if dtype.kind == "f" else (int,)
    bad = next((item for item in flat if not isinstance(item, kinds) or (dtype.kind != "b" and isinstance(item, bool))),
               None) if flat else None
    if bad is not None or (flat and flat[0] is None):
        raise BadRequest(f"input {name!r}: {datatype} data holds {bad!r}")
    if dtype.kind in "iu" and flat:  # numpy 1.x wraps out-of-range ints silently: check first
        info = np.iinfo(dtype)
        low, high = min(flat), max(flat)
        if low < info.min or high > info.max:
            raise BadRequest(f"input {name!r}: data does not fit {datatype} "
                             f"({low if low < info.min else high} is outside [{info.min}, {info.max}])")
    try:
        return np.asarray(flat, dtype=dtype)
    except (OverflowError, ValueError, TypeError) as exc:
        raise BadRequest(f"input {name!r}: data does not fit {datatype} ({exc})") from None


def _tensor(entry: Any, binary: bytes, offset: int) -> tuple[str, np.ndarray, int]:
    """One input entry -> (name, array, offset after its binary data)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise BadRequest("each entry of 'inputs' must be an object with a string 'name'")
    name = entry["name"]
    given = entry.get("datatype")
    try:
        dtype = to_numpy(given) if isinstance(given, str) else None
    except KeyError:
        dtype = None
    if dtype is None or not isinstance(given, str):
        raise BadRequest(f"input {name!r}: unknown datatype {given!r}")
    datatype = given.upper()
    shape = entry.get("shape")
    if not isinstance(shape, list):
        raise BadRequest(f"input {name!r}: 'shape' must be a list of non-negative integers")
    dims = tuple(_int(d, f"input {name!r}: each dim of 'shape'") for d in shape)
    count = int(np.prod(dims, dtype=np.int64))
    params = entry.get("parameters") or {}
    if not isinstance(params, dict):
        raise BadRequest(f"input {name!r}: 'parameters' must be an object")
    if "binary_data_size" in params:
        if "data" in entry:
            raise BadRequest(f"input {name!r}: has both 'data' and binary_data_size")
        size = _int(params["binary_data_size"], f"input {name!r}: binary_data_size")
        if offset + size > len(binary):
            raise BadRequest(f"input {name!r}: binary_data_size {size} runs past the body's binary part "
                             f"({len(binary) - offset} bytes left)")
        raw = binary[offset:offset + size]
        if datatype == "BYTES":
            array = _bytes_elements(raw, count, name)
        else:
            if size != count * dtype.itemsize:
                raise BadRequest(f"input {name!r}: shape {list(dims)} of {datatype} needs {count * dtype.itemsize} "
                                 f"bytes, binary_data_size is {size}")
            array = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype, copy=True)
        return name, array.reshape(dims), offset + size
    if "data" not in entry:
        raise BadRequest(f"input {name!r}: no 'data' and no binary_data_size parameter")
    return name, _json_elements(entry["data"], dtype, count, name, datatype).reshape(dims), offset


def _requested(entries: Any, binary_default: bool) -> tuple[RequestedOutput, ...] | None:
    if entries is None:
        return None
    if not isinstance(entries, list):
        raise BadRequest("'outputs' must be a list")
    found = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise BadRequest("each entry of 'outputs' must be an object with a string 'name'")
        params = entry.get("parameters") or {}
        if not isinstance(params, dict):
            raise BadRequest(f"output {entry['name']!r}: 'parameters' must be an object")
        if "classification" in params:
            raise BadRequest(f"output {entry['name']!r}: the classification extension is not supported")
        found.append(RequestedOutput(entry["name"], bool(params.get("binary_data", binary_default))))
    return tuple(found)


def decode_request(body: bytes, headers: Mapping[str, str], *, max_bytes: int) -> InferRequest:
    """An infer request body (JSON, or JSON then binary tensors) -> InferRequest. BadRequest
    naming what is wrong; PayloadTooLarge over ``max_bytes`` (checked after decompressing too)."""
    if len(body) > max_bytes:
        raise PayloadTooLarge(f"request body of {len(body)} bytes is over the server's limit of {max_bytes}")
    lowered = _lower(headers)
    encoding = lowered.get("content-encoding", "identity").strip().lower() or "identity"
    if encoding not in DECOMPRESSORS:
        raise BadRequest(f"unsupported Content-Encoding {encoding!r}; supported: {', '.join(DECOMPRESSORS)}")
    try:
        body = DECOMPRESSORS[encoding](body)
    except (OSError, zlib.error, EOFError) as exc:
        raise BadRequest(f"request body is not valid {encoding} data ({exc})") from None
    if len(body) > max_bytes:
        raise PayloadTooLarge(f"decompressed request body of {len(body)} bytes is over the limit of {max_bytes}")
    header_length = lowered.get(HEADER_LENGTH)
    if header_length is None:
        json_part, binary = body, b""
    else:
        try:
            split = int(header_length)
        except ValueError:
            raise BadRequest(f"Inference-Header-Content-Length must be an integer, got {header_length!r}") from None
        if not 0 <= split <= len(body):
            raise BadRequest(f"Inference-Header-Content-Length {split} is outside the body ({len(body)} bytes)")
        json_part, binary = body[:split], body[split:]
    try:
        doc = json.loads(json_part)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise BadRequest("request body must be a JSON object with 'inputs'")
    params = doc.get("parameters") or {}
    if not isinstance(params, dict):
        raise BadRequest("request 'parameters' must be an object")
    entries = doc.get("inputs")
    if not isinstance(entries, list) or not entries:
        raise BadRequest("request must have a non-empty 'inputs' list")
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    for entry in entries:
        name, array, offset = _tensor(entry, binary, offset)
        if name in inputs:
            raise BadRequest(f"input {name!r} is given twice")
        inputs[name] = array
    if offset != len(binary):
        raise BadRequest(f"the body has {len(binary) - offset} bytes of binary data no input claims")
    binary_default = bool(params.get("binary_data_output", False))
    request_id = doc.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise BadRequest(f"request 'id' must be a string, got {request_id!r}")
    return InferRequest(inputs, _requested(doc.get("outputs"), binary_default), request_id, binary_default, params)


def _bytes_payload(array: np.ndarray) -> bytes:
    parts = []
    for item in array.reshape(-1):
        raw = item if isinstance(item, bytes) else str(item).encode()
        parts.append(len(raw).to_bytes(4, "little") + raw)
    return b"".join(parts)


def _json_data(array: np.ndarray, datatype: str) -> list[Any]:
    flat = array.reshape(-1)
    if datatype == "BYTES":
        return [item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item) for item in flat]
    if datatype in ("FP16", "BF16"):
        return flat.astype(np.float32).tolist()
    return flat.tolist()


def encode_response(model_name: str, model_version: str, outputs: Mapping[str, np.ndarray],
                    request: InferRequest) -> tuple[bytes, dict[str, str]]:
    """The reply for ``outputs`` (already those the client selected, by ``request.selected``):
    JSON body, or JSON then binary tensors with the header length set."""
    doc: dict[str, Any] = {"model_name": model_name, "model_version": model_version}
    if request.id is not None:
        doc["id"] = request.id
    entries = []
    blobs: list[bytes] = []
    for wanted in request.selected(list(outputs)):
        array = np.asarray(outputs[wanted.name])
        datatype = to_protocol(array.dtype)
        entry: dict[str, Any] = {"name": wanted.name, "datatype": datatype, "shape": list(array.shape)}
        if wanted.binary:
            raw = _bytes_payload(array) if datatype == "BYTES" else np.ascontiguousarray(
                array, dtype=array.dtype.newbyteorder("<")).tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            entry["data"] = _json_data(array, datatype)
        entries.append(entry)
    doc["outputs"] = entries
    head = json.dumps(doc, separators=(",", ":")).encode()
    if not blobs:
        return head, {"content-type": JSON_TYPE}
    return head + b"".join(blobs), {"content-type": BINARY_TYPE, HEADER_LENGTH: str(len(head))}


def encode_error(error: BaseException) -> tuple[int, bytes]:
    """(HTTP status, ``{"error": "..."}`` body): a ServeError keeps its status, anything else is 500."""
    status = error.status if isinstance(error, ServeError) else 500
    message = str(error) if isinstance(error, ServeError) else f"internal error: {type(error).__name__}: {error}"
    return status, json.dumps({"error": message}).encode()


def encode_json(doc: Any) -> bytes:
    """A compact JSON reply body (metadata, config, the repository index)."""
    return json.dumps(doc, separators=(",", ":")).encode()
