"""What ``compile`` decided for a group, as plain data that survives a round trip through JSON.

A plan is what an exported blob carries instead of the group's nodes: for an elementwise
group its lowered :class:`~epoxy.kit.elementwise.Program` (so importing skips lowering and
code generation), for a Conv(+BatchNorm)(+Relu) group nothing beyond its kind (weights are
folded again from the graph's constants, a numpy step), for a CUDA-graph region the step
sequence. Reading checks every field (:class:`PlanError`): a plan never names an op outside
the elementwise table, nor an operand that does not exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from epoxy.contract import SubgraphSpec
from epoxy.kit import group_fingerprint
from epoxy.kit.elementwise import OPS, Instr, Program


class PlanError(ValueError):
    """A plan that is not one :func:`to_json` wrote; the message says which field."""


@dataclass(frozen=True)
class EwPlan:
    """A fused elementwise kernel: the program, which boundary inputs it loads, out dtypes."""

    program: Program
    used: tuple[int, ...]
    out_dtypes: tuple[str, ...]


@dataclass(frozen=True)
class Step:
    """One step of a region: ``kind`` ``ew`` (with ``ew``), ``conv`` or ``node`` (a claimed
    single node's kernel); ``nodes`` are graph node indices, ``ins``/``outs`` value names."""

    kind: str
    nodes: tuple[int, ...]
    ins: tuple[str, ...]
    outs: tuple[str, ...]
    ew: EwPlan | None = None


@dataclass(frozen=True)
class GroupPlan:
    """A compiled group: ``kind`` ``ew`` / ``conv`` / ``region``."""

    kind: str
    ew: EwPlan | None = None
    steps: tuple[Step, ...] = field(default_factory=tuple)


# ---------------------------------------------------------------------------- to JSON
def _value(v: Any) -> Any:
    return [_value(x) for x in v] if isinstance(v, (tuple, list)) else v


def program_to_json(p: Program) -> dict[str, Any]:
    return {"n_inputs": p.n_inputs, "outputs": list(p.outputs),
            "instrs": [[i.op, _value(i.args), _value(i.attrs)] for i in p.instrs], "key": p.key}


def _ew_json(e: EwPlan) -> dict[str, Any]:
    return {"program": program_to_json(e.program), "used": list(e.used), "out_dtypes": list(e.out_dtypes)}


def to_json(plan: GroupPlan) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": plan.kind}
    if plan.ew is not None:
        out["ew"] = _ew_json(plan.ew)
    if plan.steps:
        out["steps"] = [{"kind": s.kind, "nodes": list(s.nodes), "ins": list(s.ins), "outs": list(s.outs),
                         **({"ew": _ew_json(s.ew)} if s.ew is not None else {})} for s in plan.steps]
    return out


# ---------------------------------------------------------------------------- from JSON
def _tuple(v: Any) -> Any:
    return tuple(_tuple(x) for x in v) if isinstance(v, list) else v


def _ints(v: Any, what: str) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
        raise PlanError(f"{what} is not a list of indices")
    return tuple(v)


def _names(v: Any, what: str) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise PlanError(f"{what} is not a list of value names")
    return tuple(v)


def program_from_json(d: Any) -> Program:
    """The program, checked: known ops with their arity, operands that exist, same key."""
    try:
        n_inputs, outputs, raw = int(d["n_inputs"]), _ints(d["outputs"], "program outputs"), d["instrs"]
        instrs: list[Instr] = []
        for op, args, attrs in raw:
            if op not in OPS:
                raise PlanError(f"program uses op {op!r}, not an elementwise op")
            args, attrs = _tuple(args), _tuple(attrs)
            arity = OPS[op].arity
            if arity is not None and arity >= 0 and len(args) != arity:
                raise PlanError(f"program's {op} has {len(args)} operands, expected {arity}")
            for kind, val in args:
                ok = (kind == "in" and isinstance(val, int) and 0 <= val < n_inputs
                      or kind == "t" and isinstance(val, int) and 0 <= val < len(instrs)
                      or kind == "lit" and isinstance(val, (int, float)))
                if not ok:
                    raise PlanError(f"program's {op} reads operand {(kind, val)!r}, which does not exist")
            instrs.append(Instr(op, args, attrs))
        if any(t >= len(instrs) for t in outputs):
            raise PlanError("program outputs name a missing instruction")
        program = Program(n_inputs, tuple(instrs), outputs)
    except PlanError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise PlanError(f"program is not valid ({type(exc).__name__}: {exc})") from None
    if program.key != d.get("key"):
        raise PlanError("program's key differs from the recorded one (the plan was altered)")
    return program


def _ew_from(d: Any) -> EwPlan:
    if not isinstance(d, Mapping):
        raise PlanError("elementwise plan is not an object")
    program = program_from_json(d.get("program"))
    used = _ints(d.get("used"), "ew used inputs")
    if len(used) != program.n_inputs:
        raise PlanError("ew plan loads a different number of inputs than its program")
    return EwPlan(program, used, _names(d.get("out_dtypes"), "ew out dtypes"))


def from_json(d: Any) -> GroupPlan:
    """The plan :func:`to_json` wrote (:class:`PlanError` otherwise)."""
    if not isinstance(d, Mapping) or d.get("kind") not in ("ew", "conv", "region"):
        raise PlanError("plan has no known kind (ew, conv, region)")
    kind = d["kind"]
    if kind == "ew":
        return GroupPlan("ew", ew=_ew_from(d.get("ew")))
    if kind == "conv":
        return GroupPlan("conv")
    steps = []
    for s in d.get("steps") or []:
        if not isinstance(s, Mapping) or s.get("kind") not in ("ew", "conv", "node"):
            raise PlanError("region step has no known kind (ew, conv, node)")
        ew = _ew_from(s.get("ew")) if s["kind"] == "ew" else None
        steps.append(Step(s["kind"], _ints(s.get("nodes"), "step nodes"), _names(s.get("ins"), "step inputs"),
                          _names(s.get("outs"), "step outputs"), ew))
    return GroupPlan("region", steps=tuple(steps))


# ---------------------------------------------------------------------------- the group's identity
def fingerprint(subgraph: SubgraphSpec) -> str:
    """Digest of the group a plan is for (``epoxy.kit.group_fingerprint``: its nodes, the
    constants they read, its boundary and the boundary's types)."""
    return group_fingerprint(subgraph)


def static_shape(graph: Any, name: str) -> tuple[int, ...] | None:
    shape = graph.value_type(name).shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(shape)
