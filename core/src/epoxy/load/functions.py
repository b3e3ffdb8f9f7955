"""ONNX functions: inline model-local functions, expand ops nobody runs into their bodies.

Two kinds of functions reach the core:

- *model-local* functions (``FunctionProto`` in ``model.functions``): every call is
  replaced by the function's body, always, before optimization;
- *schema* functions: an op whose ONNX schema defines it as a function (Celu, Range,
  the losses, LayerNormalization, ...). When no provider claims such a node, it is
  replaced by its body (context-dependent bodies are built for the node's actual
  attributes and input types), recursively, until every node is claimed or nothing is
  left to expand.

An expansion names the nodes and values it creates after the node it replaces
(``MyCelu/Elu``...), so the partition report shows where each expanded node came from,
and value names stay unique in the graph.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any

import onnx
import onnx_ir as ir

from ..errors import InvalidGraphError, UnsupportedOpError
from ..graph.graph_spec import value_name
from ..graph.names import FreshNames

#: Upper bound on expansion rounds (a body may contain ops that expand again).
MAX_ROUNDS = 16

_SERDE_LOGGER = logging.getLogger("onnx_ir.serde")


# -- graph walking --------------------------------------------------------------------------
def _graphs_of(node: ir.Node) -> list[ir.Graph]:
    found: list[ir.Graph] = []
    for attr in node.attributes.values():
        if attr.type == ir.AttributeType.GRAPH:
            found.append(attr.value)
        elif attr.type == ir.AttributeType.GRAPHS:
            found.extend(attr.value)
    return found


def _walk(graph: ir.Graph) -> Iterable[tuple[ir.Graph, ir.Node]]:
    """(graph, node) for every node of ``graph`` and of its subgraphs, outer first."""
    for node in list(graph):
        yield graph, node
        for sub in _graphs_of(node):
            yield from _walk(sub)


def names_in(graph: ir.Graph) -> tuple[set[str], set[str]]:
    """(value names, node names) used anywhere in ``graph`` (subgraphs included)."""
    values: set[str] = {v.name for v in graph.inputs if v.name}
    values.update(graph.initializers)
    nodes: set[str] = set()
    for _, node in _walk(graph):
        if node.name:
            nodes.add(node.name)
        values.update(o.name for o in node.outputs if o.name)
        for sub in _graphs_of(node):
            values.update(v.name for v in sub.inputs if v.name)
            values.update(sub.initializers)
    return values, nodes


# -- function bodies ------------------------------------------------------------------------
def _pick_version(versions: Sequence[int], opset: int) -> int | None:
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def _type_proto(value: ir.Value | None) -> onnx.TypeProto:
    proto = onnx.TypeProto()
    if value is None or value.type is None:
        return proto
    try:
        ir.serde.serialize_type_into(proto, value.type)
        if value.shape is not None and isinstance(value.type, ir.TensorType):
            ir.serde.serialize_shape_into(proto, value.shape)
    except Exception:  # noqa: BLE001 - an unknown type just gives no context
        return onnx.TypeProto()
    return proto


def schema_function(node: ir.Node, opset: int) -> tuple[onnx.FunctionProto, dict[str, onnx.AttributeProto]] | None:
    """The schema's function body for ``node`` at ``opset`` plus the schema's attribute
    defaults, or ``None`` when the op is not defined as a function (or its body cannot be
    built, e.g. a context-dependent body without known input types)."""
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    try:
        # Any: the function-body methods used below are missing from onnx's type stubs
        schema: Any = onnx.defs.get_schema(node.op_type, opset, domain)
    except Exception:  # noqa: BLE001 - unknown op / domain: nothing to expand
        return None
    defaults = {
        name: attr.default_value
        for name, attr in schema.attributes.items()
        if attr.default_value is not None and attr.default_value.type != onnx.AttributeProto.UNDEFINED
    }
    body: bytes | None = None
    try:
        if schema.has_function:
            version = _pick_version(schema.function_opset_versions, opset)
            body = schema.get_function_with_opset_version(version) if version is not None else None
            if not body:
                body = schema.function_body.SerializeToString()
        elif schema.has_context_dependent_function:
            proto = ir.serde.serialize_node(node)
            present = {a.name for a in proto.attribute}
            proto.attribute.extend(d for n, d in defaults.items() if n not in present)
            types = [_type_proto(v).SerializeToString() for v in node.inputs]
            version = _pick_version(schema.context_dependent_function_opset_versions, opset)
            if version is not None:
                body = schema.get_context_dependent_function_with_opset_version(
                    version, proto.SerializeToString(), types)
            else:
                body = schema.get_context_dependent_function(proto.SerializeToString(), types)
    except Exception:  # noqa: BLE001 - the body builder rejected this node (types unknown...)
        return None
    if not body:
        return None
    function = onnx.FunctionProto()
    function.ParseFromString(body)
    if not function.node:
        return None
    return function, defaults


# -- instantiation ----------------------------------------------------------------------------
def _resolve_attrs(
    attrs: Iterable[onnx.AttributeProto], bound: Mapping[str, onnx.AttributeProto],
    scope: dict[str, str], fresh: Callable[[str], str],
) -> list[onnx.AttributeProto]:
    out: list[onnx.AttributeProto] = []
    for attr in attrs:
        if attr.ref_attr_name:
            given = bound.get(attr.ref_attr_name)
            if given is None:
                continue  # unbound reference: the attribute is omitted (the op's default applies)
            new = onnx.AttributeProto()
            new.CopyFrom(given)
            new.name = attr.name
            out.append(new)
            continue
        new = onnx.AttributeProto()
        new.CopyFrom(attr)
        if attr.type == onnx.AttributeProto.GRAPH:
            new.g.CopyFrom(_rename_graph(attr.g, bound, scope, fresh))
        elif attr.type == onnx.AttributeProto.GRAPHS:
            del new.graphs[:]
            new.graphs.extend(_rename_graph(g, bound, scope, fresh) for g in attr.graphs)
        out.append(new)
    return out


def _rename_nodes(
    nodes: Iterable[onnx.NodeProto], bound: Mapping[str, onnx.AttributeProto],
    scope: dict[str, str], fresh: Callable[[str], str],
) -> list[onnx.NodeProto]:
    renamed = []
    for node in nodes:
        new = onnx.NodeProto()
        new.op_type, new.domain, new.name = node.op_type, node.domain, node.name
        if node.HasField("overload"):
            new.overload = node.overload
        new.input.extend(scope.get(n, n) if n else "" for n in node.input)
        new.attribute.extend(_resolve_attrs(node.attribute, bound, scope, fresh))
        for name in node.output:
            if name:
                scope[name] = fresh(name)
            new.output.append(scope[name] if name else "")
        renamed.append(new)
    return renamed


def _rename_graph(graph: onnx.GraphProto, bound: Mapping[str, onnx.AttributeProto],
                  outer: Mapping[str, str], fresh: Callable[[str], str]) -> onnx.GraphProto:
    """A copy of a body node's subgraph with outer references mapped and local names fresh."""
    scope = dict(outer)
    new = onnx.GraphProto()
    new.name = graph.name
    for vi in graph.input:
        scope[vi.name] = fresh(vi.name)
        item = new.input.add()
        item.CopyFrom(vi)
        item.name = scope[vi.name]
    for init in graph.initializer:
        scope[init.name] = fresh(init.name)
        item = new.initializer.add()
        item.CopyFrom(init)
        item.name = scope[init.name]
    new.node.extend(_rename_nodes(graph.node, bound, scope, fresh))
    for vi in graph.output:
        item = new.output.add()
        item.CopyFrom(vi)
        item.name = scope.get(vi.name, vi.name)
    return new


def expand_node(
    graph: ir.Graph,
    node: ir.Node,
    function: onnx.FunctionProto,
    defaults: Mapping[str, onnx.AttributeProto],
    *,
    caller_name: str,
    values: FreshNames,
    node_names: FreshNames,
    opsets: MutableMapping[str, int] | None = None,
) -> list[ir.Node]:
    """Replace ``node`` in ``graph`` by the nodes of ``function``; returns the new nodes."""
    bound: dict[str, onnx.AttributeProto] = dict(defaults)
    for default in function.attribute_proto:  # a local function's own defaults
        if default.type != onnx.AttributeProto.UNDEFINED:
            bound.setdefault(default.name, default)
    for name, attr in node.attributes.items():
        try:
            bound[name] = ir.serde.serialize_attribute(attr)
        except Exception as exc:  # noqa: BLE001 - a garbled attribute (undefined type...)
            raise InvalidGraphError(
                f"node {node.name or node.op_type!r} calls function {function.domain or 'ai.onnx'}.{function.name} "
                f"with attribute {name!r} that cannot be read ({attr.type.name if attr.type else 'no type'})",
                node=node.name,
            ) from exc
    for i, out in enumerate(node.outputs):
        if i >= len(function.output) and out.name and (out.uses() or out.is_graph_output()):
            raise InvalidGraphError(
                f"node {node.name or node.op_type!r} uses output {i} ({out.name!r}) of function "
                f"{function.domain or 'ai.onnx'}.{function.name}, which declares {len(function.output)} output(s)",
                node=node.name,
            )
    prefix = caller_name + "/"
    fresh = FreshNames(values.used)
    prefixed = lambda base: fresh(prefix + base)  # noqa: E731
    scope: dict[str, str] = {}
    ir_values: dict[str, ir.Value | None] = {}
    for i, formal in enumerate(function.input):
        actual = node.inputs[i] if i < len(node.inputs) else None
        scope[formal] = "" if actual is None else value_name(actual)
        if actual is not None:
            ir_values[value_name(actual)] = actual
    protos = _rename_nodes(function.node, bound, scope, prefixed)
    body_opsets = {("" if i.domain == "ai.onnx" else i.domain): i.version for i in function.opset_import}
    graph_opsets = {("" if d == "ai.onnx" else d): v for d, v in (opsets or {}).items()}
    new_nodes: list[ir.Node] = []
    with _quiet_serde():
        for k, proto in enumerate(protos):
            inputs = [None if not n else _lookup(ir_values, n) for n in proto.input]
            outputs = [ir.Value(name=n) for n in proto.output]
            attrs = [ir.serde.deserialize_attribute(a) for a in proto.attribute]
            label = node_names(prefix + (proto.name or f"{proto.op_type}_{k}"))
            new = ir.Node(proto.domain, proto.op_type, inputs, attrs, outputs=outputs, name=label,
                          overload=proto.overload)
            domain = "" if proto.domain == "ai.onnx" else proto.domain
            want = body_opsets.get(domain)
            if want is not None and graph_opsets.get(domain, want) != want:
                new.version = want  # the body was written for another opset than the graph's
            elif node.version is not None and domain == ("" if node.domain == "ai.onnx" else node.domain):
                new.version = node.version
            for out in outputs:
                if out.name:
                    ir_values[out.name] = out
            new_nodes.append(new)
    old_values: list[ir.Value] = []
    new_values: list[ir.Value] = []
    claimed: set[int] = set()
    for i, formal in enumerate(function.output):
        if i >= len(node.outputs) or not node.outputs[i].name:
            continue
        source = _lookup(ir_values, scope.get(formal, formal))
        if source is None or source.producer() not in new_nodes or id(source) in claimed:
            # a formal input passed straight through (or one value twice): copy it
            copy = ir.Value(name=prefixed(formal))
            new_nodes.append(ir.Node("", "Identity", [source], outputs=[copy],
                                     name=node_names(prefix + f"Identity_{formal}")))
            source = copy
        claimed.add(id(source))
        old_values.append(node.outputs[i])
        new_values.append(source)
    if opsets is not None:
        for imp in function.opset_import:
            domain = "" if imp.domain == "ai.onnx" else imp.domain
            if domain not in opsets and not (domain == "" and "ai.onnx" in opsets):
                opsets[domain] = imp.version
    ir.convenience.replace_nodes_and_values(
        graph, insertion_point=node, old_nodes=[node], new_nodes=new_nodes,
        old_values=old_values, new_values=new_values,
    )
    return new_nodes


def _lookup(values: Mapping[str, ir.Value | None], name: str) -> ir.Value | None:
    if name in values:
        return values[name]
    # a name the body reads without defining (invalid function): a dangling value
    return ir.Value(name=name)


class _quiet_serde:
    """Silence onnx_ir's warnings about subgraph references to enclosing scopes."""

    def __enter__(self) -> None:
        self.level = _SERDE_LOGGER.level
        _SERDE_LOGGER.setLevel(logging.ERROR)

    def __exit__(self, *exc: Any) -> None:
        _SERDE_LOGGER.setLevel(self.level)


# -- model-local functions --------------------------------------------------------------------
def inline_local_functions(model: ir.Model) -> int:
    """Replace every call of a model-local function by its body; returns the count."""
    if not model.functions:
        return 0
    try:
        bodies = {key: ir.serde.serialize_function(f) for key, f in model.functions.items()}
    except Exception as exc:  # noqa: BLE001 - a garbled function body (undefined attribute...)
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise InvalidGraphError(f"a model-local function cannot be read: {type(exc).__name__}: {first}") from exc
    used_values, used_nodes = names_in(model.graph)
    values, node_names = FreshNames(used_values), FreshNames(used_nodes)
    total = 0
    for _ in range(MAX_ROUNDS * 4):
        calls = [(g, n) for g, n in _walk(model.graph) if (n.domain, n.op_type, n.overload) in bodies]
        if not calls:
            break
        for graph, node in calls:
            function = bodies[(node.domain, node.op_type, node.overload)]
            expand_node(graph, node, function, {}, caller_name=node.name or node_names(node.op_type),
                        values=values, node_names=node_names, opsets=model.opset_imports)
            total += 1
    else:
        raise UnsupportedOpError("model-local functions call each other recursively; cannot inline them",
                                 node="", op_type="")
    model.functions.clear()
    return total


def _safe_to_infer(model: ir.Model) -> bool:
    """Whether onnx's inference can be trusted with every node (what the loader hides or
    refuses: :mod:`.inference_guard`, :mod:`.attribute_checks`); expansions add nodes the
    loader never saw."""
    from .attribute_checks import ir_node_problem
    from .inference_guard import ir_node_safe

    nodes = [node for _, node in _walk(model.graph)]
    nodes += [node for function in model.functions.values() for _, node in _walk(function.graph)]
    return all(ir_node_safe(node) and ir_node_problem(node) is None for node in nodes)


def reinfer_shapes(model: ir.Model) -> None:
    """Run ONNX shape inference again so values created by expansions get types (not when a
    node could crash it: those values then stay untyped, as kernels see real values)."""
    from onnx_ir.passes.common import ShapeInferencePass

    if not _safe_to_infer(model):
        return
    logger = logging.getLogger("onnx_ir.passes.common.shape_inference")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with _quiet_serde():
            ShapeInferencePass(check_type=False, strict_mode=False, data_prop=True)(model)
    except Exception:  # noqa: BLE001 - types stay unknown; kernels see real values anyway
        pass
    finally:
        logger.setLevel(level)
