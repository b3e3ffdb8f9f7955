"""Opset imports for an exported node group: one version per domain, valid for every node.

An ONNX model imports one version per domain (model-local functions must agree with it),
but a session's graph mixes versions: nodes fused by optimizer passes carry a newer
``version`` (Gelu 20, LayerNormalization 17 in an opset-13 model) and nodes inlined from
functions carry the function's. A group is exported at the highest version its nodes
need. A node whose schema changed between its own version and that one is rewritten by
onnx's version converter (ReduceMean-13's ``axes`` attribute becomes an input at 18):
left as it is, a compiler would read it with the new schema and silently compute
something else (OpenVINO reduces over every axis). Nothing is converted when the group
holds a single version per domain, the common case.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import onnx
import onnx_ir as ir
from onnx import helper, version_converter

from ..errors import EpoxyError

if TYPE_CHECKING:
    from .graph_spec import CoreGraph

#: prefix of value names the version converter adds (Constant nodes holding former attributes)
CONVERTED_PREFIX = "epoxy_opset/"


class SubgraphExportError(EpoxyError, ValueError):
    """A node group cannot be written as one valid ONNX model (names the node and versions)."""


@lru_cache(maxsize=8192)
def _since(op_type: str, domain: str, version: int) -> int | None:
    """``since_version`` of the schema ``op_type`` resolves to at ``version``; None if unknown."""
    try:
        return onnx.defs.get_schema(op_type, version, domain).since_version
    except Exception:  # noqa: BLE001 - custom domain, unknown op or version
        return None


def _nested(node: ir.Node) -> Iterator[ir.Node]:
    """Nodes inside the node's graph attributes, at any depth."""
    for attr in node.attributes.values():
        graphs = (attr.value,) if attr.type == ir.AttributeType.GRAPH else (
            tuple(attr.value) if attr.type == ir.AttributeType.GRAPHS else ())
        for sub in graphs:
            for inner in sub:
                yield inner
                yield from _nested(inner)


def _uses(graph: CoreGraph, order: Sequence[int]) -> list[tuple[int, str, str, int]]:
    """(position in ``order``, domain, op, version) of every node, subgraph nodes included
    (a subgraph node without its own version reads the model's import)."""
    uses: list[tuple[int, str, str, int]] = []
    for pos, i in enumerate(order):
        spec = graph.nodes[i]
        uses.append((pos, spec.domain, spec.op_type, spec.opset))
        for inner in _nested(graph.ir_nodes[i]):
            domain = "" if inner.domain in ("", "ai.onnx") else inner.domain
            version = inner.version if inner.version is not None else graph.opsets.get(domain)
            if version is not None:
                uses.append((pos, domain, inner.op_type, version))
    return uses


def plan_opsets(graph: CoreGraph, order: Sequence[int]) -> tuple[dict[str, int], dict[int, int]]:
    """(version to import per domain, {position: source version} of nodes to convert).

    Domains the group does not use keep the model's import."""
    uses = _uses(graph, order)
    needed: dict[str, int] = {}
    for _, domain, _, version in uses:
        needed[domain] = max(needed.get(domain, version), version)
    target = {**graph.opsets, **needed}
    stale: dict[int, int] = {}
    for pos, domain, op, version in uses:
        if version != target[domain] and _since(op, domain, version) != _since(op, domain, target[domain]):
            if domain != "":
                raise SubgraphExportError(
                    f"node {graph.nodes[order[pos]].name!r} ({domain}::{op}-{version}) cannot be exported "
                    f"at {domain} opset {target[domain]}, which other nodes of the group need"
                )
            stale[pos] = graph.nodes[order[pos]].opset
    return target, stale


def convert_nodes(protos: Sequence[onnx.NodeProto], source: int, target: int, used: set[str],
                  value_info: Callable[[str], onnx.ValueInfoProto]) -> list[list[onnx.NodeProto]]:
    """Default-domain nodes written for opset ``source``, rewritten for ``target``: for each
    node, the nodes replacing it (the converter may add Constant nodes before it). Added
    values get fresh names outside ``used`` (which grows); ``value_info`` types the values
    the nodes read (adapters building constants need their dtypes)."""
    marked = []
    for k, proto in enumerate(protos):
        copy = onnx.NodeProto()
        copy.CopyFrom(proto)
        copy.name = f"{CONVERTED_PREFIX}{k}"
        marked.append(copy)
    produced = [o for n in marked for o in n.output if o]
    made = set(produced)
    read = list(dict.fromkeys(i for n in marked for i in n.input if i and i not in made))
    read += [n for n in dict.fromkeys(_outer_reads(marked)) if n not in made and n not in read]
    model = helper.make_model(
        helper.make_graph(marked, "epoxy_convert", [value_info(n) for n in read],
                          [helper.make_empty_tensor_value_info(n) for n in produced]),
        opset_imports=[helper.make_opsetid("", source)],
    )
    names = ", ".join(f"{p.name or p.op_type} ({p.op_type})" for p in protos[:4])
    try:
        converted = version_converter.convert_version(model, target)
    except Exception as exc:
        raise SubgraphExportError(
            f"cannot rewrite node(s) {names} from opset {source} to {target}, the version other nodes "
            f"of the group need: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        ) from exc
    known = set(read) | set(produced)
    renamed: dict[str, str] = {}
    result: list[list[onnx.NodeProto]] = [[] for _ in protos]
    pending: list[onnx.NodeProto] = []
    for node in converted.graph.node:
        _rename_added(node, known, renamed, used)
        if node.name.startswith(CONVERTED_PREFIX):
            k = int(node.name[len(CONVERTED_PREFIX):])
            node.name = protos[k].name
            result[k] = [*pending, node]
            pending = []
        else:
            pending.append(node)
    if pending or converted.graph.initializer or any(not r for r in result):
        raise SubgraphExportError(f"converting node(s) {names} from opset {source} to {target} "
                                  "changed them beyond recognition")
    return result


def _outer_reads(nodes: Sequence[onnx.NodeProto]) -> list[str]:
    """Names subgraph attributes read from the enclosing scope (declared as inputs)."""
    found: list[str] = []
    for node in nodes:
        for attr in node.attribute:
            for g in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                defined = {v.name for v in g.input} | {t.name for t in g.initializer}
                for inner in g.node:
                    found += [i for i in inner.input if i and i not in defined]
                    found += [n for n in _outer_reads([inner]) if n not in defined]
                    defined.update(inner.output)
    return found


def _rename_added(node: onnx.NodeProto, known: set[str], renamed: dict[str, str], used: set[str]) -> None:
    """Give values the converter added (``_v_12``...) names no other value of the group has."""
    def fresh(name: str) -> str:
        if name not in renamed:
            k = len(renamed)
            while f"{CONVERTED_PREFIX}{k}" in used:
                k += 1
            renamed[name] = f"{CONVERTED_PREFIX}{k}"
            used.add(renamed[name])
        return renamed[name]

    for seq in (node.input, node.output):
        for j, name in enumerate(seq):
            if name and name not in known:
                seq[j] = fresh(name)
