"""Float32 models to float16 or bfloat16: ``convert_float(model, dtype=...)``.

Each node either runs in the target type (its float32 inputs, outputs, constants and dtype
attributes become the target type) or stays float32 (blocked by the user, by
:data:`DEFAULT_OP_BLOCK_LIST`, or because its schema at the model's opset has no target-type
version: most of bfloat16's gaps). Casts go in only where a value's stored type differs from
what a consumer needs, once per value and type; a cast of a ``Cast`` output is taken from that
Cast's input instead, so no two casts run back to back. If / Loop / Scan bodies are converted
the same way, their inputs and outputs in the type of the node that owns them.

The result is checked with ``onnx.checker.check_model(full_check=True)`` before it is
returned; a failure raises :class:`epoxy.errors.InvalidGraphError` naming the node.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, helper

from epoxy.errors import InvalidArgumentError, InvalidGraphError
from epoxy.quantization.float16_tensors import TARGETS, TensorLoss, convert_tensor

FLOAT = TensorProto.FLOAT

#: Ops kept in float32 by default, and why. Ops without a target-type schema at the model's
#: opset (ai.onnx.ml, NonMaxSuppression, most ops in bfloat16 before opset 13...) are kept
#: automatically and need no entry here.
DEFAULT_OP_BLOCK_LIST: dict[str, str] = {
    "ReduceSumSquare": "squares overflow float16 from |x| > 256 before the sum is taken",
    "ReduceL2": "sums squares: overflows float16 from |x| > 256 even when the norm fits",
    "ReduceLogSumExp": "exp overflows float16 from x > 11; the spec does not require the max shift",
    "ReduceProd": "products of a few dozen values leave float16's range or precision",
    "CumSum": "a running sum over a long axis loses the small terms (11 / 8 significant bits)",
    "Range": "start + i * delta is exact only to 2048 in float16 and 256 in bfloat16",
}

#: (op, attribute) pairs whose integer value is the element type of the node's float output
_DTYPE_ATTRIBUTES = {("Cast", "to"), ("RandomNormal", "dtype"), ("RandomUniform", "dtype"),
                     ("RandomNormalLike", "dtype"), ("RandomUniformLike", "dtype"), ("EyeLike", "dtype"),
                     ("Bernoulli", "dtype")}
_NOT_FLOAT = "no float32 values"  # a node conversion leaves alone: not reported as kept
_SHORT: dict[int, str] = {TensorProto.FLOAT16: "fp16", TensorProto.BFLOAT16: "bf16", FLOAT: "fp32"}


class FloatConversionWarning(UserWarning):
    """Something the conversion changed or skipped that a user should know: clipped values
    (naming the initializers), or a model with nothing to convert."""


@dataclass(frozen=True)
class FloatConversionReport:
    """What :func:`convert_float_report` did, for the quantization report and for tests."""

    dtype: str
    converted: tuple[str, ...] = ()
    kept_float32: tuple[tuple[str, str], ...] = ()  # (node, why)
    casts_added: int = 0
    losses: tuple[TensorLoss, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def clipped(self) -> dict[str, int]:
        """Tensor name -> number of values clipped to the target's finite range."""
        return {loss.name: loss.clipped for loss in self.losses if loss.clipped}

    @property
    def flushed(self) -> dict[str, int]:
        """Tensor name -> number of values below ``min_positive`` set to zero."""
        return {loss.name: loss.flushed for loss in self.losses if loss.flushed}


@dataclass
class _State:
    """Mutable bookkeeping of one conversion (one model)."""

    dtype: str
    low: int
    opset: int
    op_block: dict[str, str]
    node_block: frozenset[str]
    max_finite: float
    min_positive: float
    types: dict[str, int]
    names: set[str]
    decisions: dict[tuple[str, ...], str | None] = field(default_factory=dict)  # node -> None (converts) or why kept
    labels: dict[tuple[str, ...], str] = field(default_factory=dict)
    losses: list[TensorLoss] = field(default_factory=list)
    casts: int = 0


def convert_float(model: ModelProto, *, dtype: str = "float16", keep_io_types: bool = True,
                  op_block_list: Iterable[str] | None = None, node_block_list: Iterable[str] = (),
                  min_positive: float | None = None, max_finite: float | None = None) -> ModelProto:
    """The model with its float32 computation in ``dtype`` (``"float16"`` or ``"bfloat16"``).

    ``keep_io_types`` keeps graph inputs and outputs float32 (casts inside). ``op_block_list``
    (default: :data:`DEFAULT_OP_BLOCK_LIST`) and ``node_block_list`` (node names) run in
    float32. Constants past ``max_finite`` (default: the target's largest finite value) are
    clipped and those below ``min_positive`` (default: its smallest subnormal) set to zero;
    both are reported with a :class:`FloatConversionWarning` naming the tensors.
    """
    converted, report = convert_float_report(model, dtype=dtype, keep_io_types=keep_io_types,
                                             op_block_list=op_block_list, node_block_list=node_block_list,
                                             min_positive=min_positive, max_finite=max_finite)
    if report.clipped:
        named = ", ".join(f"{name!r} ({count})" for name, count in sorted(report.clipped.items()))
        warnings.warn(f"{dtype}: values outside +-{max_finite or TARGETS[dtype][1]:g} clipped in {named}",
                      FloatConversionWarning, stacklevel=2)
    if report.flushed:
        named = ", ".join(f"{name!r} ({count})" for name, count in sorted(report.flushed.items()))
        warnings.warn(f"{dtype}: values below the smallest representable magnitude set to 0 in {named}",
                      FloatConversionWarning, stacklevel=2)
    for note in report.notes:
        warnings.warn(note, FloatConversionWarning, stacklevel=2)
    return converted


def convert_float_report(model: ModelProto, *, dtype: str = "float16", keep_io_types: bool = True,
                         op_block_list: Iterable[str] | None = None, node_block_list: Iterable[str] = (),
                         min_positive: float | None = None, max_finite: float | None = None) -> tuple[
                             ModelProto, FloatConversionReport]:
    """:func:`convert_float` without warnings: returns the model and what was done."""
    if dtype not in TARGETS:
        raise InvalidArgumentError(f"dtype must be one of {sorted(TARGETS)}, not {dtype!r}")
    low, finite, subnormal = TARGETS[dtype]
    out = ModelProto()
    out.CopyFrom(model)
    types = _value_types(out)
    if FLOAT not in types.values():
        note = "the model has no float32 tensors: returned unchanged"
        return out, FloatConversionReport(dtype, notes=(note,))
    blocks = dict(DEFAULT_OP_BLOCK_LIST) if op_block_list is None else dict.fromkeys(op_block_list, "op_block_list")
    state = _State(dtype, low, _opset(out), blocks, frozenset(node_block_list),
                   finite if max_finite is None else float(max_finite),
                   subnormal if min_positive is None else float(min_positive), types, _all_names(out.graph))
    _decide_graph(out.graph, state)
    _convert_graph(out.graph, state, io_type=FLOAT if keep_io_types else low, top=True, outer={}, cache={})
    _check(out, dtype)
    kept = tuple((state.labels[key], why) for key, why in state.decisions.items()
                 if why is not None and why != _NOT_FLOAT)
    done = tuple(state.labels[key] for key, why in state.decisions.items() if why is None)
    return out, FloatConversionReport(dtype, done, kept, state.casts, tuple(state.losses))


# -- types ------------------------------------------------------------------------------------
def _opset(model: ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    raise InvalidArgumentError("the model imports no ai.onnx opset")


def _graphs(graph: GraphProto) -> Iterator[GraphProto]:
    """``graph`` and every subgraph under it, depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _graphs(sub)


def _value_types(model: ModelProto) -> dict[str, int]:
    """Element type of every tensor value whose type is declared or inferable (names are
    unique across a model's scopes in valid ONNX, so one map serves every subgraph)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # a model shape inference refuses still converts; the checker has the last word
        inferred = model
    types: dict[str, int] = {}
    for graph in _graphs(inferred.graph):
        for init in graph.initializer:
            types[init.name] = init.data_type
        for info in (*graph.input, *graph.output, *graph.value_info):
            if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type:
                types[info.name] = info.type.tensor_type.elem_type
        for node in graph.node:
            if node.op_type == "Constant" and node.output:
                types.setdefault(node.output[0], _constant_type(node))
    return types


def _constant_type(node: NodeProto) -> int:
    for attr in node.attribute:
        if attr.name == "value":
            return attr.t.data_type
        if attr.name in ("value_float", "value_floats"):
            return FLOAT
    return 0


def _key(node: NodeProto) -> tuple[str, ...]:
    """A node's identity across protobuf accesses (``id()`` is not): its outputs, unique in SSA."""
    return (node.name, *node.output)


def _all_names(graph: GraphProto) -> set[str]:
    names: set[str] = set()
    for sub in _graphs(graph):
        names.update(i.name for i in (*sub.input, *sub.output, *sub.value_info, *sub.initializer))
        for node in sub.node:
            names.update(node.input)
            names.update(node.output)
    return names


def _formal(params: list[onnx.defs.OpSchema.FormalParameter], index: int) -> onnx.defs.OpSchema.FormalParameter | None:
    if index < len(params):
        return params[index]
    if params and params[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        return params[-1]
    return None


def _allows(schema: onnx.defs.OpSchema, type_str: str, tensor: str) -> bool:
    for constraint in schema.type_constraints:
        if constraint.type_param_str == type_str:
            return tensor in constraint.allowed_type_strs
    return type_str == tensor


# -- which nodes convert ----------------------------------------------------------------------
def _decide_graph(graph: GraphProto, state: _State) -> None:
    """Record, for every node of ``graph`` and its subgraphs, whether it runs in the target type."""
    target = f"tensor({state.dtype})"
    consumers: dict[str, list[NodeProto]] = {}
    for index, node in enumerate(graph.node):
        state.labels[_key(node)] = node.name or f"{node.op_type}#{index}"
        for name in node.input:
            consumers.setdefault(name, []).append(node)
        state.decisions[_key(node)] = _why_kept(node, state, target)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)):
                _decide_graph(sub, state)
    for node in graph.node:  # a constant that feeds only float32 nodes stays float32
        if node.op_type == "Constant" and state.decisions[_key(node)] is None and node.output:
            users = consumers.get(node.output[0], [])
            if users and all(state.decisions[_key(user)] is not None for user in users):
                state.decisions[_key(node)] = "feeds only float32 nodes"


def _why_kept(node: NodeProto, state: _State, target: str) -> str | None:
    """None when ``node`` converts, else why it stays float32 (also for nodes without float)."""
    has_graph = any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)
    floats = [n for n in (*node.input, *node.output) if n and state.types.get(n) == FLOAT]
    if not floats and not has_graph and not _float_attributes(node):
        return _NOT_FLOAT
    if node.name and node.name in state.node_block:
        return "node_block_list"
    if node.op_type in state.op_block:
        return state.op_block[node.op_type]
    if node.domain not in ("", "ai.onnx"):
        return f"no {state.dtype} schema known for domain {node.domain!r}"
    try:
        schema = onnx.defs.get_schema(node.op_type, state.opset, "")
    except onnx.defs.SchemaError:
        return f"no schema for {node.op_type} at opset {state.opset}"
    for params, names in ((schema.inputs, node.input), (schema.outputs, node.output)):
        for index, name in enumerate(names):
            formal = _formal(list(params), index)
            if not name or formal is None or state.types.get(name) != FLOAT:
                continue
            if formal.type_str.startswith("tensor("):
                continue  # a fixed float32 input or output: it stays float32, the node converts
            if not _allows(schema, formal.type_str, target):
                return f"no {state.dtype} schema for {node.op_type} at opset {state.opset}"
    return None


def _float_attributes(node: NodeProto) -> bool:
    for attr in node.attribute:
        if (node.op_type, attr.name) in _DTYPE_ATTRIBUTES and attr.i == FLOAT:
            return True
        if attr.type == AttributeProto.TENSOR and attr.t.data_type == FLOAT:
            return True
    return node.op_type == "ConstantOfShape"


# -- rewriting ------------------------------------------------------------------------------
def _unique(state: _State, base: str) -> str:
    name, n = base, 1
    while name in state.names:
        name, n = f"{base}_{n}", n + 1
    state.names.add(name)
    return name


def _convert_graph(graph: GraphProto, state: _State, *, io_type: int, top: bool, outer: dict[str, int],
                   cache: dict[tuple[str, int], str]) -> None:
    """Rewrite ``graph`` in place: ``io_type`` is the element type its float inputs/outputs get."""
    stored = dict(outer)  # value name -> element type it is stored in, for float32 values only
    cache = dict(cache)  # (value, type) -> name of the cast of value to type
    cast_inputs: dict[str, str] = {}  # output of a Cast node -> its input
    input_names = {i.name for i in graph.input}
    for info in graph.input:
        if state.types.get(info.name) == FLOAT:
            stored[info.name] = io_type
            info.type.tensor_type.elem_type = io_type
    uses = _uses(graph)
    for index, init in enumerate(graph.initializer):
        if init.data_type != FLOAT or init.name in input_names:
            continue
        if any(state.decisions.get(_key(user)) is None for user in uses.get(init.name, [])):
            new, loss = convert_tensor(init, state.dtype, max_finite=state.max_finite,
                                       min_positive=state.min_positive)
            graph.initializer[index].CopyFrom(new)
            state.losses.append(loss)
            stored[init.name] = state.low
        else:
            stored[init.name] = FLOAT
    nodes: list[NodeProto] = []
    inserted: set[str] = set()  # outputs of the casts added here

    def cast(name: str, to: int) -> str:
        if stored[name] == to:
            return name
        if (name, to) not in cache:
            source = cast_inputs.get(name, name)  # cast a Cast's input, not its output
            if source != name and stored.get(source, state.types.get(source)) == to:
                cache[(name, to)] = source
            else:
                out = _unique(state, f"{name}_{_SHORT[to]}")
                nodes.append(helper.make_node("Cast", [source], [out], to=to, name=_unique(state, f"cast_{out}")))
                state.casts += 1
                cache[(name, to)] = out
                inserted.add(out)
        return cache[(name, to)]

    schema_cache: dict[str, onnx.defs.OpSchema | None] = {}
    for node in list(graph.node):
        convert = state.decisions[_key(node)] is None
        schema = _schema(node, state.opset, schema_cache)
        for index, name in enumerate(node.input):
            if name and name in stored:
                formal = _formal(list(schema.inputs), index) if schema else None
                wants_low = convert and formal is not None and not formal.type_str.startswith("tensor(")
                node.input[index] = cast(name, state.low if wants_low else FLOAT)
        if convert:
            _convert_attributes(node, state)
        for attr in node.attribute:
            subs = [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)
            for sub in subs:
                _convert_graph(sub, state, io_type=state.low if convert else FLOAT, top=False, outer=stored,
                               cache=cache)
        for index, name in enumerate(node.output):
            if name and state.types.get(name) == FLOAT:
                formal = _formal(list(schema.outputs), index) if schema else None
                low = convert and formal is not None and not formal.type_str.startswith("tensor(")
                stored[name] = state.low if low else FLOAT
        if node.op_type == "Cast" and node.output:
            cast_inputs[node.output[0]] = node.input[0]
        nodes.append(node)
    made = {key: out for key, out in cache.items() if out in inserted}
    _finish_outputs(graph, state, nodes, stored, io_type, top, cast, made)
    del graph.node[:]
    graph.node.extend(nodes)
    for info in graph.value_info:
        if info.name in stored and info.type.HasField("tensor_type"):
            info.type.tensor_type.elem_type = stored[info.name]


def _finish_outputs(graph: GraphProto, state: _State, nodes: list[NodeProto], stored: dict[str, int],
                    io_type: int, top: bool, cast: Callable[[str, int], str],
                    made: dict[tuple[str, int], str]) -> None:
    """Give every float graph output ``io_type``: a subgraph's output is renamed to a cast,
    the main graph's keeps its name (users feed on names) and the value inside is renamed;
    a cast to ``io_type`` already added for another reader (``made``) is reused."""
    for info in graph.output:
        name = info.name
        if name not in stored or stored[name] == io_type:
            if name in stored:
                info.type.tensor_type.elem_type = io_type
            continue
        if not top:
            info.name = cast(name, io_type)
        else:
            inner = _unique(state, f"{name}_{_SHORT[stored[name]]}")
            _rename(graph, nodes, name, inner)
            if (name, io_type) in made:  # that cast now writes the output; its readers read it by that name
                _rename(graph, nodes, made[(name, io_type)], name)
            else:
                nodes.append(helper.make_node("Cast", [inner], [name], to=io_type, name=_unique(state, f"cast_{name}")))
                state.casts += 1
            stored[inner] = stored[name]
            for vi in graph.value_info:
                if vi.name == name:
                    vi.name = inner
        info.type.tensor_type.elem_type = io_type


def _rename(graph: GraphProto, nodes: list[NodeProto], old: str, new: str) -> None:
    for node in nodes:
        for names in (node.input, node.output):
            for index, name in enumerate(names):
                if name == old:
                    names[index] = new
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)):
                _rename(sub, list(sub.node), old, new)
                for info in sub.output:
                    if info.name == old:  # a body output read straight from the outer scope
                        info.name = new


def _uses(graph: GraphProto) -> dict[str, list[NodeProto]]:
    """Value name -> nodes reading it, in ``graph`` and (as outer-scope reads) its subgraphs."""
    uses: dict[str, list[NodeProto]] = {}
    for sub in _graphs(graph):
        for node in sub.node:
            for name in node.input:
                uses.setdefault(name, []).append(node)
    return uses


def _schema(node: NodeProto, opset: int, cache: dict[str, onnx.defs.OpSchema | None]) -> onnx.defs.OpSchema | None:
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type not in cache:
        try:
            cache[node.op_type] = onnx.defs.get_schema(node.op_type, opset, "")
        except onnx.defs.SchemaError:
            cache[node.op_type] = None
    return cache[node.op_type]


def _convert_attributes(node: NodeProto, state: _State) -> None:
    """Dtype attributes and constant tensors of a converting node, in the target type."""
    label = node.output[0] if node.output else node.name
    for attr in node.attribute:
        if (node.op_type, attr.name) in _DTYPE_ATTRIBUTES and attr.i == FLOAT:
            attr.i = state.low
        elif node.op_type in ("Constant", "ConstantOfShape") and attr.type == AttributeProto.TENSOR \
                and attr.t.data_type == FLOAT:
            new, loss = convert_tensor(attr.t, state.dtype, max_finite=state.max_finite,
                                       min_positive=state.min_positive)
            attr.t.CopyFrom(new)
            state.losses.append(TensorLoss(label, loss.clipped, loss.flushed))
    scalars = [a for a in node.attribute if a.name in ("value_float", "value_floats")]
    if node.op_type == "Constant" and scalars:
        attr = scalars[0]
        values = [attr.f] if attr.name == "value_float" else list(attr.floats)
        tensor = helper.make_tensor(label, FLOAT, [] if attr.name == "value_float" else [len(values)], values)
        new, loss = convert_tensor(tensor, state.dtype, max_finite=state.max_finite, min_positive=state.min_positive)
        node.attribute.remove(attr)
        node.attribute.append(helper.make_attribute("value", new))
        state.losses.append(loss)
    if node.op_type == "ConstantOfShape" and not any(a.name == "value" for a in node.attribute) \
            and node.output and state.types.get(node.output[0]) == FLOAT:
        zero = helper.make_tensor("value", FLOAT, [1], [0.0])
        node.attribute.append(helper.make_attribute("value", convert_tensor(
            zero, state.dtype, max_finite=state.max_finite, min_positive=state.min_positive)[0]))


# -- checking -------------------------------------------------------------------------------
_NODE_IN_MESSAGE = re.compile(r"node name: ([^)\s]+)\)|[Nn]ode \(([^)]*)\)|node ([^\s:]+)")


def _check(model: ModelProto, dtype: str) -> None:
    """Refuse to return an invalid model: the checker's complaint, with the node it names."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        match = _NODE_IN_MESSAGE.search(str(exc))
        node = next((g for g in match.groups() if g), None) if match else None
        where = f"at node {node!r}" if node else "(no node named by the checker)"
        raise InvalidGraphError(f"{dtype} conversion produced an invalid model {where}: {exc}", node=node) from exc
