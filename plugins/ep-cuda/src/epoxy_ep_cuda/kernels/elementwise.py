"""Elementwise ops: float ones become generated kernels (:mod:`codegen`), integer and
host-mode ones use the array module's ufuncs (shape arithmetic on int64)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported
from epoxy.kit.elementwise import bakeable, node_attrs

from .. import codegen
from ..ops_table import FIB, B, Ctx, F, I, dtype_name, register

EW_FLOAT_IN = frozenset({"float32", "float16", "bool"})
_PARAM_INPUTS = {"Clip": (1, 2)}  # inputs folded into attributes, not program inputs


def _dt(vt: Any) -> str | None:
    return dtype_name(vt.dtype) if vt is not None else None


def fusable(node: NodeSpec, consts: Mapping[int, np.ndarray] | None = None) -> bool:
    """True when ``node`` can be part of a generated float kernel."""
    op = node.op_type
    if op not in codegen.EW_OPS and op not in codegen.VARIADIC and op != "Cast":
        return False
    if not node.output_types or _dt(node.output_types[0]) not in {"float32", "float16", "bool"}:
        return False
    if len([o for o in node.outputs if o]) != 1:
        return False
    skip = _PARAM_INPUTS.get(op, ())
    for i, (name, vt) in enumerate(zip(node.inputs, node.input_types)):
        if not name or i in skip:
            continue
        dt = _dt(vt)
        allowed = codegen.LOADABLE if op in ("Cast", "Pow") and i == (0 if op == "Cast" else 1) else EW_FLOAT_IN
        if dt not in allowed:
            return False
    if op == "Clip" and node.opset >= 11:
        for i in (1, 2):
            if i < len(node.inputs) and node.inputs[i] and (consts is None or i not in consts):
                return False
    return True


def _rank(vt: Any) -> int | None:
    return None if vt is None or vt.shape is None else len(vt.shape)


def program_for_node(node: NodeSpec, consts: Mapping[int, np.ndarray]) -> tuple[codegen.Program, list[int]]:
    """A one-node program plus the node input positions it reads (constants baked in)."""
    skip = set(_PARAM_INPUTS.get(node.op_type, ()))
    out_rank = _rank(node.output_types[0]) if node.output_types else None
    present = [i for i, n in enumerate(node.inputs) if n and i not in skip]
    used: list[int] = []
    refs: list[tuple[str, Any]] = []
    for i in present:
        others = [_rank(node.input_types[j]) for j in present if j != i and j not in consts]
        c = consts.get(i)
        if bakeable(c, out_rank, others):
            refs.append(("lit", float(np.asarray(c, dtype=np.float64).reshape(-1)[0])))
        else:
            refs.append(("in", len(used)))
            used.append(i)
    b = codegen.ProgramBuilder(len(used))
    op = "Identity" if node.op_type == "Cast" else node.op_type
    return b.build([b.add(op, refs, node_attrs(node, consts))]), used


def _int_div(xp: Any, a: Any, b: Any) -> Any:
    if np.dtype(a.dtype).kind in "iu":
        q = xp.floor_divide(a, b)
        return q + ((xp.remainder(a, b) != 0) & ((a < 0) != (b < 0))).astype(q.dtype)
    return xp.divide(a, b)


def _fold(fn: Any) -> Any:
    def run(*xs: Any) -> Any:
        acc = xs[0]
        for x in xs[1:]:
            acc = fn(acc, x)
        return acc

    return run


def _xp_fn(node: NodeSpec, xp: Any) -> Any:
    op = node.op_type
    simple = {
        "Add": xp.add, "Sub": xp.subtract, "Mul": xp.multiply, "Neg": xp.negative, "Abs": xp.abs,
        "Equal": xp.equal, "Less": xp.less, "Greater": xp.greater, "LessOrEqual": xp.less_equal,
        "GreaterOrEqual": xp.greater_equal, "Not": xp.logical_not, "And": xp.logical_and,
        "Or": xp.logical_or, "Xor": xp.logical_xor, "Sign": xp.sign,
    }
    if op in simple:
        return simple[op]
    if op == "Div":
        return lambda a, b: _int_div(xp, a, b)
    if op in ("Max", "Min", "Sum"):
        return _fold({"Max": xp.maximum, "Min": xp.minimum, "Sum": xp.add}[op])
    if op == "Where":
        return xp.where
    if op == "Identity":
        return lambda x: x
    if op == "Relu":
        return lambda x: xp.maximum(x, 0).astype(x.dtype)
    if op == "Cast":
        to = np.dtype(dtype_name(node.output_types[0].dtype) or "float32")
        return lambda x: x.astype(to)
    if op == "Clip":
        def clip(x: Any, lo: Any = None, hi: Any = None) -> Any:
            lo_v = lo.reshape(()) if lo is not None else None
            hi_v = hi.reshape(()) if hi is not None else None
            out = x
            if lo_v is not None:
                out = xp.maximum(out, lo_v)
            if hi_v is not None:
                out = xp.minimum(out, hi_v)
            return out.astype(x.dtype)
        if node.opset < 11:
            lo_a, hi_a = node.attr("min"), node.attr("max")
            return lambda x: clip(x, None if lo_a is None else np.asarray(lo_a, x.dtype),
                                  None if hi_a is None else np.asarray(hi_a, x.dtype))
        return clip
    raise Unsupported(f"{op} on {dtype_name(node.input_types[0].dtype)}: no integer/host kernel")


def ew_factory(node: NodeSpec, ctx: Ctx) -> Any:
    xp = ctx.xp
    if not ctx.host_mode and fusable(node, ctx.consts):
        prog, used = program_for_node(node, ctx.consts)
        out_dt = [dtype_name(node.output_types[0].dtype)]
        be = ctx.be

        def run(*xs: Any) -> Any:
            return be.ew(prog, [xs[i] for i in used], out_dt)[0]

        return run
    fn = _xp_fn(node, xp)
    if node.op_type == "Clip" and node.opset >= 11:
        return lambda x, lo=None, hi=None: fn(x, lo, hi)
    return lambda *xs: xp.asarray(fn(*xs))


_FLOAT_UNARY = ("Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Floor", "Ceil", "Round",
                "Sin", "Cos", "Softplus", "Softsign", "LeakyRelu", "Elu", "Selu", "HardSigmoid", "HardSwish",
                "Gelu", "Relu", "PRelu", "Pow", "Mean")
register(_FLOAT_UNARY, dtypes=F)(ew_factory)
register(("Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Neg", "Abs", "Sign"), dtypes=F | I,
         host_capable=True)(ew_factory)
register("Clip", dtypes=F | I, host_params=(1, 2))(ew_factory)
register(("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"), dtypes=F | I | B, host_capable=True)(ew_factory)
register(("Not", "And", "Or", "Xor"), dtypes=B, host_capable=True)(ew_factory)
register("Where", dtypes=FIB, type_input=1, host_capable=True)(ew_factory)
register("Identity", dtypes=FIB, host_capable=True)(ew_factory)


def _cast_check(node: NodeSpec) -> str | None:
    to = dtype_name(node.output_types[0].dtype) if node.output_types else None
    if to not in FIB:
        return f"Cast to {to} not supported"
    return None


register("Cast", dtypes=FIB, host_capable=True, check=_cast_check)(ew_factory)
