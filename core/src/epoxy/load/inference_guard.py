"""Nodes whose onnx shape inference trusts their input dims, hidden from it until those are
known to be safe.

GatherND's inference indexes the data shape at (last dim of ``indices`` + ``batch_dims``):
a negative dim there, declared or inferred by onnx itself (Expand to a constant shape
``[2, -10]``), makes the index negative and segfaults the process. Attribute checks cannot
see it before inference, since the dims come out of inference. So such nodes are moved to a
private domain while onnx infers the rest (it then skips them, leaving their outputs
untyped); their inputs' inferred shapes are checked, and only the nodes found safe take
part in the final inference. The others keep untyped outputs: kernels see real shapes.
A node whose rule can answer from the first inference (no data propagation: the dims it
reads are known there already) is revealed before the data-propagating passes; only the
others wait for an extra inference that shows them their inputs as data propagation does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import onnx
import onnx_ir as ir
from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

from .proto_tensors import model_graphs

_A = onnx.AttributeProto

#: where a hidden node's domain goes, by its real domain (both spell the ONNX domain)
HIDDEN_DOMAINS = {"": "ai.epoxy.hidden_from_inference", "ai.onnx": "ai.epoxy.hidden_from_inference.ai.onnx"}
_REAL_DOMAIN = {hidden: real for real, hidden in HIDDEN_DOMAINS.items()}

#: a dim as inference knows it: its value, or None (symbolic or unknown)
Shape = Sequence[int | None]


def _gathernd_safe(shapes: Sequence[Shape | None], refinable: bool = False) -> bool | None:
    """GatherND reads ``indices``' last dim as an index offset: it must be known not negative
    (and no known dim of ``indices`` may be negative). ``refinable``: the shapes come from an
    inference without data propagation, which may still learn unknown dims (never change a
    known one), so the last dim must be known already."""
    indices = shapes[1] if len(shapes) > 1 else None
    if indices is None or not indices or (refinable and indices[-1] is None):
        return None
    return all(d is None or d >= 0 for d in indices)


#: op type (ONNX domain) -> whether its input shapes are safe for onnx's inference of it
#: (``None``: not known, as when they are not inferred), given whether they are refinable
SHAPE_TRUSTING: dict[str, Callable[[Sequence[Shape | None], bool], bool | None]] = {"GatherND": _gathernd_safe}


def _shape(vi: onnx.ValueInfoProto) -> Shape | None:
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]


class _ScopeShapes:
    """The shapes of the values one graph sees (its own, then its enclosing graphs'), read
    from the proto only for the names asked: a hidden node needs two, and reading every
    value's shape of an exported transformer was ~1 ms of its session creation."""

    def __init__(self, graph: onnx.GraphProto, outer: _ScopeShapes | None) -> None:
        self._graph, self._outer = graph, outer
        self._declared: dict[str, list[onnx.ValueInfoProto]] | None = None
        self._initializers: dict[str, onnx.TensorProto] = {}

    def get(self, name: str) -> Shape | None:
        if self._declared is None:
            declared: dict[str, list[onnx.ValueInfoProto]] = {}
            graph = self._graph
            for vi in (*graph.input, *graph.value_info, *graph.output):
                declared.setdefault(vi.name, []).append(vi)
            self._declared = declared
            self._initializers = {t.name: t for t in graph.initializer}
        tensor = self._initializers.get(name)
        if tensor is not None:  # an initializer's dims win, as they did
            return list(tensor.dims)
        for vi in reversed(self._declared.get(name, ())):  # the last declaration with a shape
            shape = _shape(vi)
            if shape is not None:
                return shape
        return None if self._outer is None else self._outer.get(name)


def _walk(nodes: Iterable[onnx.NodeProto], shapes: _ScopeShapes | None
          ) -> Iterator[tuple[onnx.NodeProto, _ScopeShapes | None]]:
    """Every node below ``nodes`` (subgraphs too), with the shapes in its scope (when given)."""
    for node in nodes:
        yield node, shapes
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == _A.GRAPH else list(attr.graphs)):
                yield from _walk(sub.node, None if shapes is None else _ScopeShapes(sub, shapes))


def _all_nodes(proto: onnx.ModelProto, with_shapes: bool = False
               ) -> Iterator[tuple[onnx.NodeProto, _ScopeShapes | None]]:
    """Main graph and subgraphs (with shapes when asked), then function bodies (no shapes:
    onnx infers them per call and keeps no types in them)."""
    yield from _walk(proto.graph.node, _ScopeShapes(proto.graph, None) if with_shapes else None)
    for function in proto.functions:
        yield from _walk(function.node, None)


def _trusting(node: onnx.NodeProto) -> bool:
    domain = _REAL_DOMAIN.get(node.domain, node.domain)
    return domain in HIDDEN_DOMAINS and node.op_type in SHAPE_TRUSTING


def has_shape_trusting_nodes(proto: onnx.ModelProto) -> bool:
    """Whether any node of the model needs hiding from inference (see the module docstring).
    The op type is tested first: most models hold none, and the test runs on every node."""
    node_lists = [graph.node for graph in model_graphs(proto)] + [function.node for function in proto.functions]
    return any(node.op_type in SHAPE_TRUSTING and _trusting(node) for nodes in node_lists for node in nodes)


def _imports(proto: onnx.ModelProto) -> Iterator[RepeatedCompositeFieldContainer[onnx.OperatorSetIdProto]]:
    yield proto.opset_import
    for function in proto.functions:
        yield function.opset_import


def hide(proto: onnx.ModelProto) -> None:
    """Move every shape-trusting node of ``proto`` (edited in place) to a hidden domain."""
    for node, _ in _all_nodes(proto):
        if _trusting(node) and node.domain in HIDDEN_DOMAINS:
            node.domain = HIDDEN_DOMAINS[node.domain]
    for imports in _imports(proto):
        known = {i.domain for i in imports}
        for hidden in HIDDEN_DOMAINS.values():
            if hidden not in known:
                imports.add(domain=hidden, version=1)


def reveal_safe(view: onnx.ModelProto, inferred: onnx.ModelProto) -> list[str]:
    """Give back their domain to the hidden nodes of ``view`` whose inputs ``inferred`` (the
    result of inferring ``view``: same nodes in the same order) shows to be safe; names of
    the nodes left hidden because their input shapes are unsafe (those whose shapes are not
    known stay hidden too: onnx would infer nothing for them, but a revealed node upstream
    could give them shapes nobody checked)."""
    left: list[str] = []
    pairs = zip(_all_nodes(view), _all_nodes(inferred, with_shapes=True), strict=True)
    for (node, _), (seen, shapes) in pairs:
        if node.domain not in _REAL_DOMAIN:
            continue
        inputs = [shapes.get(name) if shapes is not None and name else None for name in seen.input]
        safe = SHAPE_TRUSTING[node.op_type](inputs, False)
        if safe:
            node.domain = _REAL_DOMAIN[node.domain]
        elif safe is not None:
            left.append(node.name or node.op_type)
    return left


def reveal_settled(view: onnx.ModelProto, inferred: onnx.ModelProto) -> bool:
    """Give back their domain to the hidden nodes of ``view`` found safe from the shapes of
    ``inferred``, an inference of ``view`` *without* data propagation (each op's rule answers
    only from the dims it needs that are known already); whether any node is still hidden.
    Why: exported transformers hold a GatherND whose indices' last dim needs no data
    propagation, and one inference of the whole model (~1 ms of a 20 ms session creation)
    was run only to find its input shapes."""
    hidden = False
    pairs = zip(_all_nodes(view), _all_nodes(inferred, with_shapes=True), strict=True)
    for (node, _), (seen, shapes) in pairs:
        if node.domain not in _REAL_DOMAIN:
            continue
        inputs = [shapes.get(name) if shapes is not None and name else None for name in seen.input]
        if SHAPE_TRUSTING[node.op_type](inputs, True):
            node.domain = _REAL_DOMAIN[node.domain]
        else:
            hidden = True
    return hidden


def restore(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Every hidden node of ``proto`` back in its domain, the hidden domains' imports gone
    (``proto`` edited in place and returned)."""
    for node, _ in _all_nodes(proto):
        if node.domain in _REAL_DOMAIN:
            node.domain = _REAL_DOMAIN[node.domain]
    for imports in _imports(proto):
        kept = [i for i in imports if i.domain not in _REAL_DOMAIN]
        if len(kept) != len(imports):
            del imports[:]
            imports.extend(kept)
    return proto


def ir_node_safe(node: ir.Node) -> bool:
    """Whether onnx may infer an IR node: not a shape-trusting op, or one whose inputs'
    shapes are known safe (for passes that run onnx's inference again after loading)."""
    if node.domain not in HIDDEN_DOMAINS or node.op_type not in SHAPE_TRUSTING:
        return True
    shapes = [None if v is None or v.shape is None else [d if isinstance(d, int) else None for d in v.shape]
              for v in node.inputs]
    return bool(SHAPE_TRUSTING[node.op_type](shapes, False))
