"""Attribute values onnx's shape inference reads unchecked, refused before it runs.

onnx's C++ inference trusts a few attributes: a LayerNormalization ``axis`` of 2**31 or more
is cast to a negative ``int`` and indexes before the shape (a segfault: the whole process
dies), a GatherND ``batch_dims`` below 0 makes a negative dim index (same), a Split
``num_outputs`` of 2**31 sizes a vector of that many entries (minutes, then out of memory).
They were found by trying extreme values (huge, negative, wrapping at 2**31 and 2**32) of
every int attribute of every ONNX op on one-node models under onnx 1.23. Each check is the
spec's rule for its attribute, so a value refused here is one no runtime could run.

Ranks tighten the rules to the spec's ranges where they are known: before inference only
from what the model cannot get wrong (initializers and the main graph's inputs; a declared
``value_info`` may be wrong), after inference from the inferred types too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import chain

import onnx
import onnx_ir as ir

from ..errors import InvalidGraphError

_A = onnx.AttributeProto

#: the values an ``int`` attribute may take where onnx casts it to a C ``int``
INT32_RANGE = (-(1 << 31), 1 << 31)


@dataclass(frozen=True)
class NodeFacts:
    """What a check sees of a node: its int attributes (function references resolved) and
    the rank of each input (``None``: not known)."""

    ints: Mapping[str, int]
    ranks: tuple[int | None, ...]
    outputs: int

    def rank(self, index: int) -> int | None:
        return self.ranks[index] if index < len(self.ranks) else None


#: a check returns what is wrong (``None``: nothing)
Check = Callable[[NodeFacts], str | None]


def _outside(name: str, value: int, lo: int, hi: int, why: str) -> str | None:
    if lo <= value < hi:
        return None
    return f"attribute {name!r} = {value} is outside [{lo}, {hi - 1}]{why}"


def _axis(name: str, default: int) -> Check:
    """An axis of input 0: in [-rank, rank), or at least a C ``int`` when the rank is unknown."""
    def check(facts: NodeFacts) -> str | None:
        rank = facts.rank(0)
        if rank is None:
            return _outside(name, facts.ints.get(name, default), *INT32_RANGE, "")
        return _outside(name, facts.ints.get(name, default), -rank, rank, f" (input rank {rank})")
    return check


def _batch_dims(facts: NodeFacts) -> str | None:
    """GatherND: 0 <= batch_dims < min(rank of data, rank of indices)."""
    ranks = [r for r in (facts.rank(0), facts.rank(1)) if r is not None]
    hi = min(ranks) if ranks else INT32_RANGE[1]
    return _outside("batch_dims", facts.ints.get("batch_dims", 0), 0, max(hi, 1),
                    f" (input ranks {facts.ranks[:2]})" if ranks else "")


def _num_outputs(facts: NodeFacts) -> str | None:
    """Split: ``num_outputs``, when given, is the node's number of outputs."""
    if "num_outputs" not in facts.ints or facts.ints["num_outputs"] == facts.outputs:
        return None
    return f"attribute 'num_outputs' = {facts.ints['num_outputs']} differs from the node's {facts.outputs} outputs"


#: op type (ONNX domain) -> the check of the attributes its shape inference trusts
ATTRIBUTE_CHECKS: dict[str, Check] = {
    "LayerNormalization": _axis("axis", -1),
    "RMSNormalization": _axis("axis", -1),
    "GatherND": _batch_dims,
    "Split": _num_outputs,
}


def declared_rank(vi: onnx.ValueInfoProto) -> int | None:
    """The rank ``vi`` declares for a tensor, None when it declares none."""
    tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    return len(tt.shape.dim) if tt is not None and tt.HasField("shape") else None


def _ranks(graph: onnx.GraphProto, outer: Mapping[str, int], main: bool, inferred: bool) -> dict[str, int]:
    ranks = dict(outer)
    trusted: Iterable[onnx.ValueInfoProto] = ()
    if inferred:
        trusted = (*graph.input, *graph.value_info, *graph.output)
    elif main:
        trusted = graph.input
    for vi in trusted:
        rank = declared_rank(vi)
        if rank is not None:
            ranks[vi.name] = rank
    ranks.update((t.name, len(t.dims)) for t in graph.initializer)
    return ranks


def _ints(node: onnx.NodeProto, refs: Mapping[str, onnx.AttributeProto]) -> dict[str, int]:
    ints = {}
    for attr in node.attribute:
        value = refs.get(attr.ref_attr_name) if attr.ref_attr_name else attr
        if value is not None and value.type == _A.INT:
            ints[attr.name] = value.i
    return ints


class _GraphRanks:
    """A graph's value ranks (:func:`_ranks`), read on first use: most graphs hold no node
    :data:`ATTRIBUTE_CHECKS` reads them for, and the read walks every value_info (~1 ms a
    600-node model)."""

    def __init__(self, graph: onnx.GraphProto | None, outer: _GraphRanks | None, main: bool, inferred: bool) -> None:
        self._graph, self._outer, self._main, self._inferred = graph, outer, main, inferred
        self._ranks: Mapping[str, int] | None = None if graph is not None else {}

    def ranks(self) -> Mapping[str, int]:
        if self._ranks is None:
            outer = self._outer.ranks() if self._outer is not None else {}
            self._ranks = _ranks(self._graph, outer, self._main, self._inferred)  # type: ignore[arg-type]
        return self._ranks


def _problems(nodes: Iterable[onnx.NodeProto], ranks: _GraphRanks, refs: Mapping[str, onnx.AttributeProto],
              inferred: bool) -> Iterator[tuple[onnx.NodeProto, str]]:
    """(node, what is wrong) over ``nodes`` and the subgraphs inside them."""
    for node in nodes:
        check = ATTRIBUTE_CHECKS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if check is not None:
            known = ranks.ranks()
            facts = NodeFacts(_ints(node, refs), tuple(known.get(name) if name else None for name in node.input),
                              len(node.output))
            problem = check(facts)
            if problem is not None:
                yield node, problem
        for attr in node.attribute:
            kind = attr.type
            if kind in _GRAPH_KINDS:  # most attributes hold no graph: their lists are not read
                for sub in ([attr.g] if kind == _A.GRAPH else list(attr.graphs)):
                    yield from _problems(sub.node, _GraphRanks(sub, ranks, False, inferred), refs, inferred)


def _function_contexts(proto: onnx.ModelProto) -> Iterator[tuple[onnx.FunctionProto, dict[str, onnx.AttributeProto]]]:
    """Each local function with the attributes of each of its call sites (defaults filled),
    or its defaults alone when nothing calls it. A call inside another function body passes
    its own literal attributes (references through two levels of calls are not followed)."""
    if not proto.functions:  # the walk below costs ~10 ms on a 1700-node model: skip it when unused
        return
    calls: dict[tuple[str, str, str], list[onnx.NodeProto]] = {}
    stack: list[Iterable[onnx.NodeProto]] = [proto.graph.node, *(f.node for f in proto.functions)]
    while stack:
        for node in stack.pop():
            calls.setdefault((node.domain, node.op_type, node.overload), []).append(node)
            for attr in node.attribute:
                stack.extend([attr.g.node] if attr.type == _A.GRAPH else [g.node for g in attr.graphs])
    for function in proto.functions:
        defaults = {a.name: a for a in function.attribute_proto}
        sites = calls.get((function.domain, function.name, function.overload), [])
        if not sites:
            yield function, defaults
        for site in sites:
            yield function, {**defaults, **{a.name: a for a in site.attribute}}


#: attribute types that hold subgraphs (``g`` or ``graphs``)
_GRAPH_KINDS = frozenset({_A.GRAPH, _A.GRAPHS})

#: the domains whose nodes onnx's own inference functions read
_ONNX_DOMAINS = {"": "", "ai.onnx": "", "ai.onnx.ml": "ai.onnx.ml"}


def _schema_attribute_types(node: onnx.NodeProto, opsets: Mapping[str, int]) -> dict[str, int] | None:
    """The attribute types the spec declares for ``node`` at the model's opset (``None``: not
    an ONNX op onnx knows at that version)."""
    domain = _ONNX_DOMAINS.get(node.domain)
    version = opsets.get(domain) if domain is not None else None
    if domain is None or version is None:
        return None
    return _declared_types(node.op_type, version, domain)


@functools.lru_cache(maxsize=1024)
def _declared_types(op_type: str, version: int, domain: str) -> dict[str, int] | None:
    """Looked up once per (op, opset, domain): a model has thousands of nodes of a few ops."""
    try:
        schema = onnx.defs.get_schema(op_type, version, domain)
    except onnx.defs.SchemaError:
        return None
    return {name: int(attr.type) for name, attr in schema.attributes.items()}  # type: ignore[call-overload]  # AttrType is an int enum the stubs do not say


def _mistyped(nodes: Iterable[onnx.NodeProto], opsets: Mapping[str, int]) -> Iterator[tuple[onnx.NodeProto, str]]:
    """(node, what is wrong) for attributes whose type is not the one the spec declares:
    onnx's inference reads the declared field whatever the type says (a Split ``num_outputs``
    typed TYPE_PROTO but holding ``i`` aborts the process), and the checker that would refuse
    it may be off (``check_model="off"``)."""
    for node in nodes:
        attributes = node.attribute
        if not attributes:  # most nodes of an exported transformer (Add, MatMul, Shape...)
            continue
        declared = _schema_attribute_types(node, opsets)
        for attr in attributes:
            kind = attr.type
            if declared is not None and not attr.ref_attr_name and attr.name in declared \
                    and kind != declared[attr.name]:
                want = _A.AttributeType.Name(declared[attr.name])
                got = _A.AttributeType.Name(kind) if kind in _A.AttributeType.values() else str(kind)
                yield node, f"attribute {attr.name!r} has type {got}; the spec declares {want}"
            if kind in _GRAPH_KINDS:
                for sub in ([attr.g] if kind == _A.GRAPH else list(attr.graphs)):
                    yield from _mistyped(sub.node, opsets)


def _opsets(imports: Iterable[onnx.OperatorSetIdProto], outer: Mapping[str, int] | None = None) -> dict[str, int]:
    found = dict(outer or {})
    found.update((_ONNX_DOMAINS.get(o.domain, o.domain), o.version) for o in imports)
    return found


def check_attributes(proto: onnx.ModelProto, source: str, *, inferred: bool = False) -> None:
    """Refuse, with an :class:`InvalidGraphError` naming the node, the attribute, its value
    and the allowed range, what :data:`ATTRIBUTE_CHECKS` finds wrong anywhere in the model
    (subgraphs and function bodies too). ``inferred``: ``proto`` holds inferred types, whose
    ranks may be used."""
    in_graph = ((node, problem, "") for node, problem in
                _problems(proto.graph.node, _GraphRanks(proto.graph, None, True, inferred), {}, inferred))
    in_functions = ((node, problem, f" in function {function.name!r}")
                    for function, refs in _function_contexts(proto)
                    for node, problem in _problems(function.node, _GraphRanks(None, None, False, inferred), refs,
                                                   inferred))
    model_opsets = _opsets(proto.opset_import)
    # attribute types do not change with inference: checked on the first call only
    mistyped = iter(()) if inferred else chain(
        ((node, problem, "") for node, problem in _mistyped(proto.graph.node, model_opsets)),
        ((node, problem, f" in function {function.name!r}") for function in proto.functions
         for node, problem in _mistyped(function.node, _opsets(function.opset_import, model_opsets))))
    first = next(chain(mistyped, in_graph, in_functions), None)
    if first is not None:
        node, problem, where = first
        name = node.name or node.op_type
        raise InvalidGraphError(f"{source}: node {name!r} ({node.op_type}){where}: {problem}; refused before "
                                "onnx's shape inference reads it (it can crash the process on such values)",
                                node=name)


def ir_node_problem(node: ir.Node) -> str | None:
    """What :data:`ATTRIBUTE_CHECKS` finds wrong with an IR node (ranks from its inputs'
    shapes), for passes that run onnx's inference again after loading."""
    check = ATTRIBUTE_CHECKS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    if check is None:
        return None
    ints = {name: attr.value for name, attr in node.attributes.items()
            if not attr.is_ref() and attr.type == ir.AttributeType.INT}
    ranks = tuple(None if v is None or v.shape is None else v.shape.rank() for v in node.inputs)
    return check(NodeFacts(ints, ranks, len(node.outputs)))
