"""Whether every string field of a model protobuf is valid UTF-8, asked of protobuf's C parser.

Why: onnx.proto is proto2, whose parser hands a string field holding invalid UTF-8 back to
Python as ``bytes``; the loader refuses such models up front (every name lookup downstream
would trip over them), and its walk over every string field took 12% of a dynamo export's
fresh creation (the dynamo exporter puts metadata strings on every node: ~2 ms for 66 nodes).
A proto3 parser verifies UTF-8 in string fields itself, so the model is serialized and parsed
again as a proto3 twin of onnx.proto (same field numbers and types, built once per process
from onnx's own descriptor): ~0.1 ms. The loader's walk still runs when the twin finds a
problem (it names the field), and instead of the twin where the twin cannot be built with
this protobuf or the model is large (serializing it would copy its weights).
"""

from __future__ import annotations

import functools
from typing import Any

import onnx

#: models whose serialized size is above this are left to the walk (the re-parse copies them)
MAX_TWIN_BYTES = 64 << 20
_PACKAGE = "epoxy_utf8_twin"


@functools.cache
def _twin_class() -> Any:
    """The proto3 twin of ``onnx.ModelProto``, or None when this protobuf cannot build it."""
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        source = onnx.ModelProto.DESCRIPTOR.file
        twin = descriptor_pb2.FileDescriptorProto()
        source.CopyToProto(twin)
        prefix = f".{twin.package}."
        twin.name = f"{_PACKAGE}/{twin.name}"
        twin.package = _PACKAGE
        twin.syntax = "proto3"
        twin.ClearField("dependency")  # onnx.proto imports nothing it needs for parsing
        for message in twin.message_type:
            _as_proto3(message, prefix)
        pool = descriptor_pool.DescriptorPool()
        pool.Add(twin)
        name = onnx.ModelProto.DESCRIPTOR.name
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
    except Exception:  # noqa: BLE001 - any protobuf that will not take it: the walk runs
        return None


def _as_proto3(message: Any, prefix: str) -> None:
    """proto2 -> proto3 for parsing only: no required labels, no defaults, types renamed."""
    from google.protobuf import descriptor_pb2

    for field in message.field:
        if field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REQUIRED:
            field.label = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
        field.ClearField("default_value")
        if field.type_name.startswith(prefix):
            field.type_name = f".{_PACKAGE}.{field.type_name[len(prefix):]}"
    for nested in message.nested_type:
        _as_proto3(nested, prefix)


def text_is_valid(model: onnx.ModelProto) -> bool | None:
    """True when every string field of ``model`` is valid UTF-8; False when one may not be
    (the caller's walk finds and names it); None when the twin cannot tell (no twin, a
    model too large to re-serialize)."""
    twin = _twin_class()
    if twin is None or model.ByteSize() > MAX_TWIN_BYTES:
        return None
    try:
        twin.FromString(model.SerializeToString())
    except Exception:  # noqa: BLE001 - DecodeError: bad UTF-8 (or anything else odd): walk it
        return False
    return True
