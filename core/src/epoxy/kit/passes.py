"""Helpers for writing rewrite passes: the public module the core's passes and providers' passes
share (``epoxy.kit.passes``; a provider never imports the optimizer's internals).

Every pass here works on the main graph only (subgraphs of control-flow nodes are left as
they are) and matches patterns whose intermediate values have no reader outside the
pattern and are not graph outputs, so replacing the pattern cannot change anything else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeGuard

import numpy as np
import onnx_ir as ir

from ..graph.names import FreshNames
from ..graph.walk import all_nodes

#: Ops whose semantics are those of the default ONNX domain.
ONNX_DOMAINS = ("", "ai.onnx")


def is_op(node: ir.Node | None, op_type: str | tuple[str, ...], domain: str = "") -> TypeGuard[ir.Node]:
    """True when ``node`` is an ``op_type`` node of the given domain (default: ai.onnx); a type
    checker then knows ``node`` is not None."""
    if node is None:
        return False
    types = (op_type,) if isinstance(op_type, str) else op_type
    if node.op_type not in types:
        return False
    if domain == "":
        return node.domain in ONNX_DOMAINS
    return node.domain == domain


def opset_of(model: ir.Model, node: ir.Node) -> int:
    """The opset version a node of the default domain is interpreted with."""
    if node.version is not None:
        return node.version
    return model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1))


def constant(value: ir.Value | None) -> np.ndarray | None:
    """The value of an initializer no feed can override (not a graph input), else None."""
    if value is None or not value.is_initializer() or value.is_graph_input():
        return None
    tensor = value.const_value
    if tensor is None:
        return None
    try:
        return tensor.numpy()
    except Exception:  # an exotic tensor type the pass does not need to understand
        return None


def scalar(value: ir.Value | None) -> float | None:
    """A constant holding a single number (any rank), as a Python float."""
    array = constant(value)
    if array is None or array.size != 1 or array.dtype.kind not in "fiu":
        return None
    return float(array.reshape(()))


def attr(node: ir.Node, name: str, default: Any = None) -> Any:
    """An attribute's Python value (lists for repeated attributes) or ``default``."""
    found = node.attributes.get(name)
    if found is None:
        return default
    value = found.value
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return list(value)
    return value


def dtype_of(value: ir.Value | None) -> ir.DataType | None:
    if value is None or value.type is None or not isinstance(value.type, ir.TensorType):
        return None
    return value.type.dtype


def rank_of(value: ir.Value | None) -> int | None:
    if value is None or value.shape is None:
        return None
    return len(value.shape)


def static_shape(value: ir.Value | None) -> tuple[int, ...] | None:
    if value is None or value.shape is None:
        return None
    dims = []
    for d in value.shape:
        if isinstance(d, int):
            dims.append(d)
        else:
            return None
    return tuple(dims)


def same_dim(a: object, b: object) -> bool:
    """Two dimensions equal as shape inference knows them: equal ints, or symbolic dims of
    the same name (the same run-time value: inference names a dim after where it comes from)."""
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    name_a, name_b = getattr(a, "value", None), getattr(b, "value", None)
    return isinstance(name_a, str) and name_a == name_b


def is_float(value: ir.Value | None) -> bool:
    return dtype_of(value) in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16)


def private(value: ir.Value | None, allowed: Iterable[ir.Node] = ()) -> bool:
    """True when ``value`` is read only by ``allowed`` nodes and is not a graph output."""
    if value is None or value.is_graph_output():
        return False
    allowed_set = {id(n) for n in allowed}
    return all(id(use.node) in allowed_set for use in value.uses())


def producer_of(value: ir.Value | None, op_type: str | None = None) -> ir.Node | None:
    """The node making ``value`` (None for a graph input, an initializer or None); with
    ``op_type``, only when that node is this default-domain op."""
    node = value.producer() if value is not None else None
    if op_type is not None and not is_op(node, op_type):
        return None
    return node


def sole_consumer(value: ir.Value | None) -> ir.Node | None:
    """The only node reading ``value`` (once), when it is not a graph output."""
    if value is None or value.is_graph_output():
        return None
    uses = list(value.uses())
    if len(uses) != 1:
        return None
    return uses[0].node


def consumers(value: ir.Value | None) -> list[ir.Node]:
    if value is None:
        return []
    seen: dict[int, ir.Node] = {}
    for use in value.uses():
        seen.setdefault(id(use.node), use.node)
    return list(seen.values())


def other_input(node: ir.Node, value: ir.Value) -> tuple[ir.Value | None, int] | None:
    """For a two-input node reading ``value``: (its other input, that input's index)."""
    if len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if a is value and b is not value:
        return b, 1
    if b is value and a is not value:
        return a, 0
    return None


def out_value(node: ir.Node) -> ir.Value:
    return node.outputs[0]


class Namer(FreshNames):
    """Fresh names not used anywhere in the model (values and nodes share the set).

    The set is gathered at the first name asked for, not when the pass starts: most passes
    rewrite nothing in a given model, and walking every node of every subgraph once per
    pass was ~1 ms each (a fifth of session creation on small exported models)."""

    def __init__(self, graph: ir.Graph) -> None:
        self._graph: ir.Graph | None = graph
        super().__init__(set())

    def _gather(self, graph: ir.Graph) -> None:
        used = self.used
        used.update(graph.initializers)
        used.update(v.name for v in graph.inputs if v.name)
        for node in all_nodes(graph):
            if node.name:
                used.add(node.name)
            used.update(v.name for v in node.outputs if v.name)

    def __call__(self, base: str) -> str:
        if self._graph is not None:
            graph, self._graph = self._graph, None
            self._gather(graph)
        return super().__call__(base or "opt")


#: the ``meta`` key an optimizer pass's own initializers carry (:func:`add_initializer`)
PASS_MADE = "epoxy.pass_made"


def add_initializer(graph: ir.Graph, namer: Namer | None, base: str, array: np.ndarray, *,
                    fresh: bool = False) -> ir.Value:
    """A new initializer holding ``array`` (named after ``base``; exactly ``base`` without namer).
    ``fresh``: the caller made ``array`` and nothing else holds it (a later pass may then
    rewrite it in place: :func:`rewritable`); never for an input's data, a view or a fold
    that may return its input unchanged."""
    array = np.asarray(array, order="C")  # not ascontiguousarray: it makes a 0-d array 1-d
    tensor = ir.Tensor(array)
    if fresh:
        tensor.meta[PASS_MADE] = True
    value = ir.Value(
        name=namer(base) if namer is not None else base,
        type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
        shape=ir.Shape(array.shape),
        const_value=tensor,
    )
    graph.register_initializer(value)
    return value


def rewritable(value: ir.Value, array: np.ndarray) -> bool:
    """Whether a pass may overwrite ``array``, ``value``'s data, in place: an earlier pass made
    it fresh (``add_initializer(..., fresh=True)``: a fold's output, a folded ConstantOfShape;
    never the user's model), it owns its memory, and one node reads it. Why: Conv+BN and then
    Mul/Add folds each wrote a fresh copy of every weight (inception_v2: 20 M floats twice,
    their first touch ~40 ms of a 260 ms creation; bench/README.md, session 40)."""
    tensor = value.const_value
    return (tensor is not None and bool(tensor.meta.get(PASS_MADE)) and array.flags.owndata
            and array.flags.writeable and len(value.uses()) == 1 and not value.is_graph_output())


def written_into(value: ir.Value | None, array: np.ndarray | None, data: np.ndarray) -> ir.Value | None:
    """``value`` with ``data`` written into its array when that array is a pass's own, of
    ``data``'s size and dtype, read by one node (:func:`rewritable`); else None (untouched).
    Why: a fold that rewrites a pass's own parameters in place adds no initializer (~15 us
    each: a tensor, a value, a fresh name)."""
    if value is None or array is None or array.size != data.size or array.dtype != data.dtype:
        return None
    if not rewritable(value, array):
        return None
    array[...] = data.reshape(array.shape)
    return value


#: attribute types of plain Python values and of non-empty lists of one of them
_SCALAR_ATTRIBUTES: dict[type, Callable[[str, Any], ir.Attr]] = {
    int: ir.AttrInt64, float: ir.AttrFloat32, str: ir.AttrString}
_LIST_ATTRIBUTES: dict[type, Callable[[str, Any], ir.Attr]] = {
    int: ir.AttrInt64s, float: ir.AttrFloat32s, str: ir.AttrStrings}


def as_attribute(name: str, value: Any) -> ir.Attr:
    """``value`` as an attribute named ``name``, typed as onnx_ir's ``convert_attribute``
    types it. Why: that conversion tests a list against runtime-checkable protocols before
    looking at its items (~55 us a list, ~0.1 ms of a fusion pass's node); plain ints,
    floats, strings and non-empty lists of one of them are typed here directly."""
    kind = type(value)
    if kind in _SCALAR_ATTRIBUTES:
        return _SCALAR_ATTRIBUTES[kind](name, value)
    if (kind is list or kind is tuple) and value:
        first = type(value[0])
        if first in _LIST_ATTRIBUTES and all(type(v) is first for v in value):
            return _LIST_ATTRIBUTES[first](name, list(value))
    return ir.convenience.convert_attribute(name, value)


def make_node(
    namer: Namer,
    op_type: str,
    inputs: Sequence[ir.Value | None],
    attributes: dict[str, Any] | None = None,
    *,
    name: str,
    domain: str = "",
    version: int | None = None,
    num_outputs: int = 1,
) -> ir.Node:
    """A node with uniquely named outputs (``name``, ``name/out1``...)."""
    attrs = [as_attribute(k, v) for k, v in (attributes or {}).items() if v is not None]
    outputs = [ir.Value(name=namer(name if i == 0 else f"{name}/out{i}")) for i in range(num_outputs)]
    return ir.Node(domain, op_type, inputs, attrs, outputs=outputs, version=version, name=namer(name))


def replace(
    graph: ir.Graph,
    old_nodes: Sequence[ir.Node],
    new_nodes: Sequence[ir.Node],
    old_values: Sequence[ir.Value],
    new_values: Sequence[ir.Value],
) -> None:
    """Replace ``old_nodes`` by ``new_nodes``; readers of ``old_values`` read ``new_values``.

    The new nodes go where the last old node (in graph order) was; every value they read
    must be defined before the first old node or by the new nodes themselves (patterns read
    only the pattern's inputs, so this holds). A replaced value keeps its name when the old
    nodes produced it (it goes away with them): graph outputs stay named, and a fused node's
    output is still called what the exporter called it, so ``epoxy validate`` and profiles
    can match it with the unoptimized model's value.
    """
    graph.insert_before(_last_in_graph_order(graph, old_nodes), list(new_nodes))
    for old, new in zip(old_values, new_values):
        if new.type is None:
            new.type = old.type
        if new.shape is None and old.shape is not None:
            new.shape = old.shape
        ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
        removed = old.producer() is not None and any(old.producer() is n for n in old_nodes)
        if removed or old.is_graph_output() or any(v is new for v in graph.outputs):
            name = old.name
            old.name = None
            new.name = name
    graph.remove(list(old_nodes), safe=True)


def take_place(graph: ir.Graph, value: ir.Value, old: ir.Value, old_nodes: Sequence[ir.Node]) -> None:
    """``value`` takes ``old``'s place (its readers, graph output slot and name) and
    ``old_nodes`` (the nodes between them, ``old``'s producer among them) go: a pattern
    folded into the node that produces ``value``, without building a new node."""
    if value.type is None:
        value.type = old.type
    if old.shape is not None:
        value.shape = old.shape
    ir.convenience.replace_all_uses_with(old, value, replace_graph_outputs=True)
    name = old.name
    old.name = None
    value.name = name
    graph.remove(list(old_nodes), safe=True)


def become(graph: ir.Graph, node: ir.Node, op_type: str, attributes: Mapping[str, Any], *, domain: str = "",
           version: int | None = None, keep: Iterable[str] = (), tail: Sequence[ir.Node] = (),
           out: ir.Value | None = None) -> None:
    """Turn ``node`` into ``domain::op_type`` with ``attributes`` (plain values, as
    :func:`make_node` takes them; None ones left out), keeping of its own attributes the ones
    named in ``keep``; with ``out``, its first output then takes ``out``'s place and ``tail``
    (the nodes between them) goes (:func:`take_place`). A fusion done this way builds no node
    and no value: a new node, its output, a fresh name and the graph splice were most of a
    fusion's time."""
    kept = set(keep)
    for name in [n for n in node.attributes if n not in kept]:
        del node.attributes[name]
    for name, value in attributes.items():
        if value is not None:
            node.attributes[name] = as_attribute(name, value)
    node.op_type, node.domain, node.version = op_type, domain, version
    if out is not None:
        take_place(graph, node.outputs[0], out, tail)


def _last_in_graph_order(graph: ir.Graph, nodes: Sequence[ir.Node]) -> ir.Node:
    """The node of ``nodes`` that comes last in ``graph``.

    Why not number the graph: a pattern's nodes feed one another, and in a topologically
    sorted graph the one node among them that feeds none of the others follows all of them
    (each of the others reaches it through the pattern). Numbering every node per
    replacement made a pass quadratic in the graph's size (densenet121's optimizer: 487 ->
    404 ms, best of four, on a noisy host); the numbering stays for a pattern with several
    such nodes."""
    if len(nodes) == 1:
        return nodes[0]
    members = {id(n) for n in nodes}
    sinks = [n for n in nodes
             if not any(id(use.node) in members for out in n.outputs for use in out.uses())]
    if len(sinks) == 1:
        return sinks[0]
    position = {id(n): i for i, n in enumerate(graph)}
    return max(nodes, key=lambda n: position[id(n)])


def ensure_opset(model: ir.Model, domain: str, version: int) -> None:
    """Import ``domain`` (at ``version`` or above) so nodes of it are valid."""
    current = model.opset_imports.get(domain)
    if current is None or current < version:
        model.opset_imports[domain] = version


def graph_nodes(graph: ir.Graph) -> list[ir.Node]:
    """A snapshot of the graph's nodes (safe to rewrite while iterating)."""
    return list(graph)


def alive(graph: ir.Graph, node: ir.Node) -> bool:
    return node.graph is graph


class OpCensus:
    """The op types of a model's main graph while the optimizer runs its passes, so a pass
    whose pattern needs an op the graph does not hold skips its walk (:attr:`RewritePass.needs`).

    Why: a session's optimizer runs ~37 rewrite passes, each walking every node; on an exporter
    model most find nothing (the QDQ passes on a float model, BatchNorm folds on a transformer),
    and their walks were ~8% of a fresh session creation. The set is taken once and again only
    after a pass changed the model (passes only ever remove op types or add the ones their
    rewrite makes, so a stale set errs on the side of running a pass)."""

    __slots__ = ("_ops", "model")

    def __init__(self, model: ir.Model) -> None:
        self.model = model
        self._ops: frozenset[str] | None = None

    def ops(self) -> frozenset[str]:
        if self._ops is None:
            self._ops = frozenset(node.op_type for node in self.model.graph)
        return self._ops

    def reset(self, model: ir.Model) -> None:
        """After a pass changed ``model`` (or returned another model object)."""
        self.model, self._ops = model, None


_CENSUS: ContextVar[OpCensus | None] = ContextVar("epoxy_op_census", default=None)


@contextmanager
def op_census(model: ir.Model) -> Iterator[OpCensus]:
    """Passes run inside may skip themselves by :attr:`RewritePass.needs` (the optimizer's
    pipeline; passes run anywhere else always walk the graph)."""
    census = OpCensus(model)
    token = _CENSUS.set(census)
    try:
        yield census
    finally:
        _CENSUS.reset(token)


def model_changed(model: ir.Model) -> None:
    """Tell the running census (if any) that ``model`` changed: composite passes call it after
    each step that reports a change."""
    census = _CENSUS.get()
    if census is not None and census.model is model:
        census.reset(model)


class RewritePass(ir.passes.InPlacePass):
    """Base: calls ``rewrite(model, graph, namer)`` on the main graph until nothing changes.

    ``rewrite`` returns how many patterns it replaced; ``self.count`` sums them (tests and
    reports read it). ``needs``: groups of op types; the pass can only match when the main
    graph holds at least one op of every group (none: it always runs).
    """

    max_sweeps = 4
    needs: tuple[frozenset[str], ...] = ()

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        census = _CENSUS.get()
        if census is not None and census.model is not model:
            census = None
        if self.needs and census is not None:
            present = census.ops()
            if any(present.isdisjoint(group) for group in self.needs):
                self.count = 0
                return ir.passes.PassResult(model, modified=False)
        graph = model.graph
        namer = Namer(graph)
        total = 0
        for _ in range(self.max_sweeps):
            n = self.rewrite(model, graph, namer)
            total += n
            if not n:
                break
        self.count = total
        if total and census is not None:
            census.reset(model)
        return ir.passes.PassResult(model, modified=bool(total))

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:  # pragma: no cover
        raise NotImplementedError


def channel_vector(c: np.ndarray | None, rank: int | None, channels: int, axis: int = 1) -> np.ndarray | None:
    """``c`` as a length-``channels`` vector when broadcasting it against a rank-``rank``
    tensor with ``channels`` channels on ``axis`` varies it along that axis only (and does
    not change the tensor's shape); else None."""
    if c is None or rank is None or c.ndim > rank or c.dtype.kind != "f":
        return None
    full = (1,) * (rank - c.ndim) + tuple(c.shape)
    for i, d in enumerate(full):
        if d != 1 and not (i == axis and d == channels):
            return None
    flat = c.reshape(-1)
    return np.broadcast_to(flat, (channels,)) if flat.size == 1 else flat


def per_channel(vec: np.ndarray, ndim: int, axis: int = 0) -> np.ndarray:
    """``vec`` shaped to broadcast along ``axis`` of a rank-``ndim`` array."""
    shape = [1] * ndim
    shape[axis] = -1
    return vec.reshape(shape)


def scaled_per_channel(w: np.ndarray, scale: np.ndarray, axis: int, *, in_place: bool = False) -> np.ndarray:
    """``w * scale`` along ``axis`` in ``w``'s dtype, each product rounded once from float64
    (into ``w`` itself with ``in_place``: see :func:`rewritable`).

    The float64 loop writes through numpy's cast buffers: a model's weights widened to
    float64 as whole arrays are hundreds of megabytes of fresh pages (resnet50's Conv+BN
    folds took 0.8 s of its session creation that way, onnxruntime's whole creation 0.1 s)."""
    out = w if in_place else np.empty_like(w)
    factors = per_channel(np.asarray(scale, dtype=np.float64), w.ndim, axis)
    np.multiply(w, factors, out=out, casting="same_kind")
    return out


def copy_attributes(src: ir.Node, dst: ir.Node, skip: Iterable[str] = ()) -> None:
    """Copy ``src``'s attributes onto ``dst`` (except ``skip``)."""
    skipped = set(skip)
    for name, a in src.attributes.items():
        if name not in skipped:
            dst.attributes[name] = a


def bypass(graph: ir.Graph, node: ir.Node, src: ir.Value) -> bool:
    """Remove ``node`` (one live output equal to ``src``): its readers read ``src``.

    A graph output keeps its name (``src`` is renamed) unless ``src`` is itself a graph
    input, initializer or output, or comes from outside the graph: then nothing changes.
    """
    out = node.outputs[0]
    if any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
        return False
    if out.is_graph_output():
        if src.is_graph_input() or src.is_initializer() or src.is_graph_output() or src.producer() is None:
            return False
        if src.producer().graph is not graph:  # type: ignore[union-attr]
            return False
        if src.shape is None:
            src.shape = out.shape
        ir.convenience.replace_all_uses_with(out, src, replace_graph_outputs=True)
        name = out.name
        out.name = None
        src.name = name
    else:
        ir.convenience.replace_all_uses_with(out, src)
    graph.remove(node, safe=True)
    return True


def close(value: float | None, target: float, rtol: float = 1e-6) -> bool:
    """``value`` equals ``target`` up to float32 rounding of a written-out constant."""
    return value is not None and abs(value - target) <= rtol * abs(target)


def binary_with_scalar(node: ir.Node | None, op: str, x: ir.Value) -> float | None:
    """For ``op(x, c)`` (or ``op(c, x)`` when ``op`` commutes): the scalar constant c."""
    if not is_op(node, op) or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if a is x and b is not x:
        return scalar(b)
    if b is x and a is not x and op in ("Add", "Mul"):
        return scalar(a)
    return None


def fused_version(model: ir.Model, since: int) -> int | None:
    """``version=`` for a fused node of an op added in opset ``since`` (None when the
    model's default-domain opset already has it)."""
    current = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1))
    return None if current >= since else since


#: the core's passes a provider may compose into its own pipeline (``ConstantFoldingPass()``
#: before its fusions, ...): reached through this module, loaded when first asked for (the
#: core's passes are written with the helpers above, so importing them here eagerly would
#: make the two modules import each other)
CORE_PASSES = (
    "BatchNormAffineFoldPass", "CastEliminationPass", "ConstantFoldingPass", "ConvAffineFoldPass",
    "ConvBatchNormFoldPass",
    "DeadNodeRemovalPass", "DequantizeWeightsPass", "DropoutEliminationPass", "FlattenedGemmPass", "GeluFusionPass",
    "IdentityEliminationPass", "LayerNormFusionPass",
    "LegacyInitializerInputsPass",
    "LiftConstantsPass", "MatMulAddToGemmPass", "MatMulAffineFoldPass", "ReshapeTransposeSimplifyPass",
    "RMSNormFusionPass",
    "StaticShapePass",
)


def __getattr__(name: str) -> Any:
    if name in CORE_PASSES:
        from importlib import import_module

        return getattr(import_module("epoxy.optimize.passes"), name)
    raise AttributeError(f"module 'epoxy.kit.passes' has no attribute {name!r}")
