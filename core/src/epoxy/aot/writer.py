"""Writing a compiled model: a session's optimized graph with context nodes.

The session was built inside :func:`~epoxy.aot.capture.capturing` (``epoxy compile``, or
onnxruntime's ``ep.context_enable``), so every group a provider compiled was exported
(``export_compiled``). The output is the session's optimized graph in
its planned order, each exported group replaced by a context node that calls a model-local
function holding the group's nodes (:mod:`epoxy.aot.format`), and a metadata entry recording
the partition. Groups without a blob stay plain nodes; the summary says why.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from ..errors import EpoxyError
from ..sdk_api import SDK_API
from ..version import __version__
from .blobs import side_file_name
from .capture import CapturedGroup
from .format import (
    ATTRIBUTES,
    CONTEXT_DOMAIN,
    FORMAT_VERSION,
    METADATA_KEY,
    ContextRecord,
    group_digest,
    sha256,
    to_attributes,
)
from .opsets import uniform_opsets
from .signing import sign

#: functions and context nodes need IR version 8 (model-local functions)
MIN_IR_VERSION = 8
#: with no choice made, blobs up to this many bytes in all are embedded, larger ones go to side
#: files: an embedded blob is copied several times while protobuf parses the model (measured:
#: ~0.4 s per 100 MB on a loaded 2-core machine); a side file is read once
EMBED_LIMIT_BYTES = 16 << 20


@dataclass
class CompileSummary:
    """What ``compile_model`` wrote: ``groups`` (one dict per context node), ``kept`` (compiled
    groups left as plain nodes, with the reason), the partition report, the files, the time."""

    output: Path
    groups: list[dict[str, Any]]
    kept: list[dict[str, Any]]
    report: Any
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def format(self) -> str:
        lines = [f"wrote {self.output} in {self.seconds:.2f} s: {len(self.groups)} compiled group(s)"]
        for g in self.groups:
            lines.append(f"  {g['label']}: {g['provider']} {g['provider_version']}, {g['nodes']} nodes, "
                         f"{g['blob_bytes']} bytes {g['where']} ({g['format']}, target {g['target'] or '-'})")
        for g in self.kept:
            lines.append(f"  {g['label']}: {g['provider']}, {g['nodes']} nodes kept as plain nodes: {g['reason']}")
        counts = ", ".join(f"{p} {n}" for p, n in sorted(self.report.summary().items(), key=lambda kv: -kv[1]))
        lines.append(f"  nodes per provider: {counts}")
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)


def write_compiled(session: Any, captured_groups: Sequence[CapturedGroup], output: str | Path, *,
                   embed: bool | None = None) -> CompileSummary:
    """Write ``session``'s optimized graph with the blobs of ``captured_groups`` (what its
    providers compiled while it was built under :func:`~epoxy.aot.capture.capturing`).
    ``embed``: blobs inside the model (True), in side files (False), or by size (None:
    embedded up to :data:`EMBED_LIMIT_BYTES` in all)."""
    out = Path(output)
    proto = _serialized(session)
    graph = session._graph
    if len(proto.graph.node) != len(graph.nodes):
        raise EpoxyError(f"compile: the optimized graph has {len(proto.graph.node)} nodes, the plan "
                         f"{len(graph.nodes)} (internal error)")
    per_node, opset_note = uniform_opsets(proto, graph)
    _name_nodes(per_node, [n.name for n in graph.nodes])
    captured = [g for g in captured_groups if g.graph is graph]
    exported = {g.label: g for g in captured if g.artifact is not None}
    if embed is None:
        embed = sum(len(g.artifact.blob) for g in exported.values() if g.artifact is not None) <= EMBED_LIMIT_BYTES
    versions = {name: _factory(session, name) for name, _ in session._providers}
    out.parent.mkdir(parents=True, exist_ok=True)
    groups: list[dict[str, Any]] = []
    files: list[Path] = []
    calls: dict[str, onnx.NodeProto] = {}
    for label, group in exported.items():
        node, function, record, blob = _context(proto, per_node, group, versions[group.provider])
        where = "embedded"
        if not embed:
            name = side_file_name(out, label)
            (out.parent / name).write_bytes(blob)
            files.append(out.parent / name)
            record = dataclasses.replace(record, blob_path=name)
            where = f"in {name}"
        record = dataclasses.replace(record, signature=sign(record.signed_fields()))
        node.attribute.extend(to_attributes(record, blob if embed else None))
        proto.functions.append(function)
        calls[label] = node
        groups.append({"label": label, "provider": group.provider, "provider_version": record.provider_version,
                       "nodes": len(group.nodes), "blob_bytes": len(blob), "where": where, "format": record.format,
                       "target": record.target, "compile_seconds": round(group.compile_seconds, 3)})
    _reorder(proto.graph, per_node, session._partition.units, calls)
    kept = [{"label": g.label, "provider": g.provider, "nodes": len(g.nodes), "reason": g.reason}
            for g in captured if g.artifact is None]
    _finish(proto, session, per_node, groups, kept)
    _save(proto, out)
    notes = [opset_note] if opset_note else []
    return CompileSummary(out, groups, kept, session.partition_report(), files, notes=notes)


def _serialized(session: Any) -> onnx.ModelProto:
    import onnx_ir as ir

    from ..load.map_types import restore_map_types

    released = getattr(session, "_released_constants", None)
    if released:  # a session drops them only when nothing will write its model (session.py)
        raise RuntimeError(f"this session's model cannot be written: the kernels hold the only copies of "
                           f"{len(released)} of its constants (e.g. {released[0]!r})")
    proto = ir.serde.serialize_model(session._model)
    restore_map_types(proto, session._model)
    return proto


def _factory(session: Any, name: str) -> tuple[str, str]:
    entry = session._registry.get(name)
    factory = getattr(entry, "factory", None)
    return str(getattr(factory, "version", "")), str(getattr(factory, "sdk_api", SDK_API))


def _name_nodes(per_node: list[list[onnx.NodeProto]], names: list[str]) -> None:
    """Every node named, uniquely: context nodes find their group's nodes by name on load.
    Nodes the version converter added before a node are named after it."""
    seen: set[str] = set()

    def unique(base: str) -> str:
        name, k = base, 1
        while name in seen:
            name, k = f"{base}__{k}", k + 1
        seen.add(name)
        return name

    for protos, name in zip(per_node, names):
        *added, node = protos
        node.name = unique(name or node.op_type)
        for k, extra in enumerate(added):
            extra.name = unique(f"{node.name}/opset_{extra.op_type}_{k}")


def _context(proto: onnx.ModelProto, per_node: list[list[onnx.NodeProto]], group: CapturedGroup,
             version: tuple[str, str]) -> tuple[onnx.NodeProto, onnx.FunctionProto, ContextRecord, bytes]:
    """The context node (attributes added by the caller), its function, record and blob."""
    assert group.artifact is not None
    function = onnx.FunctionProto(name=group.label, domain=CONTEXT_DOMAIN)
    function.input.extend(group.inputs)
    function.output.extend(group.outputs)
    function.node.extend(node for i in sorted(group.nodes) for node in per_node[i])
    function.opset_import.extend(op for op in proto.opset_import if op.domain != CONTEXT_DOMAIN)
    function.attribute.extend(ATTRIBUTES)
    function.doc_string = f"nodes of the group {group.label!r} compiled by {group.provider}; run when the blob is not"
    blob = group.artifact.blob
    record = ContextRecord(provider=group.provider, provider_version=version[0], sdk_api=version[1],
                           format=group.artifact.format, label=group.label, blob_size=len(blob),
                           blob_sha256=sha256(blob), group_sha256=group_digest(function),
                           target=group.artifact.target, options=dict(group.artifact.options))
    node = onnx.NodeProto(op_type=group.label, domain=CONTEXT_DOMAIN, name=f"epoxy_context/{group.label}")
    node.input.extend(group.inputs)
    node.output.extend(group.outputs)
    return node, function, record, blob


def _reorder(graph: onnx.GraphProto, per_node: list[list[onnx.NodeProto]], units: Sequence[Any],
             calls: dict[str, onnx.NodeProto]) -> None:
    """The graph's nodes in the plan's unit order (topological), each exported group as its call."""
    ordered: list[onnx.NodeProto] = []
    for unit in units:
        call = calls.get(unit.label) if unit.fused else None
        if call is not None:
            ordered.append(call)
        else:
            ordered.extend(node for i in unit.nodes for node in per_node[i])
    del graph.node[:]
    graph.node.extend(ordered)


def _finish(proto: onnx.ModelProto, session: Any, per_node: list[list[onnx.NodeProto]], groups: list[dict[str, Any]],
            kept: list[dict[str, Any]]) -> None:
    """Opset, IR version and the metadata record (partition plan included)."""
    if groups and not any(op.domain == CONTEXT_DOMAIN for op in proto.opset_import):
        proto.opset_import.append(onnx.helper.make_opsetid(CONTEXT_DOMAIN, 1))
    proto.ir_version = max(proto.ir_version, MIN_IR_VERSION)
    report = session.partition_report()
    record = {"format_version": FORMAT_VERSION, "epoxy_version": __version__, "sdk_api": SDK_API,
              "optimization_level": str(session.get_session_options().optimization_level),
              "providers": [name for name, _ in session._providers],
              "provider_versions": {name: _factory(session, name)[0] for name, _ in session._providers},
              "groups": [{k: g[k] for k in ("label", "provider", "provider_version", "nodes", "blob_bytes", "format",
                                            "target")} for g in groups],
              "kept": kept,
              "partition": {node.name: d.provider for d, protos in zip(report.nodes, per_node) for node in protos},
              "declined": {protos[-1].name: [list(pair) for pair in d.declined]
                           for d, protos in zip(report.nodes, per_node) if d.declined}}
    entries = [p for p in proto.metadata_props if p.key != METADATA_KEY]
    del proto.metadata_props[:]
    proto.metadata_props.extend(entries)
    proto.metadata_props.append(onnx.StringStringEntryProto(key=METADATA_KEY, value=json.dumps(record)))


def _save(proto: onnx.ModelProto, out: Path) -> None:
    try:
        onnx.save(proto, str(out))
    except ValueError:  # over protobuf's 2 GiB: weights in a side file
        onnx.save(proto, str(out), save_as_external_data=True, location=out.name + ".data")

