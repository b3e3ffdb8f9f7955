"""What the loader refuses, repairs or only warns about in a model onnx.checker rejects.

onnxruntime loads many models the checker complains about (IR-3 initializers that are not
graph inputs, unsorted nodes, a missing opset import, a deprecated op...). epoxy does the
same, with a warning, and refuses only what would be unsafe or ambiguous to run, saying
why: a value written twice, a value nobody writes, a cycle, two different declarations of
one input or initializer, initializer data that does not fit its dims, a node its schema
does not allow (an unknown attribute would be ignored silently, e.g. ``axes`` on
ReduceSum-13), a model that imports no opset or has a newer IR version than onnx reads.

Repairs are made on the protobuf before shape inference and the IR see it, so no later
stage needs to know about them; each returns a note the session shows as a warning.
Declarations that disagree with what the nodes produce (value_info, graph output types)
give way to the produced types (``settle_declared_types``), so kernels never see a type
their node does not produce.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import onnx

from ..errors import InvalidGraphError, ModelLoadError
from ..graph.names import FreshNames
from ..kit.ordering import stable_topological_order
from ..run.limits import item_size

#: domain names that mean the default ONNX domain
_DEFAULT_DOMAINS = ("", "ai.onnx")
#: at most this many names are listed in one message
_SHOWN = 5


def _domain(name: str) -> str:
    return "" if name in _DEFAULT_DOMAINS else name


def _shown(names: list[str]) -> str:
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return ", ".join(repr(n) for n in names[:_SHOWN]) + more


def _label(node: onnx.NodeProto, index: int) -> str:
    return f"{node.name!r} ({node.op_type})" if node.name else f"#{index} ({node.op_type}, unnamed)"


def _subgraphs(attr: onnx.AttributeProto) -> list[onnx.GraphProto]:
    if attr.type == onnx.AttributeProto.GRAPH:
        return [attr.g]
    if attr.type == onnx.AttributeProto.GRAPHS:
        return list(attr.graphs)
    return []


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in _subgraphs(attr):
                yield from _all_nodes(sub)


# -- opset imports and IR version ---------------------------------------------------------------
def newest_opset(domain: str) -> int:
    """The newest version of ``domain`` this onnx knows (1 for domains it does not know):
    what onnxruntime assumes for a domain the model uses but does not import."""
    if _domain(domain) == "":
        return onnx.defs.onnx_opset_version()
    versions = [s.since_version for s in onnx.defs.get_all_schemas_with_history() if s.domain == domain]
    return max(versions, default=1)


def _fill_opset_imports(proto: onnx.ModelProto, source: str, notes: list[str], repair: bool) -> None:
    used: dict[str, str] = {}  # domain -> first node using it
    for node in _all_nodes(proto.graph):
        used.setdefault(_domain(node.domain), node.name or node.op_type)
    if not used:
        return
    if not proto.opset_import:
        raise ModelLoadError(
            f"{source}: the model imports no opset (opset_import is empty), so which version of each operator "
            "its nodes mean is unknown; refused (onnxruntime refuses it too)")
    imported = {_domain(o.domain) for o in proto.opset_import}
    for domain, first in used.items():
        if domain in imported:
            continue
        version = newest_opset(domain)
        if repair:
            proto.opset_import.append(onnx.helper.make_opsetid(domain, version))
        notes.append(
            f"{source}: node {first!r} uses domain {domain or 'ai.onnx'!r}, which the model does not import "
            f"(no opset_import entry); read as version {version}, the newest this onnx knows, as onnxruntime "
            "reads it")


def _legacy_initializers(proto: onnx.ModelProto, source: str, notes: list[str], repair: bool) -> None:
    """IR < 4 requires every initializer to be a graph input; onnxruntime loads such models
    when they are not, and never lets a feed override an initializer of an IR < 4 model.
    Read as IR 4 with the initializers as constants, which means exactly that."""
    graph = proto.graph
    if not 0 < proto.ir_version < 4:
        return
    declared = {v.name for v in graph.input}
    missing = [t.name for t in graph.initializer if t.name not in declared]
    if not missing:
        return  # a valid IR-3 layout: the optimizer's LegacyInitializerInputsPass handles it
    notes.append(
        f"{source}: IR version {proto.ir_version} model with initializers that are not graph inputs "
        f"({_shown(missing)}): read as IR version 4 with its initializers as constants, as onnxruntime reads it")
    if repair:
        names = {t.name for t in graph.initializer}
        kept = [v for v in graph.input if v.name not in names]
        del graph.input[:]
        graph.input.extend(kept)
        proto.ir_version = 4


# -- one graph: definitions, order, names -------------------------------------------------------
def _tensor_type_text(elem_type: int, dims: list[Any]) -> str:
    try:
        name = onnx.helper.tensor_dtype_to_string(elem_type).removeprefix("TensorProto.").lower()
    except (KeyError, ValueError, TypeError):
        name = f"type {elem_type}"
    return f"{name} {dims}"


def _declared_dims(vi: onnx.ValueInfoProto) -> list[Any] | None:
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]


def _check_initializer_declaration(vi: onnx.ValueInfoProto, tensor: onnx.TensorProto, where: str) -> None:
    """A graph input that is also an initializer must declare what the initializer holds."""
    if not vi.type.HasField("tensor_type"):
        return
    declared_type = vi.type.tensor_type.elem_type
    dims = _declared_dims(vi)
    actual = list(tensor.dims)
    clash = bool(declared_type) and bool(tensor.data_type) and declared_type != tensor.data_type
    if dims is not None:
        clash = clash or len(dims) != len(actual) or any(
            isinstance(d, int) and d != a for d, a in zip(dims, actual))
    if clash:
        raise InvalidGraphError(
            f"{where}: graph input {vi.name!r} is declared {_tensor_type_text(declared_type, dims or [])} but its "
            f"initializer holds {_tensor_type_text(tensor.data_type, actual)}: which one a run should use is "
            "ambiguous; refused (onnxruntime refuses it too)")


#: element types stored several to a byte (their raw size is left to onnx.checker.check_tensor)
_PACKED = frozenset(getattr(onnx.TensorProto, n) for n in ("INT4", "UINT4", "INT2", "UINT2", "FLOAT4E2M1",
                                                            "FLOAT6E2M3", "FLOAT6E3M2") if hasattr(onnx.TensorProto, n))


#: tensors whose dims and type need more bytes than this are checked when the loader reads
#: their data (protobuf copies a bytes field on every access from Python)
CHECKED_DATA_MAX_BYTES = 1 << 16


def _expected_bytes(tensor: onnx.TensorProto) -> int:
    return math.prod(tensor.dims) * (item_size(tensor.data_type) or 1)  # unknown types: 1 byte


def _data_problem(tensor: onnx.TensorProto) -> str | None:
    """Why ``tensor``'s data does not fit its dims and type, or None (also for tensors over
    :data:`CHECKED_DATA_MAX_BYTES`, left to the loader)."""
    if _expected_bytes(tensor) > CHECKED_DATA_MAX_BYTES:
        return None
    if tensor.HasField("raw_data") and tensor.data_type not in _PACKED and tensor.data_type != onnx.TensorProto.STRING:
        itemsize = item_size(tensor.data_type)  # None: an unknown element type, the checker says which
        if itemsize:
            need = math.prod(tensor.dims) * itemsize
            if len(tensor.raw_data) != need:
                return f"{len(tensor.raw_data)} bytes of data where dims {list(tensor.dims)} need {need}"
            return None
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = onnx.IR_VERSION
    try:
        onnx.checker.check_tensor(tensor, ctx)
    except onnx.checker.ValidationError as exc:
        return " ".join(str(exc).split())
    return None


def _same_tensor(a: onnx.TensorProto, b: onnx.TensorProto) -> bool:
    return a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


class _GraphVetter:
    """Checks one graph (and, recursively, its subgraphs) and repairs what is safe to repair."""

    def __init__(self, source: str, notes: list[str], unverifiable: frozenset[str], repair: bool) -> None:
        self.source = source
        self.notes = notes
        self.unverifiable = unverifiable  # initializer names whose data is not in the proto
        self.repair = repair  # False: only find what would be repaired (notes), change nothing

    def refuse(self, where: str, why: str, node: str | None = None) -> InvalidGraphError:
        return InvalidGraphError(f"{self.source}: {where}: {why}", node=node)

    def vet(self, graph: onnx.GraphProto, outer: frozenset[str], where: str) -> set[str]:
        """Check ``graph``; returns the names it reads from ``outer`` (the enclosing scopes)."""
        defined = self._inputs_and_initializers(graph, where)
        producers: dict[str, int] = {}
        for index, node in enumerate(graph.node):
            for name in node.output:
                if not name:
                    continue
                if name in defined:
                    raise self.refuse(where, f"node {_label(node, index)} writes {name!r}, which is also "
                                      f"{defined[name]}: two definitions of one value are ambiguous", node.name)
                if name in producers:
                    first = producers[name]
                    raise self.refuse(where, f"value {name!r} is written by two nodes, "
                                      f"{_label(graph.node[first], first)} and {_label(node, index)}: "
                                      "which one its readers get is ambiguous", node.name)
                producers[name] = index
        visible = outer | frozenset(defined) | frozenset(producers)
        free: set[str] = set()
        after: list[set[int]] = [set() for _ in graph.node]  # node -> nodes it must run after
        ordered = True  # no node reads a later node's output (then there is no cycle either)
        for index, node in enumerate(graph.node):
            reads = [n for n in node.input if n]
            for attr in node.attribute:
                for sub in _subgraphs(attr):
                    inner = f"{where} > subgraph {attr.name!r} of node {_label(node, index)}"
                    reads.extend(sorted(self.vet(sub, visible, inner)))
            for name in reads:
                if name in producers:
                    if producers[name] == index:
                        raise self.refuse(where, f"node {_label(node, index)} reads its own output {name!r}: "
                                          "a cycle, the graph cannot run in any order", node.name)
                    after[index].add(producers[name])
                    ordered = ordered and producers[name] < index
                elif name in defined:
                    continue
                elif name in outer:
                    free.add(name)
                else:
                    raise self.refuse(where, f"node {_label(node, index)} reads {name!r}, which no graph "
                                      "input, initializer or node defines", node.name)
        if not ordered:  # the file's order is already topological in most models: nothing to sort
            self._sort(graph, after, where)
        for out in graph.output:
            if out.name in producers or out.name in defined:
                continue
            if out.name in outer:
                free.add(out.name)
                continue
            raise self.refuse(where, f"graph output {out.name!r} is not written by any node, nor a graph input "
                              "or initializer")
        self._unique_node_names(graph, where)
        return free

    def _inputs_and_initializers(self, graph: onnx.GraphProto, where: str) -> dict[str, str]:
        defined: dict[str, str] = {}
        declared: dict[str, onnx.ValueInfoProto] = {}
        for vi in graph.input:
            if vi.name in declared:
                raise self.refuse(where, f"graph input {vi.name!r} is declared twice: which declaration a feed "
                                  "must match is ambiguous")
            declared[vi.name] = vi
            defined[vi.name] = "a graph input"
        seen: dict[str, onnx.TensorProto] = {}
        repeated: list[str] = []
        for tensor in graph.initializer:
            problem = None if tensor.name in self.unverifiable else _data_problem(tensor)
            if problem is not None:
                raise self.refuse(where, f"initializer {tensor.name!r} has {problem}: its data does not fit its "
                                  "dims and type")
            first = seen.get(tensor.name)
            if first is None:
                seen[tensor.name] = tensor
                continue
            if tensor.name in self.unverifiable or not _same_tensor(first, tensor):
                raise self.refuse(where, f"initializer {tensor.name!r} is defined twice with different values: "
                                  "which one the model means is ambiguous")
            repeated.append(tensor.name)
        if repeated and self.repair:
            kept = list(seen.values())
            del graph.initializer[:]
            graph.initializer.extend(kept)
        if repeated:
            self.notes.append(f"{self.source}: {where}: initializers {_shown(repeated)} are defined more than "
                              "once with the same value; kept one of each")
        for name, tensor in seen.items():
            if name in declared:
                _check_initializer_declaration(declared[name], tensor, f"{self.source}: {where}")
            defined.setdefault(name, "an initializer")
        return defined

    def _sort(self, graph: onnx.GraphProto, after: list[set[int]], where: str) -> None:
        """Order the nodes topologically (stable: the file's order wherever it is valid)."""
        order = stable_topological_order(after)
        if len(order) < len(graph.node):
            raise self._cycle(graph, after, set(range(len(graph.node))) - set(order), where)
        if order == list(range(len(graph.node))):
            return
        late = next(i for i, deps in enumerate(after) if any(d > i for d in deps))
        early = max(d for d in after[late] if d > late)
        value = next((n for n in graph.node[early].output if n and n in _reads(graph.node[late])), "?")
        reader, writer = _label(graph.node[late], late), _label(graph.node[early], early)
        if self.repair:
            copies = [onnx.NodeProto() for _ in order]
            for copy, index in zip(copies, order):
                copy.CopyFrom(graph.node[index])
            del graph.node[:]
            graph.node.extend(copies)
        self.notes.append(
            f"{self.source}: {where}: nodes are not in topological order (node {reader} reads {value!r} before "
            f"node {writer} writes it); they run sorted, as in onnxruntime")

    def _cycle(self, graph: onnx.GraphProto, after: list[set[int]], stuck: set[int], where: str) -> InvalidGraphError:
        # drop nodes that merely wait on a cycle: what is left lies on one
        cyclic = set(stuck)
        changed = True
        while changed:
            changed = False
            for index in list(cyclic):
                if not any(index in after[u] for u in cyclic):
                    cyclic.discard(index)
                    changed = True
        members = sorted(cyclic) or sorted(stuck)
        values = sorted({n for i in members for n in graph.node[i].output if n
                         and any(n in _reads(graph.node[u]) for u in members)})
        labels = [_label(graph.node[i], i) for i in members[:_SHOWN]]
        return self.refuse(where, f"nodes {', '.join(labels)} form a cycle through values {_shown(values)}: "
                           "the graph cannot run in any order", graph.node[members[0]].name)

    def _unique_node_names(self, graph: onnx.GraphProto, where: str) -> None:
        names = FreshNames({n.name for n in graph.node if n.name})
        seen: set[str] = set()
        renamed: list[str] = []
        for node in graph.node:
            if not node.name:
                continue
            if node.name in seen:
                new = names(node.name)
                renamed.append(f"{node.name!r} -> {new!r}")
                if self.repair:
                    node.name = new
                seen.add(new)
                continue
            seen.add(node.name)
        if renamed:
            self.notes.append(f"{self.source}: {where}: node names used by more than one node; later ones renamed "
                              f"({', '.join(renamed[:_SHOWN])}{' ...' if len(renamed) > _SHOWN else ''}); node "
                              "names are labels only")


def _reads(node: onnx.NodeProto) -> set[str]:
    """Names ``node`` reads explicitly (enough to name the value in an ordering message)."""
    return {n for n in node.input if n} | {n for attr in node.attribute for sub in _subgraphs(attr)
                                           for inner in _all_nodes(sub) for n in inner.input if n}


def _vet_function(function: onnx.FunctionProto, vetter: _GraphVetter) -> None:
    """A model-local function's body is a graph whose inputs are the function's inputs."""
    body = onnx.GraphProto(name=function.name)
    body.node.extend(function.node)
    body.input.extend(onnx.ValueInfoProto(name=n) for n in function.input)
    body.output.extend(onnx.ValueInfoProto(name=n) for n in function.output)
    repair, vetter.repair = vetter.repair, True  # `body` is a copy: repairing it changes nothing yet
    try:
        vetter.vet(body, frozenset(), f"function {function.domain}::{function.name}")
    finally:
        vetter.repair = repair
    if repair:
        del function.node[:]
        function.node.extend(body.node)


def vet_model(proto: onnx.ModelProto, source: str, unverifiable: frozenset[str] = frozenset(),
              repair: bool = True) -> list[str]:
    """Refuse what is unsafe or ambiguous to run (:class:`InvalidGraphError` naming the value
    and why), repair what onnxruntime reads in one unambiguous way; returns a note per
    repair. ``unverifiable``: initializers whose data is not in ``proto`` (memory-mapped);
    ``repair=False``: change nothing, only return the notes (empty: nothing to repair)."""
    notes: list[str] = []
    _fill_opset_imports(proto, source, notes, repair)
    _legacy_initializers(proto, source, notes, repair)
    vetter = _GraphVetter(source, notes, unverifiable, repair)
    for function in proto.functions:
        _vet_function(function, vetter)
    vetter.vet(proto.graph, frozenset(), "main graph")
    return notes


# -- nodes against their schemas -----------------------------------------------------------------
#: checker complaints about a node that are safe to run past: the op is deprecated (still
#: defined), or onnx does not know it (a provider may; if none does, the session says so)
_TOLERATED_NODE_COMPLAINTS = ("is deprecated in domain_version", "No Op registered for")


def _without_subgraphs(node: onnx.NodeProto) -> onnx.NodeProto:
    """``node`` with each graph attribute emptied: check_node would check the bodies too,
    and their nodes are checked one by one."""
    if not any(_subgraphs(a) for a in node.attribute):
        return node
    bare = onnx.NodeProto()
    bare.CopyFrom(node)
    for attr in bare.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            attr.g.CopyFrom(onnx.GraphProto(name="body"))
        elif attr.type == onnx.AttributeProto.GRAPHS:
            del attr.graphs[:]
            attr.graphs.add(name="body")
    return bare


def vet_nodes(proto: onnx.ModelProto, source: str, known: str = "") -> list[str]:
    """Check every node against its schema: refuse a node that breaks it (an unknown or
    mistyped attribute, a missing required attribute, too many or too few inputs: running it
    would ignore or misread part of it); returns notes for deprecated and unknown ops, but
    not for a complaint already in ``known`` (the checker's message, shown already)."""
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = proto.ir_version or onnx.IR_VERSION
    ctx.opset_imports = {_domain(o.domain): o.version for o in proto.opset_import}
    notes: list[str] = []
    tolerated: set[str] = set()

    def complaint(exc: Exception, what: str, node: str | None) -> None:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if not any(t in message for t in _TOLERATED_NODE_COMPLAINTS):
            raise InvalidGraphError(
                f"{source}: {what} does not match its schema (onnx.checker: {message}): running it would ignore "
                "or misread part of it; refused (onnxruntime refuses it too)", node=node) from exc
        if message not in tolerated and message not in known:
            tolerated.add(message)
            notes.append(f"{source}: {what}: onnx.checker: {message}; loaded anyway, as onnxruntime loads it")

    for index, node in enumerate(_all_nodes(proto.graph)):
        try:
            onnx.checker.check_node(_without_subgraphs(node), ctx)
        except onnx.checker.ValidationError as exc:
            complaint(exc, f"node {_label(node, index)}", node.name)
    for function in proto.functions:
        try:
            onnx.checker.check_function(function, ctx)
        except onnx.checker.ValidationError as exc:
            complaint(exc, f"a node of function {function.domain}::{function.name}", None)
    return notes


# -- declared types against inferred ones ----------------------------------------------------------
def _dims(tt: Any) -> list[int | None] | None:
    if not tt.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]


def _clash(declared: onnx.TypeProto, inferred: onnx.TypeProto) -> str | None:
    """"type" when the element types differ, "shape" when the shapes do, else None."""
    if not (declared.HasField("tensor_type") and inferred.HasField("tensor_type")):
        return None
    d, i = declared.tensor_type, inferred.tensor_type
    if d.elem_type and i.elem_type and d.elem_type != i.elem_type:
        return "type"
    dd, di = _dims(d), _dims(i)
    if dd is None or di is None:
        return None
    if len(dd) != len(di) or any(a is not None and b is not None and a != b for a, b in zip(dd, di)):
        return "shape"
    return None


def _text(t: onnx.TypeProto) -> str:
    tt = t.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]
    return _tensor_type_text(tt.elem_type, dims if tt.HasField("shape") else [])


def _merged_shape(declared: onnx.TensorShapeProto, produced: onnx.TensorShapeProto) -> onnx.TensorShapeProto:
    """The produced shape, with the declared dimension wherever inference left one unknown."""
    if len(declared.dim) != len(produced.dim):
        return produced
    merged = onnx.TensorShapeProto()
    for d, p in zip(declared.dim, produced.dim):
        merged.dim.add().CopyFrom(p if p.HasField("dim_value") or not (d.HasField("dim_value") or d.dim_param) else d)
    return merged


def settle_declared_types(view: onnx.ModelProto, source: str, inferred: onnx.ModelProto) -> list[str]:
    """Compare the main graph's declared value_info and output types with ``inferred`` (shape
    inference over ``view`` without them) and keep what the nodes produce: a run returns
    that, and kernels that read their output type must not see another. A value_info that
    disagrees is dropped; an output that disagrees takes the produced type and shape, which
    ``get_outputs()`` then reports (onnxruntime does so for a shape; it refuses a model
    whose output or value_info element type disagrees). Returns a note for each."""
    found = {vi.name: vi.type for vi in (*inferred.graph.value_info, *inferred.graph.output)}
    notes: list[str] = []
    graph = view.graph
    kept = []
    for vi in graph.value_info:
        other = found.get(vi.name)
        if other is None or _clash(vi.type, other) is None:
            kept.append(vi)
            continue
        notes.append(f"{source}: value_info of {vi.name!r} declares {_text(vi.type)} but its node produces "
                     f"{_text(other)}; the declaration is ignored")
    if len(kept) != len(graph.value_info):
        copies = [onnx.ValueInfoProto() for _ in kept]
        for copy, vi in zip(copies, kept):
            copy.CopyFrom(vi)
        del graph.value_info[:]
        graph.value_info.extend(copies)
    for out in graph.output:
        other = found.get(out.name)
        clash = None if other is None else _clash(out.type, other)
        if other is None or clash is None:
            continue
        what = "type" if clash == "type" else "shape"
        notes.append(f"{source}: graph output {out.name!r} is declared {_text(out.type)} but its node produces "
                     f"{_text(other)}; a run returns what the node produces and get_outputs() reports its {what}")
        declared = out.type.tensor_type
        produced = other.tensor_type
        shape = _merged_shape(declared.shape, produced.shape) if produced.HasField("shape") else None
        if clash == "type":
            declared.elem_type = produced.elem_type
        if shape is not None:
            declared.shape.CopyFrom(shape)
    return notes
