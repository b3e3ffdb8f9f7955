"""``epoxy inspect``: what a model file holds, and for a compiled model its compiled groups."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import onnx

from ..errors import ModelLoadError
from .blobs import StaleBlob, confined_path, read_blob
from .format import CONTEXT_DOMAIN, RecordError, from_attributes, group_digest, read_metadata
from .signing import verify


def inspect_model(path: str | Path) -> dict[str, Any]:
    """A JSON-ready description: opsets, node counts, and per compiled group its provider,
    version, format, target, blob size and place, and whether the blob checks out."""
    model_path = Path(path)
    try:
        proto = onnx.load(str(model_path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - a malformed file is the user's error, named
        raise ModelLoadError(f"{model_path}: cannot read the model: {type(exc).__name__}: {exc}") from None
    functions = {(f.domain, f.name): f for f in proto.functions}
    groups = []
    for node in proto.graph.node:
        if node.domain == CONTEXT_DOMAIN:
            groups.append(_group(node, functions.get((node.domain, node.op_type)), model_path.parent))
    metadata = read_metadata(proto)
    return {
        "model": str(model_path),
        "ir_version": proto.ir_version,
        "opsets": {op.domain or "ai.onnx": op.version for op in proto.opset_import},
        "nodes": len(proto.graph.node),
        "ops": dict(Counter(n.op_type for n in proto.graph.node if n.domain != CONTEXT_DOMAIN).most_common()),
        "compiled": metadata is not None,
        "compiled_by": None if metadata is None else {k: metadata.get(k) for k in
                                                      ("epoxy_version", "sdk_api", "optimization_level", "providers")},
        "partition": None if metadata is None else dict(Counter((metadata.get("partition") or {}).values())),
        "groups": groups,
    }


def _group(node: onnx.NodeProto, function: onnx.FunctionProto | None, folder: Path) -> dict[str, Any]:
    info: dict[str, Any] = {"node": node.name, "label": node.op_type,
                            "kept_nodes": len(function.node) if function is not None else None}
    try:
        record, embedded = from_attributes(node)
    except RecordError as exc:
        return {**info, "status": f"unreadable: {exc}"}
    info.update(label=record.label, provider=record.provider, provider_version=record.provider_version,
                sdk_api=record.sdk_api, format=record.format, target=record.target, options=dict(record.options),
                blob_bytes=record.blob_size,
                blob="embedded" if embedded is not None else record.blob_path,
                signed_by_this_user=verify(record.signed_fields(), record.signature))
    problems = []
    if function is None:
        problems.append("its kept nodes (the function) are missing")
    elif group_digest(function) != record.group_sha256:
        problems.append("kept nodes differ from the ones compiled")
    try:
        if embedded is None:
            confined_path(record.blob_path, folder, node.name)
        read_blob(record, embedded, folder, node.name)
    except (StaleBlob, ModelLoadError) as exc:
        problems.append(str(exc))
    info["status"] = "; ".join(problems) or "ok"
    return info


def format_inspection(info: dict[str, Any]) -> str:
    """The human-readable form of :func:`inspect_model`."""
    lines = [f"{info['model']}: IR {info['ir_version']}, {info['nodes']} nodes, opsets "
             + ", ".join(f"{d} {v}" for d, v in info["opsets"].items())]
    if not info["compiled"]:
        lines.append("not an epoxy compiled model (no compiled groups)")
        return "\n".join(lines)
    by = info["compiled_by"] or {}
    lines.append(f"compiled by epoxy {by.get('epoxy_version')} (SDK API {by.get('sdk_api')}) for "
                 f"{', '.join(by.get('providers') or [])}; optimization {by.get('optimization_level')}")
    if info["partition"]:
        lines.append("partition: " + ", ".join(f"{p} {n} nodes" for p, n in info["partition"].items()))
    for g in info["groups"]:
        if "provider" not in g:
            lines.append(f"  {g['label']}: {g['status']}")
            continue
        signed = "signed by this user" if g["signed_by_this_user"] else "not signed by this user's key"
        lines.append(f"  {g['label']}: {g['provider']} {g['provider_version']}, {g['kept_nodes']} nodes, "
                     f"{g['blob_bytes']} bytes ({g['blob']}), {g['format']}, target {g['target'] or '-'}, {signed}: "
                     f"{g['status']}")
    return "\n".join(lines)
