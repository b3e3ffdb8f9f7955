"""Reading a compiled model: context nodes back into the groups' nodes, blobs checked.

:class:`CompiledModelReader` is handed to the loader, which calls :meth:`expand` on the
protobuf before checking it. Each context node is replaced by the nodes its function keeps,
and becomes a :class:`PinnedGroup`: the provider, version and node names the blob was
compiled for, and the blob when it is whole (size, sha256) and the kept nodes are the ones
it was compiled from. Whether the blob is *used* is decided later, per session, by
:mod:`epoxy.aot.providers`; every reason it is not ends up in the partition report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import onnx

from ..contract import CompiledArtifact
from ..errors import ModelLoadError
from .blobs import StaleBlob, read_blob
from .format import (
    CONTEXT_DOMAIN,
    FORMAT_VERSION,
    ContextRecord,
    RecordError,
    from_attributes,
    group_digest,
    read_metadata,
)
from .signing import verify


@dataclass
class PinnedGroup:
    """One compiled group of the model as read: ``artifact`` is ``None`` when it cannot be
    used, ``reason`` then says why (the group is compiled again, or runs elsewhere)."""

    label: str
    provider: str
    provider_version: str
    nodes: tuple[str, ...]
    artifact: CompiledArtifact | None
    reason: str = ""
    record: ContextRecord | None = None


@dataclass
class CompiledModelReader:
    """Expands a compiled model's context nodes (see the module docstring)."""

    groups: list[PinnedGroup] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    metadata: dict | None = None
    #: True once a compiled model was expanded whole: its graph is already optimized and typed
    compiled: bool = False

    @staticmethod
    def file_backed(graph: onnx.GraphProto) -> set[str]:
        """Initializers only context nodes read: their groups' blobs replace them, so the
        loader leaves them in the mapped file (copied only if a group is compiled again)."""
        called = {name for node in graph.node if node.domain == CONTEXT_DOMAIN for name in node.input}
        if not called:
            return set()
        elsewhere = {name for node in graph.node if node.domain != CONTEXT_DOMAIN for name in _reads(node)}
        elsewhere.update(v.name for v in graph.output)
        return (called - elsewhere) & {t.name for t in graph.initializer}

    @staticmethod
    def is_compiled(proto: onnx.ModelProto) -> bool:
        """Whether ``proto`` has anything :meth:`expand` would read (cheap: metadata, domains)."""
        return read_metadata(proto) is not None or any(n.domain == CONTEXT_DOMAIN for n in proto.graph.node)

    def expand(self, proto: onnx.ModelProto, base_dir: Path | None, source: str) -> bool:
        """Replace the context nodes of ``proto`` in place; True when the model is an epoxy
        compiled model whose every value is typed (shape inference and the optimizer may be
        skipped). Paths that leave the model's folder are a :class:`ModelLoadError`."""
        self.metadata = read_metadata(proto)
        calls = [node for node in proto.graph.node if node.domain == CONTEXT_DOMAIN]
        if self.metadata is None and not calls:
            return False
        version = (self.metadata or {}).get("format_version")
        if version != FORMAT_VERSION:
            self.notes.append(f"{source}: compiled-model layout {version!r} is not the {FORMAT_VERSION} this epoxy "
                              "reads: its groups run from the nodes the model keeps")
            return False
        functions = {(f.domain, f.name): f for f in proto.functions}
        kept: list[onnx.NodeProto] = []
        expanded: set[tuple[str, str]] = set()
        left_as_calls: set[tuple[str, str]] = set()
        for node in proto.graph.node:
            if node.domain != CONTEXT_DOMAIN:
                kept.append(node)
                continue
            key = (node.domain, node.op_type)
            where = f"{source}: context node {node.name or node.op_type!r}"
            function = functions.get(key)
            if function is None:
                raise ModelLoadError(f"{where} calls function {CONTEXT_DOMAIN}::{node.op_type}, which the model "
                                     "does not define (the group's kept nodes are missing)")
            if list(node.input) != list(function.input) or list(node.output) != list(function.output):
                self.notes.append(f"{where}: its inputs/outputs differ from its function's; the call is inlined "
                                  "like any function and its blob is not used")
                kept.append(node)
                left_as_calls.add(key)
                continue
            self.groups.append(self._pinned(node, function, base_dir, where))
            kept.extend(function.node)
            expanded.add(key)
        del proto.graph.node[:]
        proto.graph.node.extend(kept)
        gone = expanded - left_as_calls
        remaining = [f for f in proto.functions if (f.domain, f.name) not in gone]
        del proto.functions[:]
        proto.functions.extend(remaining)
        self.compiled = not left_as_calls and _all_typed(proto.graph)
        return self.compiled

    def _pinned(self, node: onnx.NodeProto, function: onnx.FunctionProto, base_dir: Path | None,
                where: str) -> PinnedGroup:
        names = tuple(n.name for n in function.node)
        try:
            record, embedded = from_attributes(node)
        except RecordError as exc:
            return PinnedGroup(node.op_type, "", "", names, None, f"context node unreadable: {exc}")
        pinned = PinnedGroup(record.label, record.provider, record.provider_version, names, None, "", record)
        if len(set(names)) != len(names) or not all(names):
            pinned.reason = "the kept nodes need unique names"
        elif group_digest(function) != record.group_sha256:
            pinned.reason = "the kept nodes differ from the ones the blob was compiled from"
        else:
            try:
                blob = read_blob(record, embedded, base_dir, where)
            except StaleBlob as exc:
                pinned.reason = str(exc)
            else:
                trusted = verify(record.signed_fields(), record.signature)
                pinned.artifact = CompiledArtifact(record.format, blob, record.target, dict(record.options), trusted)
        return pinned


def _reads(node: onnx.NodeProto) -> list[str]:
    """Every name a node reads, the names its subgraphs mention included (outer-scope reads)."""
    names = list(node.input)
    for attr in node.attribute:
        for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
            for inner in sub.node:
                names.extend(_reads(inner))
    return names


def _all_typed(graph: onnx.GraphProto) -> bool:
    """Every node output has a declared type (value_info or a graph output)."""
    typed = {v.name for v in graph.value_info if v.type.HasField("tensor_type") or v.type.ByteSize()}
    typed.update(v.name for v in graph.output)
    return all(not name or name in typed for node in graph.node for name in node.output)
