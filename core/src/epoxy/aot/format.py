"""The compiled model's records: the context node's attributes and the model's metadata entry.

A context node is a call of a model-local function (same domain and name as the node) whose
body is the group's original nodes, so a runtime without the provider inlines the call and
runs those nodes. Every attribute the node carries is declared by the function, which keeps
the model valid for onnx.checker and loadable by onnxruntime.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import onnx

#: domain of context nodes and of the functions that keep the groups' nodes
CONTEXT_DOMAIN = "ai.epoxy.compiled"
#: metadata_props key holding the model-level record (JSON)
METADATA_KEY = "epoxy.compiled"
#: layout of both records; a reader refuses a newer one with the reason
FORMAT_VERSION = 1

#: attribute name -> (AttributeProto type, required): the context node's fields
ATTRIBUTES: dict[str, tuple[int, bool]] = {
    "provider": (onnx.AttributeProto.STRING, True),
    "provider_version": (onnx.AttributeProto.STRING, True),
    "sdk_api": (onnx.AttributeProto.STRING, True),
    "format": (onnx.AttributeProto.STRING, True),
    "target": (onnx.AttributeProto.STRING, False),
    "options": (onnx.AttributeProto.STRING, False),  # JSON object of strings
    "blob": (onnx.AttributeProto.STRING, False),  # the bytes, when embedded
    "blob_path": (onnx.AttributeProto.STRING, False),  # a side file, relative to the model
    "blob_size": (onnx.AttributeProto.INT, True),
    "blob_sha256": (onnx.AttributeProto.STRING, True),
    "group_sha256": (onnx.AttributeProto.STRING, True),  # digest of the kept nodes (the function)
    "signature": (onnx.AttributeProto.STRING, False),  # HMAC-SHA256, see epoxy.aot.signing
    "label": (onnx.AttributeProto.STRING, True),
}


@dataclass(frozen=True)
class ContextRecord:
    """What one context node says about its compiled group (the blob itself travels apart)."""

    provider: str
    provider_version: str
    sdk_api: str
    format: str
    label: str
    blob_size: int
    blob_sha256: str
    group_sha256: str
    target: str = ""
    options: Mapping[str, str] = field(default_factory=dict)
    blob_path: str = ""
    signature: str = ""

    def signed_fields(self) -> bytes:
        """The bytes a signature covers: every field but the signature and where the blob lies."""
        payload = {"provider": self.provider, "provider_version": self.provider_version,
                   "sdk_api": self.sdk_api, "format": self.format, "label": self.label,
                   "target": self.target, "options": dict(sorted(self.options.items())),
                   "blob_size": self.blob_size, "blob_sha256": self.blob_sha256,
                   "group_sha256": self.group_sha256}
        return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def group_digest(function: onnx.FunctionProto) -> str:
    """Digest of the kept nodes and the group's boundary: an edited body no longer matches
    the blob compiled from it (the attribute list is left out: it only declares names)."""
    body = onnx.FunctionProto()
    body.input.extend(function.input)
    body.output.extend(function.output)
    body.node.extend(function.node)
    return sha256(body.SerializeToString(deterministic=True))


def to_attributes(record: ContextRecord, blob: bytes | None) -> list[onnx.AttributeProto]:
    """The context node's attributes (``blob`` embedded when given)."""
    make = onnx.helper.make_attribute
    attrs = [make("provider", record.provider), make("provider_version", record.provider_version),
             make("sdk_api", record.sdk_api), make("format", record.format), make("label", record.label),
             make("blob_size", record.blob_size), make("blob_sha256", record.blob_sha256),
             make("group_sha256", record.group_sha256)]
    if record.target:
        attrs.append(make("target", record.target))
    if record.options:
        attrs.append(make("options", json.dumps(dict(sorted(record.options.items())))))
    if record.signature:
        attrs.append(make("signature", record.signature))
    if blob is not None:
        attrs.append(make("blob", blob))
    else:
        attrs.append(make("blob_path", record.blob_path))
    return attrs


class RecordError(ValueError):
    """A context node whose attributes do not form a record (named in the message)."""


def from_attributes(node: onnx.NodeProto) -> tuple[ContextRecord, bytes | None]:
    """The record and the embedded blob (``None`` when it lies in a side file) of a context
    node; :class:`RecordError` says which attribute is missing or mistyped."""
    values: dict[str, Any] = {}
    for attr in node.attribute:
        spec = ATTRIBUTES.get(attr.name)
        if spec is None:
            raise RecordError(f"unknown attribute {attr.name!r}")
        if attr.type != spec[0]:
            raise RecordError(f"attribute {attr.name!r} has the wrong type")
        values[attr.name] = attr.i if spec[0] == onnx.AttributeProto.INT else attr.s
    missing = [name for name, (_, required) in ATTRIBUTES.items() if required and name not in values]
    if missing:
        raise RecordError(f"missing attribute(s) {missing}")
    blob = values.pop("blob", None)
    if (blob is None) == ("blob_path" not in values):
        raise RecordError("needs exactly one of 'blob' (embedded) and 'blob_path' (side file)")
    try:
        text = {k: v.decode("utf-8") for k, v in values.items() if isinstance(v, bytes)}
        options = json.loads(text.pop("options", "{}"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RecordError(f"unreadable text attribute: {exc}") from None
    if not isinstance(options, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in options.items()):
        raise RecordError("'options' must be a JSON object of strings")
    if values["blob_size"] < 0:
        raise RecordError("'blob_size' is negative")
    return ContextRecord(options=options, blob_size=int(values["blob_size"]), **text), blob


def read_metadata(proto: onnx.ModelProto) -> dict[str, Any] | None:
    """The model-level record of a compiled model, or ``None`` for any other model."""
    for prop in proto.metadata_props:
        if prop.key == METADATA_KEY:
            try:
                data = json.loads(prop.value)
            except ValueError:
                return {"format_version": -1}
            return data if isinstance(data, dict) else {"format_version": -1}
    return None
