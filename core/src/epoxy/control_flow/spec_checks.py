"""What the ONNX spec requires of a control-flow node and its bodies, checked at session
creation, before anything runs.

A Loop whose condition is a float tensor would otherwise run for ever (1.0 is truthy and a
body that passes it through never stops), a body with fewer inputs or outputs than the node
feeds and reads would hand the kernel misplaced values or Nones. onnxruntime refuses such
models; so does epoxy, with an :class:`~epoxy.errors.InvalidGraphError` naming the node, the
input or body value, what it is and what the spec allows.

Type constraints come from the op's schema at the node's opset (``onnx.defs.get_schema``),
so they follow the spec as it changes. What the spec says only in prose, the body's formal
inputs and outputs, reuses the schema's constraint of the node input it mirrors: Loop's
iteration number is typed like ``M``, its body condition (in and out) like ``cond``; a
carried value keeps one type through the node and its body.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import onnx
import onnx_ir as ir

from ..contract import NodeSpec, ValueType
from ..errors import InvalidGraphError
from ..graph.graph_spec import CoreGraph, value_type_of
from ..graph.type_strings import type_string

#: type lists longer than this are shown as their first entries and a count
_SHOWN_TYPES = 6


@dataclass(frozen=True)
class _Formal:
    """One formal input of a schema: its name, the types it allows and whether it repeats."""

    name: str
    allowed: frozenset[str] | None
    variadic: bool


@dataclass(frozen=True)
class _Schema:
    since: int
    inputs: tuple[_Formal, ...]
    constraints: dict[str, frozenset[str]]


@cache
def _schema(op_type: str, opset: int, domain: str) -> _Schema | None:
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except Exception:  # noqa: BLE001 - no schema (a future opset): nothing to check against
        return None
    constraints = {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema.type_constraints}
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    inputs = tuple(
        _Formal(p.name, constraints.get(p.type_str, frozenset({p.type_str}) if "(" in p.type_str else None),
                p.option == variadic)
        for p in schema.inputs)
    return _Schema(schema.since_version, inputs, constraints)


def _known(vt: ValueType) -> str | None:
    """The value's type as the schema spells it, or None when inference left it open."""
    if vt.kind == "unknown" or (vt.kind == "tensor" and vt.dtype is None and not vt.elem_type):
        return None
    text = type_string(vt)
    return None if "unknown" in text else text


def _unwrapped(text: str) -> str:
    """``optional(T)`` -> ``T``."""
    while text.startswith("optional(") and text.endswith(")"):
        text = text[len("optional("):-1]
    return text


def _describe(types: frozenset[str]) -> str:
    names = sorted(types)
    if len(names) <= _SHOWN_TYPES:
        return " or ".join(names)
    return f"one of {len(names)} types ({', '.join(names[:_SHOWN_TYPES])}, ...)"


def _refuse(node: NodeSpec, text: str) -> InvalidGraphError:
    return InvalidGraphError(f"{node.op_type} node {node.name!r}: {text}", node=node.name)


class _Checker:
    """The checks of one node: its schema, its graph and a way to say what is wrong."""

    def __init__(self, node: NodeSpec, graph: CoreGraph) -> None:
        self.node = node
        self.graph = graph
        self.schema = _schema(node.op_type, node.opset, node.domain)
        self.where = "" if self.schema is None else f" (ONNX {node.op_type}-{self.schema.since})"

    def allowed(self, param: str) -> frozenset[str] | None:
        return None if self.schema is None else self.schema.constraints.get(param)

    def typed(self, what: str, vt: ValueType, allowed: frozenset[str] | None) -> None:
        got = _known(vt)
        if allowed is not None and got is not None and got not in allowed:
            raise _refuse(self.node, f"{what} is {got}; the spec{self.where} allows {_describe(allowed)}")

    def inputs(self, checked: Sequence[str]) -> None:
        """The explicit inputs named in ``checked`` against their type constraints."""
        if self.schema is None:
            return
        for index, (name, formal) in enumerate(zip(self.node.inputs, self.schema.inputs)):
            if name and formal.name in checked and not formal.variadic:
                self.typed(f"input {index} ({formal.name}) {name!r}", self.graph.value_type(name), formal.allowed)

    def body(self, attr: str) -> ir.Graph:
        body = self.node.attributes.get(attr)
        if not isinstance(body, ir.Graph):
            raise _refuse(self.node, f"attribute {attr!r} is missing or not a graph")
        return body

    def count(self, what: str, got: int, want: int, *, at_least: bool = False) -> None:
        if got < want or (got != want and not at_least):
            raise _refuse(self.node, f"{what} has {got}, the spec{self.where} requires "
                                     f"{'at least ' if at_least else ''}{want}")

    def produced(self, available: int, what: str) -> None:
        """The node reads no more outputs than its body produces (fewer is allowed)."""
        if len(self.node.outputs) > available:
            raise _refuse(self.node, f"has {len(self.node.outputs)} outputs but its body produces {available} "
                                     f"({what})")

    def same_type(self, what: str, types: Sequence[tuple[str, ValueType]]) -> None:
        """A carried value keeps one type: the node's input, the body's input and output
        (an optional may carry its contained type: ONNX's own Loop-16 cases do)."""
        known = [(name, text) for name, vt in types if (text := _known(vt)) is not None]
        if len({_unwrapped(text) for _, text in known}) > 1:
            listed = ", ".join(f"{name} is {text}" for name, text in known)
            raise _refuse(self.node, f"{what} changes type ({listed}); the spec{self.where} requires one type")


def _types(values: Sequence[ir.Value]) -> list[ValueType]:
    return [value_type_of(v) for v in values]


def _loop(c: _Checker) -> None:
    node = c.node
    body = c.body("body")
    n_carried = len(node.inputs) - 2
    if n_carried < 0:
        raise _refuse(node, f"has {len(node.inputs)} inputs; the spec{c.where} requires M and cond "
                            "(either may be empty) before the loop-carried values")
    c.count("its body's input list", len(body.inputs), n_carried + 2)
    c.count("its body's output list", len(body.outputs), n_carried + 1, at_least=True)
    c.produced(len(body.outputs) - 1, "loop-carried values and scan outputs, after the condition")
    ins, outs = _types(body.inputs), _types(body.outputs)
    c.typed(f"body input 0 (iteration number) {body.inputs[0].name!r}", ins[0], c.allowed("I"))
    c.typed(f"body input 1 (condition) {body.inputs[1].name!r}", ins[1], c.allowed("B"))
    c.typed(f"body output 0 (condition) {body.outputs[0].name!r}", outs[0], c.allowed("B"))
    for k in range(n_carried):
        outer = node.inputs[2 + k]
        c.same_type(f"loop-carried value {k}", [
            *([(repr(outer), c.graph.value_type(outer))] if outer else []),
            (f"body input {body.inputs[2 + k].name!r}", ins[2 + k]),
            (f"body output {body.outputs[1 + k].name!r}", outs[1 + k])])


def _if(c: _Checker) -> None:
    for attr in ("then_branch", "else_branch"):
        branch = c.body(attr)
        c.count(f"its {attr}'s input list", len(branch.inputs), 0)
        c.count(f"its {attr}'s output list", len(branch.outputs), len(c.node.outputs))


def _ints(c: _Checker, attr: str, count: int) -> None:
    values = c.node.attr(attr)
    if values is not None:
        c.count(f"attribute {attr}", len(list(values)), count)


def _scan(c: _Checker) -> None:
    node = c.node
    body = c.body("body")
    n_scan_in = int(node.attr("num_scan_inputs", 0))
    first = 1 if node.opset < 9 else 0  # Scan-8 takes sequence_lens first
    n_state = len(node.inputs) - first - n_scan_in
    if n_scan_in < 1 or n_state < 0:
        raise _refuse(node, f"num_scan_inputs={n_scan_in} does not fit its {len(node.inputs)} inputs; the "
                            f"spec{c.where} requires 1 to {len(node.inputs) - first}")
    c.count("its body's input list", len(body.inputs), n_state + n_scan_in)
    c.count("its body's output list", len(body.outputs), n_state, at_least=True)
    c.produced(len(body.outputs), "final states and scan outputs")
    n_scan_out = len(body.outputs) - n_state
    if node.opset < 9:
        _ints(c, "directions", n_scan_in)
    else:
        _ints(c, "scan_input_axes", n_scan_in)
        _ints(c, "scan_input_directions", n_scan_in)
        _ints(c, "scan_output_axes", n_scan_out)
        _ints(c, "scan_output_directions", n_scan_out)
    ins, outs = _types(body.inputs), _types(body.outputs)
    for k in range(n_state):
        outer = node.inputs[first + k]
        c.same_type(f"state value {k}", [
            *([(repr(outer), c.graph.value_type(outer))] if outer else []),
            (f"body input {body.inputs[k].name!r}", ins[k]),
            (f"body output {body.outputs[k].name!r}", outs[k])])


def _sequence_map(c: _Checker) -> None:
    body = c.body("body")
    c.count("its body's input list", len(body.inputs), len(c.node.inputs))
    c.count("its body's output list", len(body.outputs), len(c.node.outputs))


#: op_type -> the inputs whose type decides how the node iterates or branches, checked
#: against the schema. Others are left to the kernels, as before: a wrong type there (an
#: int32 Scan-8 ``sequence_lens``) does not make a run hang or branch on garbage.
_TYPED_INPUTS: dict[str, tuple[str, ...]] = {"Loop": ("M", "cond"), "If": ("cond",)}

#: op_type -> what its bodies must satisfy
_BODY_CHECKS: dict[str, Callable[[_Checker], None]] = {
    "Loop": _loop, "If": _if, "Scan": _scan, "SequenceMap": _sequence_map,
}


def check_node(node: NodeSpec, graph: CoreGraph) -> None:
    """Refuse a control-flow node the spec does not allow (see the module docstring)."""
    if node.domain not in ("", "ai.onnx"):
        return
    checker = _Checker(node, graph)
    checker.inputs(_TYPED_INPUTS.get(node.op_type, ()))
    body_check = _BODY_CHECKS.get(node.op_type)
    if body_check is not None:
        body_check(checker)
