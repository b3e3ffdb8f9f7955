"""The op table: which ONNX nodes translate to MIL, the checks that decide it, and the
builders that emit MIL ops with ``coremltools.converters.mil.Builder``.

Each entry has a ``check(node, facts) -> reason | None`` that runs at capability time without
coremltools (so declines are cheap and explain themselves), and a ``build(node, ctx)`` that
runs at compile time. Data tensors must be float32 (int32/int64/bool where noted), statically
shaped and of rank <= 5; weights (Conv/Gemm/normalization parameters, shapes, axes, pads,
indices) must be known at conversion time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec

from .facts import ANY, BOOL, FLOAT, INT, NUMERIC, Facts, _clamp_slice, _NotFoldable

Check = Callable[[NodeSpec, Facts], "str | None"]
Build = Callable[[NodeSpec, "BuildContext"], None]


@dataclass(frozen=True)
class OpDef:
    check: Check
    build: Build
    since: int = 1  # lowest ai.onnx opset handled


OPS: dict[str, OpDef] = {}


def register(*names: str, check: Check, since: int = 1) -> Callable[[Build], Build]:
    def deco(build: Build) -> Build:
        for name in names:
            OPS[name] = OpDef(check, build, since)
        return build
    return deco


def check_node(node: NodeSpec, facts: Facts) -> str | None:
    """None when the node translates; otherwise why not (shown in the partition report)."""
    if node.domain not in ("", "ai.onnx"):
        return f"domain {node.domain!r} is not translated to Core ML"
    entry = OPS.get(node.op_type)
    if entry is None:
        return f"{node.op_type} has no Core ML (MIL) translation"
    if node.opset < entry.since:
        return f"{node.op_type} before opset {entry.since} is not translated"
    if node.index in facts.folded:
        return None  # computed at conversion time, becomes a constant
    return entry.check(node, facts)


# ---------------------------------------------------------------------------- build context


class BuildContext:
    """State while building one MIL function: ONNX value name -> MIL Var or constant."""

    def __init__(self, mb: Any, types: Any, facts: Facts, opset: int) -> None:
        self.mb = mb
        self.types = types
        self.facts = facts
        self.opset = opset  # iOS MIL opset (15..18)
        self.vars: dict[str, Any] = {}

    def x(self, name: str) -> Any:
        """The MIL Var for ``name``, or a MIL-friendly numpy constant when it is known."""
        if name in self.vars:
            return self.vars[name]
        value = self.facts.value(name)
        if value is None:
            raise KeyError(f"value {name!r} is neither built nor known")
        return mil_const(value)

    def const(self, name: str) -> np.ndarray:
        value = self.facts.value(name)
        if value is None:
            raise KeyError(f"value {name!r} is not a constant")
        return mil_const(value)

    def shape(self, name: str) -> tuple[int, ...]:
        shape = self.facts.shape(name)
        if shape is None:
            raise KeyError(f"value {name!r} has no static shape")
        return shape

    def set(self, name: str, var: Any) -> None:
        if name:
            self.vars[name] = var


def mil_const(value: Any) -> np.ndarray:
    """numpy constant with a dtype MIL programs carry (int64 -> int32, float64 -> float32)."""
    arr = np.asarray(value)
    if arr.dtype == np.int64 or arr.dtype == np.uint64 or arr.dtype == np.uint32:
        return np.asarray(np.clip(arr, -(1 << 31), (1 << 31) - 1)).astype(np.int32)
    if arr.dtype in (np.int8, np.int16, np.uint8, np.uint16):
        return arr.astype(np.int32)
    if arr.dtype == np.float64:
        return arr.astype(np.float32)
    return arr


# ---------------------------------------------------------------------------- check helpers


def _in(node: NodeSpec, i: int) -> str:
    return node.inputs[i] if i < len(node.inputs) else ""


def require(
    node: NodeSpec,
    facts: Facts,
    *,
    data: Sequence[int] = (0,),
    consts: Sequence[int] = (),
    dtypes: frozenset[np.dtype] = FLOAT,
    out_dtypes: frozenset[np.dtype] | None = None,
    outputs: int = 1,
    variadic: bool = False,
) -> str | None:
    """Common checks: data inputs are static tensors of ``dtypes``; ``consts`` inputs (when
    present) are known at conversion time; only the first ``outputs`` outputs are used."""
    names = list(enumerate(node.inputs)) if variadic else [(i, _in(node, i)) for i in data]
    for i, name in names:
        if not name:
            continue
        problem = facts.tensor_problem(name, dtypes, f"input {i}")
        if problem:
            return problem
    for i in consts:
        name = _in(node, i)
        if name and not facts.is_known(name):
            return f"input {i} ({name!r}) must be a constant for Core ML (it is computed at run time)"
    for i, name in enumerate(node.outputs):
        if not name:
            continue
        if i >= outputs:
            if facts.used(name):
                return f"output {i} ({name!r}) is used but the Core ML translation only produces {outputs}"
            continue
        problem = facts.tensor_problem(name, out_dtypes or dtypes, f"output {i}")
        if problem:
            return problem
    return None


def _all(*checks: Check) -> Check:
    def check(node: NodeSpec, facts: Facts) -> str | None:
        for c in checks:
            r = c(node, facts)
            if r:
                return r
        return None
    return check


def _req(**kwargs: Any) -> Check:
    return lambda node, facts: require(node, facts, **kwargs)


def _rank(node: NodeSpec, facts: Facts, i: int = 0) -> int:
    shape = facts.shape(_in(node, i))
    return -1 if shape is None else len(shape)


# ---------------------------------------------------------------------------- elementwise


_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "real_div", "Pow": "pow"}
_COMPARE = {"Equal": "equal", "Greater": "greater", "Less": "less",
            "GreaterOrEqual": "greater_equal", "LessOrEqual": "less_equal"}
_LOGICAL = {"And": "logical_and", "Or": "logical_or", "Xor": "logical_xor"}


def _check_binary(node: NodeSpec, facts: Facts) -> str | None:
    dtypes = NUMERIC if node.op_type in ("Add", "Sub", "Mul") else FLOAT
    if node.op_type == "Pow":
        r = require(node, facts, data=(0,), dtypes=FLOAT)
        if r:
            return r
        y = _in(node, 1)
        if facts.is_known(y):
            return None
        return facts.tensor_problem(y, FLOAT, "input 1")
    if node.op_type == "Div" and facts.dtype(_in(node, 0)) in INT:
        return "integer Div truncates in ONNX; Core ML's integer division floors (not translated)"
    return require(node, facts, data=(0, 1), dtypes=dtypes)


@register(*_BINARY, check=_check_binary)
def _build_binary(node: NodeSpec, ctx: BuildContext) -> None:
    a, b = ctx.x(node.inputs[0]), ctx.x(node.inputs[1])
    if node.op_type == "Pow" and isinstance(b, np.ndarray):
        b = b.astype(np.float32)
    ctx.set(node.outputs[0], getattr(ctx.mb, _BINARY[node.op_type])(x=a, y=b))


@register(*_COMPARE, check=_req(data=(0, 1), dtypes=NUMERIC, out_dtypes=BOOL))
def _build_compare(node: NodeSpec, ctx: BuildContext) -> None:
    a, b = ctx.x(node.inputs[0]), ctx.x(node.inputs[1])
    ctx.set(node.outputs[0], getattr(ctx.mb, _COMPARE[node.op_type])(x=a, y=b))


@register(*_LOGICAL, check=_req(data=(0, 1), dtypes=BOOL))
def _build_logical(node: NodeSpec, ctx: BuildContext) -> None:
    a, b = ctx.x(node.inputs[0]), ctx.x(node.inputs[1])
    ctx.set(node.outputs[0], getattr(ctx.mb, _LOGICAL[node.op_type])(x=a, y=b))


@register("Not", check=_req(dtypes=BOOL))
def _build_not(node: NodeSpec, ctx: BuildContext) -> None:
    ctx.set(node.outputs[0], ctx.mb.logical_not(x=ctx.x(node.inputs[0])))


def _check_where(node: NodeSpec, facts: Facts) -> str | None:
    return (require(node, facts, data=(0,), dtypes=BOOL, out_dtypes=NUMERIC)
            or require(node, facts, data=(1, 2), dtypes=NUMERIC))


@register("Where", check=_check_where)
def _build_where(node: NodeSpec, ctx: BuildContext) -> None:
    c, a, b = (ctx.x(n) for n in node.inputs[:3])
    ctx.set(node.outputs[0], ctx.mb.select(cond=c, a=a, b=b))


_VARIADIC = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add"}


def _check_variadic(node: NodeSpec, facts: Facts) -> str | None:
    dtypes = FLOAT if node.op_type == "Mean" else NUMERIC
    return require(node, facts, dtypes=dtypes, variadic=True)


@register(*_VARIADIC, check=_check_variadic)
def _build_variadic(node: NodeSpec, ctx: BuildContext) -> None:
    fn = getattr(ctx.mb, _VARIADIC[node.op_type])
    values = [ctx.x(n) for n in node.inputs if n]
    acc = values[0]
    for v in values[1:]:
        acc = fn(x=acc, y=v)
    if len(values) == 1:
        acc = ctx.mb.identity(x=acc)
    if node.op_type == "Mean":
        acc = ctx.mb.mul(x=acc, y=np.float32(1.0 / len(values)))
    ctx.set(node.outputs[0], acc)


_UNARY = {
    "Abs": "abs", "Ceil": "ceil", "Floor": "floor", "Exp": "exp", "Log": "log", "Sqrt": "sqrt",
    "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan",
    "Sinh": "sinh", "Cosh": "cosh", "Tanh": "tanh", "Erf": "erf", "Sign": "sign",
    "Relu": "relu", "Sigmoid": "sigmoid", "Softsign": "softsign", "Softplus": "softplus",
}


@register(*_UNARY, check=_req())
def _build_unary(node: NodeSpec, ctx: BuildContext) -> None:
    ctx.set(node.outputs[0], getattr(ctx.mb, _UNARY[node.op_type])(x=ctx.x(node.inputs[0])))


@register("Neg", check=_req(dtypes=NUMERIC))
def _build_neg(node: NodeSpec, ctx: BuildContext) -> None:
    x = ctx.x(node.inputs[0])
    minus = np.float32(-1) if ctx.facts.dtype(node.inputs[0]) in FLOAT else np.int32(-1)
    ctx.set(node.outputs[0], ctx.mb.mul(x=x, y=minus))


@register("Reciprocal", check=_req())
def _build_reciprocal(node: NodeSpec, ctx: BuildContext) -> None:
    # not mb.inverse: it adds epsilon=1e-4 to the denominator
    ctx.set(node.outputs[0], ctx.mb.real_div(x=np.float32(1.0), y=ctx.x(node.inputs[0])))


def _check_identity(node: NodeSpec, facts: Facts) -> str | None:
    r = require(node, facts, dtypes=ANY)
    if r:
        return r
    if node.op_type == "Dropout":
        if node.opset >= 12 and _in(node, 2):
            training = facts.value(_in(node, 2))
            if training is None:
                return "Dropout training_mode must be a constant"
            if bool(np.asarray(training).reshape(-1)[0]):
                return "Dropout in training mode is not translated"
        if len(node.outputs) > 1 and facts.used(node.outputs[1]):
            return "Dropout mask output is not produced by the Core ML translation"
    return None


@register("Identity", "Dropout", check=_check_identity)
def _build_identity(node: NodeSpec, ctx: BuildContext) -> None:
    ctx.set(node.outputs[0], ctx.mb.identity(x=ctx.x(node.inputs[0])))


_CASTABLE = {np.dtype(np.float32): "fp32", np.dtype(np.int32): "int32", np.dtype(np.int64): "int32",
             np.dtype(np.bool_): "bool"}


@register("Cast", check=_req(dtypes=ANY))
def _build_cast(node: NodeSpec, ctx: BuildContext) -> None:
    target = _CASTABLE[np.dtype(ctx.facts.dtype(node.outputs[0]))]
    src = _CASTABLE[np.dtype(ctx.facts.dtype(node.inputs[0]))]
    x = ctx.x(node.inputs[0])
    if target == src:
        ctx.set(node.outputs[0], ctx.mb.identity(x=x))
        return
    if src == "fp32" and target == "int32":  # ONNX truncates toward zero; MIL cast too, made explicit
        x = ctx.mb.select(cond=ctx.mb.less(x=x, y=np.float32(0)), a=ctx.mb.ceil(x=x), b=ctx.mb.floor(x=x))
    ctx.set(node.outputs[0], ctx.mb.cast(x=x, dtype=target))


# ---------------------------------------------------------------------------- activations


@register("LeakyRelu", check=_req())
def _build_leaky_relu(node: NodeSpec, ctx: BuildContext) -> None:
    ctx.set(node.outputs[0], ctx.mb.leaky_relu(x=ctx.x(node.inputs[0]), alpha=np.float32(node.attr("alpha", 0.01))))


@register("Elu", check=_req())
def _build_elu(node: NodeSpec, ctx: BuildContext) -> None:
    ctx.set(node.outputs[0], ctx.mb.elu(x=ctx.x(node.inputs[0]), alpha=np.float32(node.attr("alpha", 1.0))))


@register("Selu", check=_req())
def _build_selu(node: NodeSpec, ctx: BuildContext) -> None:
    alpha = node.attr("alpha", 1.67326319217681884765625)
    gamma = node.attr("gamma", 1.05070102214813232421875)
    y = ctx.mb.elu(x=ctx.x(node.inputs[0]), alpha=np.float32(alpha))
    ctx.set(node.outputs[0], ctx.mb.mul(x=y, y=np.float32(gamma)))


@register("HardSigmoid", check=_req())
def _build_hard_sigmoid(node: NodeSpec, ctx: BuildContext) -> None:
    ctx.set(node.outputs[0], ctx.mb.sigmoid_hard(x=ctx.x(node.inputs[0]), alpha=np.float32(node.attr("alpha", 0.2)),
                                                 beta=np.float32(node.attr("beta", 0.5))))


@register("HardSwish", check=_req(), since=14)
def _build_hard_swish(node: NodeSpec, ctx: BuildContext) -> None:
    x = ctx.x(node.inputs[0])
    gate = ctx.mb.sigmoid_hard(x=x, alpha=np.float32(1.0 / 6.0), beta=np.float32(0.5))
    ctx.set(node.outputs[0], ctx.mb.mul(x=x, y=gate))


@register("ThresholdedRelu", check=_req())
def _build_thresholded_relu(node: NodeSpec, ctx: BuildContext) -> None:
    x = ctx.x(node.inputs[0])
    alpha = np.float32(node.attr("alpha", 1.0))
    # x if x > alpha else 0 (MIL's thresholded_relu keeps x == alpha)
    mask = ctx.mb.cast(x=ctx.mb.greater(x=x, y=alpha), dtype="fp32")
    ctx.set(node.outputs[0], ctx.mb.mul(x=x, y=mask))


@register("Mish", check=_req(), since=18)
def _build_mish(node: NodeSpec, ctx: BuildContext) -> None:
    x = ctx.x(node.inputs[0])
    ctx.set(node.outputs[0], ctx.mb.mul(x=x, y=ctx.mb.tanh(x=ctx.mb.softplus(x=x))))


def _check_gelu(node: NodeSpec, facts: Facts) -> str | None:
    if node.attr("approximate", "none") not in ("none", "tanh"):
        return f"Gelu approximate={node.attr('approximate')!r} is not translated"
    return require(node, facts)


@register("Gelu", check=_check_gelu, since=20)
def _build_gelu(node: NodeSpec, ctx: BuildContext) -> None:
    mode = "TANH_APPROXIMATION" if node.attr("approximate", "none") == "tanh" else "EXACT"
    ctx.set(node.outputs[0], ctx.mb.gelu(x=ctx.x(node.inputs[0]), mode=mode))


def _check_prelu(node: NodeSpec, facts: Facts) -> str | None:
    r = require(node, facts, data=(0,), consts=(1,))
    if r:
        return r
    slope, x = facts.shape(_in(node, 1)), facts.shape(_in(node, 0))
    try:
        np.broadcast_shapes(x, slope)  # type: ignore[arg-type]
    except ValueError:
        return f"PRelu slope shape {slope} does not broadcast to {x}"
    return None


@register("PRelu", check=_check_prelu)
def _build_prelu(node: NodeSpec, ctx: BuildContext) -> None:
    x = ctx.x(node.inputs[0])
    slope = ctx.const(node.inputs[1]).astype(np.float32)
    # relu(x) + slope * min(x, 0): valid for any broadcastable slope shape
    neg = ctx.mb.mul(x=ctx.mb.minimum(x=x, y=np.float32(0)), y=slope)
    ctx.set(node.outputs[0], ctx.mb.add(x=ctx.mb.relu(x=x), y=neg))


def _check_clip(node: NodeSpec, facts: Facts) -> str | None:
    return require(node, facts, data=(0,), consts=(1, 2))


@register("Clip", check=_check_clip)
def _build_clip(node: NodeSpec, ctx: BuildContext) -> None:
    x = ctx.x(node.inputs[0])
    if node.opset < 11:
        lo, hi = node.attr("min", None), node.attr("max", None)
    else:
        lo = None if not _in(node, 1) else float(ctx.const(node.inputs[1]).reshape(-1)[0])
        hi = None if not _in(node, 2) else float(ctx.const(node.inputs[2]).reshape(-1)[0])
    y = x
    if lo is not None:
        y = ctx.mb.maximum(x=y, y=np.float32(lo))
    if hi is not None:
        y = ctx.mb.minimum(x=y, y=np.float32(hi))
    if y is x:
        y = ctx.mb.identity(x=x)
    ctx.set(node.outputs[0], y)


def _softmax_axis(node: NodeSpec, facts: Facts) -> int:
    rank = _rank(node, facts)
    default = -1 if node.opset >= 13 else 1
    return node.attr("axis", default) % max(rank, 1)


@register("Softmax", "LogSoftmax", check=_req())
def _build_softmax(node: NodeSpec, ctx: BuildContext) -> None:
    name = node.inputs[0]
    x = ctx.x(name)
    shape = ctx.shape(name)
    axis = _softmax_axis(node, ctx.facts)
    coerce = node.opset < 13 and axis != len(shape) - 1
    if coerce:  # opset < 13: softmax over the flattened trailing dims
        x = ctx.mb.reshape(x=x, shape=list(shape[:axis]) + [int(np.prod(shape[axis:]))])
    if node.op_type == "Softmax":
        y = ctx.mb.softmax(x=x, axis=axis)
    else:
        # x - max - log(sum(exp(x - max))), stable
        shifted = ctx.mb.sub(x=x, y=ctx.mb.reduce_max(x=x, axes=[axis], keep_dims=True))
        lse = ctx.mb.log(x=ctx.mb.reduce_sum(x=ctx.mb.exp(x=shifted), axes=[axis], keep_dims=True))
        y = ctx.mb.sub(x=shifted, y=lse)
    if coerce:
        y = ctx.mb.reshape(x=y, shape=list(shape))
    ctx.set(node.outputs[0], y)


# ---------------------------------------------------------------------------- convolution


def _spatial_pads(node: NodeSpec, in_shape: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                  dilations: Sequence[int], out_shape: Sequence[int]) -> list[int] | str:
    """Explicit (begin, end) pads per spatial dim in MIL order ``[b0, e0, b1, e1, ...]``."""
    n = len(kernel)
    auto_pad = node.attr("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad in ("NOTSET", ""):
        pads = list(node.attr("pads", [0] * (2 * n)))
        return [v for i in range(n) for v in (int(pads[i]), int(pads[i + n]))]
    if auto_pad == "VALID":
        return [0] * (2 * n)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        return f"auto_pad={auto_pad!r} is not translated"
    result = []
    for i in range(n):
        total = max((out_shape[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_shape[i], 0)
        small, big = total // 2, total - total // 2
        result += [small, big] if auto_pad == "SAME_UPPER" else [big, small]
    return result


def _conv_params(node: NodeSpec, facts: Facts) -> dict[str, Any] | str:
    x_shape = facts.shape(_in(node, 0))
    w_shape = facts.shape(_in(node, 1))
    y_shape = facts.shape(node.outputs[0])
    if x_shape is None or w_shape is None or y_shape is None:
        return "static shapes needed"
    n = len(x_shape) - 2
    if n < 1 or n > 3:
        return f"{n}-D convolution is not translated (1-D to 3-D only)"
    kernel = list(node.attr("kernel_shape", w_shape[2:]))
    strides = list(node.attr("strides", [1] * n))
    dilations = list(node.attr("dilations", [1] * n))
    if node.op_type == "ConvTranspose":
        return {"n": n, "kernel": kernel, "strides": strides, "dilations": dilations}
    pads = _spatial_pads(node, x_shape[2:], kernel, strides, dilations, y_shape[2:])
    if isinstance(pads, str):
        return pads
    return {"n": n, "kernel": kernel, "strides": strides, "dilations": dilations, "pads": pads}


def _check_conv(node: NodeSpec, facts: Facts) -> str | None:
    r = require(node, facts, data=(0,), consts=(1, 2))
    if r:
        return r
    params = _conv_params(node, facts)
    if isinstance(params, str):
        return params
    if node.op_type == "ConvTranspose":
        plan = _convtranspose_plan(node, facts, params)
        return plan if isinstance(plan, str) else None
    return None


@register("Conv", check=_check_conv)
def _build_conv(node: NodeSpec, ctx: BuildContext) -> None:
    p = _conv_params(node, ctx.facts)
    assert isinstance(p, dict)
    kwargs: dict[str, Any] = {}
    if _in(node, 2):
        kwargs["bias"] = ctx.const(node.inputs[2]).astype(np.float32)
    y = ctx.mb.conv(x=ctx.x(node.inputs[0]), weight=ctx.const(node.inputs[1]).astype(np.float32),
                    strides=p["strides"], pad_type="custom", pad=p["pads"], dilations=p["dilations"],
                    groups=int(node.attr("group", 1)), **kwargs)
    ctx.set(node.outputs[0], y)


def _convtranspose_plan(node: NodeSpec, facts: Facts, p: dict[str, Any]) -> list[tuple[int, int]] | str:
    """(begin crop, output size) per spatial dim, cropping/padding the 'valid' result."""
    x_shape = facts.shape(_in(node, 0))
    y_shape = facts.shape(node.outputs[0])
    assert x_shape is not None and y_shape is not None
    n = p["n"]
    out_pad = list(node.attr("output_padding", [0] * n))
    auto_pad = node.attr("auto_pad", "NOTSET")
    pads = node.attr("pads", None)
    plan = []
    for i in range(n):
        full = (x_shape[2 + i] - 1) * p["strides"][i] + (p["kernel"][i] - 1) * p["dilations"][i] + 1
        out = y_shape[2 + i]
        if auto_pad in ("NOTSET", "", "VALID") and node.attr("output_shape") is None:
            begin = 0 if (pads is None or auto_pad == "VALID") else int(pads[i])
        else:
            total = full + out_pad[i] - out
            if total % 2:
                return "ConvTranspose with an odd total padding from auto_pad/output_shape is not translated"
            begin = total // 2
        if begin < 0 or out <= 0:
            return "ConvTranspose padding is not translated"
        plan.append((begin, out))
    return plan


@register("ConvTranspose", check=_check_conv)
def _build_conv_transpose(node: NodeSpec, ctx: BuildContext) -> None:
    p = _conv_params(node, ctx.facts)
    assert isinstance(p, dict)
    plan = _convtranspose_plan(node, ctx.facts, p)
    assert not isinstance(plan, str)
    x_shape = ctx.shape(node.inputs[0])
    n = p["n"]
    y = ctx.mb.conv_transpose(x=ctx.x(node.inputs[0]), weight=ctx.const(node.inputs[1]).astype(np.float32),
                              pad_type="valid", strides=p["strides"], dilations=p["dilations"],
                              groups=int(node.attr("group", 1)))
    full = [(x_shape[2 + i] - 1) * p["strides"][i] + (p["kernel"][i] - 1) * p["dilations"][i] + 1 for i in range(n)]
    extra = [max(begin + out - f, 0) for (begin, out), f in zip(plan, full)]
    if any(extra):
        y = ctx.mb.pad(x=y, pad=np.array([0, 0, 0, 0] + [v for e in extra for v in (0, e)], np.int32), mode="constant",
                       constant_val=np.float32(0))
    if any(begin != 0 or out != f + e for (begin, out), f, e in zip(plan, full, extra)):
        y_shape = ctx.shape(node.outputs[0])
        begin = [0, 0] + [b for b, _ in plan]
        end = list(y_shape[:2]) + [b + o for b, o in plan]
        y = ctx.mb.slice_by_index(x=y, begin=begin, end=end)
    if _in(node, 2):
        bias = ctx.const(node.inputs[2]).astype(np.float32).reshape([-1] + [1] * n)
        y = ctx.mb.add(x=y, y=bias)
    ctx.set(node.outputs[0], y)


# ---------------------------------------------------------------------------- linear algebra


def _check_gemm(node: NodeSpec, facts: Facts) -> str | None:
    r = require(node, facts, data=(0, 1, 2))
    if r:
        return r
    return None


@register("Gemm", check=_check_gemm)
def _build_gemm(node: NodeSpec, ctx: BuildContext) -> None:
    mb = ctx.mb
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    trans_a, trans_b = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))
    a = ctx.x(node.inputs[0])
    if trans_a:
        a = mb.transpose(x=a, perm=[1, 0])
    c_name = _in(node, 2)
    n = ctx.shape(node.outputs[0])[1]
    bias = None
    if c_name and ctx.facts.is_known(c_name) and beta != 0:
        c = ctx.const(c_name).astype(np.float32)
        if c.size in (1, n) and (c.ndim < 2 or c.shape[0] == 1):
            bias = np.broadcast_to(c.reshape(-1), (n,)).astype(np.float32) * np.float32(beta)
    if ctx.facts.is_known(node.inputs[1]):
        w = ctx.const(node.inputs[1]).astype(np.float32)
        weight = (w if trans_b else w.T) * np.float32(alpha)
        kwargs = {} if bias is None else {"bias": np.ascontiguousarray(bias)}
        y = mb.linear(x=a, weight=np.ascontiguousarray(weight), **kwargs)
    else:
        y = mb.matmul(x=a, y=ctx.x(node.inputs[1]), transpose_y=trans_b)
        if alpha != 1.0:
            y = mb.mul(x=y, y=np.float32(alpha))
        if bias is not None:
            y = mb.add(x=y, y=bias)
    if c_name and bias is None and beta != 0:
        c = ctx.x(c_name)
        if beta != 1.0:
            c = mb.mul(x=c, y=np.float32(beta))
        y = mb.add(x=y, y=c)
    ctx.set(node.outputs[0], y)


@register("MatMul", check=_req(data=(0, 1)))
def _build_matmul(node: NodeSpec, ctx: BuildContext) -> None:
    ctx.set(node.outputs[0], ctx.mb.matmul(x=ctx.x(node.inputs[0]), y=ctx.x(node.inputs[1])))


# ---------------------------------------------------------------------------- normalization


def _check_batchnorm(node: NodeSpec, facts: Facts) -> str | None:
    r = require(node, facts, data=(0,), consts=(1, 2, 3, 4))
    if r:
        return r
    if node.attr("training_mode", 0):
        return "BatchNormalization in training mode is not translated"
    if node.opset < 7 and not node.attr("is_test", 0):
        return "BatchNormalization before opset 7 needs is_test=1"
    if node.opset < 9 and node.attr("spatial", 1) != 1:
        return "BatchNormalization with spatial=0 is not translated"
    rank = _rank(node, facts)
    if rank < 2 or rank > 5:
        return f"BatchNormalization on rank {rank} is not translated"
    return None


@register("BatchNormalization", check=_check_batchnorm)
def _build_batchnorm(node: NodeSpec, ctx: BuildContext) -> None:
    x = ctx.x(node.inputs[0])
    shape = ctx.shape(node.inputs[0])
    scale, bias, mean, var = (ctx.const(n).astype(np.float32).reshape(-1) for n in node.inputs[1:5])
    if len(shape) == 2:
        x = ctx.mb.reshape(x=x, shape=list(shape) + [1])
    y = ctx.mb.batch_norm(x=x, mean=mean, variance=var, gamma=scale, beta=bias,
                          epsilon=np.float32(node.attr("epsilon", 1e-5)))
    if len(shape) == 2:
        y = ctx.mb.reshape(x=y, shape=list(shape))
    ctx.set(node.outputs[0], y)


def _check_instancenorm(node: NodeSpec, facts: Facts) -> str | None:
    r = require(node, facts, data=(0,), consts=(1, 2))
    if r:
        return r
    if _rank(node, facts) not in (3, 4):
        return "InstanceNormalization is translated for rank 3 and 4 only"
    return None


@register("InstanceNormalization", check=_check_instancenorm)
def _build_instancenorm(node: NodeSpec, ctx: BuildContext) -> None:
    scale, bias = (ctx.const(n).astype(np.float32).reshape(-1) for n in node.inputs[1:3])
    ctx.set(node.outputs[0], ctx.mb.instance_norm(x=ctx.x(node.inputs[0]), gamma=scale, beta=bias,
                                                  epsilon=np.float32(node.attr("epsilon", 1e-5))))


def _check_layernorm(node: NodeSpec, facts: Facts) -> str | None:
    return require(node, facts, data=(0,), consts=(1, 2), outputs=1)


@register("LayerNormalization", check=_check_layernorm, since=17)
def _build_layernorm(node: NodeSpec, ctx: BuildContext) -> None:
    shape = ctx.shape(node.inputs[0])
    axis = node.attr("axis", -1) % len(shape)
    norm_shape = tuple(shape[axis:])
    gamma = np.broadcast_to(ctx.const(node.inputs[1]).astype(np.float32), norm_shape)
    kwargs: dict[str, Any] = {"gamma": np.ascontiguousarray(gamma)}
    if _in(node, 2):
        kwargs["beta"] = np.ascontiguousarray(np.broadcast_to(ctx.const(node.inputs[2]).astype(np.float32), norm_shape))
    y = ctx.mb.layer_norm(x=ctx.x(node.inputs[0]), axes=list(range(axis, len(shape))),
                          epsilon=np.float32(node.attr("epsilon", 1e-5)), **kwargs)
    ctx.set(node.outputs[0], y)


def _check_lrn(node: NodeSpec, facts: Facts) -> str | None:
    r = require(node, facts)
    if r:
        return r
    if node.attr("size", 1) % 2 == 0:
        return "LRN with an even size is not translated (asymmetric window)"
    if _rank(node, facts) not in (3, 4):
        return "LRN is translated for rank 3 and 4 only"
    return None


@register("LRN", check=_check_lrn)
def _build_lrn(node: NodeSpec, ctx: BuildContext) -> None:
    ctx.set(node.outputs[0], ctx.mb.local_response_norm(
        x=ctx.x(node.inputs[0]), size=int(node.attr("size")), alpha=np.float32(node.attr("alpha", 1e-4)),
        beta=np.float32(node.attr("beta", 0.75)), k=np.float32(node.attr("bias", 1.0))))


# ---------------------------------------------------------------------------- pooling


def _check_pool(node: NodeSpec, facts: Facts) -> str | None:
    r = require(node, facts, outputs=1)
    if r:
        return r
    rank = _rank(node, facts)
    if rank not in (3, 4, 5):
        return f"{node.op_type} on rank {rank} is not translated"
    if node.op_type.startswith("Global"):
        return None
    if any(d != 1 for d in node.attr("dilations", [])):
        return f"{node.op_type} with dilations is not translated"
    if node.attr("storage_order", 0):
        return "MaxPool storage_order=1 is not translated"
    if node.op_type == "LpPool" and node.attr("p", 2) != 2:
        return "LpPool is translated for p=2 only"
    pads = _pool_pads(node, facts)
    if isinstance(pads, str):
        return pads
    if (node.op_type == "AveragePool" and node.attr("count_include_pad", 0)
            and pads != _pool_pads(node, facts, ceil_extension=False)):
        return "AveragePool with ceil_mode=1 and count_include_pad=1 is not translated"
    return None


def _pool_pads(node: NodeSpec, facts: Facts, *, ceil_extension: bool = True) -> list[int] | str:
    """Explicit pads; windows that ceil_mode adds (or that SAME/explicit pads imply) are
    expressed as extra end padding, which max/l2 pooling and padding-excluding averages ignore."""
    x_shape = facts.shape(_in(node, 0))
    y_shape = facts.shape(node.outputs[0])
    assert x_shape is not None and y_shape is not None
    kernel = list(node.attr("kernel_shape"))
    n = len(kernel)
    strides = list(node.attr("strides", [1] * n))
    pads = _spatial_pads(node, x_shape[2:], kernel, strides, [1] * n, y_shape[2:])
    if isinstance(pads, str) or not ceil_extension:
        return pads
    pads = list(pads)
    for i in range(n):
        covered = x_shape[2 + i] + pads[2 * i] + pads[2 * i + 1]
        need = (y_shape[2 + i] - 1) * strides[i] + kernel[i]
        if need > covered:
            pads[2 * i + 1] += need - covered
        elif (covered - kernel[i]) // strides[i] + 1 != y_shape[2 + i]:
            return f"{node.op_type} output size does not follow from its pads"
    return pads


@register("MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", check=_check_pool)
def _build_pool(node: NodeSpec, ctx: BuildContext) -> None:
    mb = ctx.mb
    x = ctx.x(node.inputs[0])
    rank = len(ctx.shape(node.inputs[0]))
    if node.op_type == "GlobalAveragePool":
        ctx.set(node.outputs[0], mb.reduce_mean(x=x, axes=list(range(2, rank)), keep_dims=True))
        return
    if node.op_type == "GlobalMaxPool":
        ctx.set(node.outputs[0], mb.reduce_max(x=x, axes=list(range(2, rank)), keep_dims=True))
        return
    kernel = [int(k) for k in node.attr("kernel_shape")]
    strides = [int(s) for s in node.attr("strides", [1] * len(kernel))]
    pads = _pool_pads(node, ctx.facts)
    assert not isinstance(pads, str)
    common = {"x": x, "kernel_sizes": kernel, "strides": strides, "pad_type": "custom", "pad": pads}
    if node.op_type == "MaxPool":
        y = mb.max_pool(**common)
    elif node.op_type == "AveragePool":
        y = mb.avg_pool(exclude_padding_from_average=not bool(node.attr("count_include_pad", 0)), **common)
    else:
        y = mb.l2_pool(**common)
    ctx.set(node.outputs[0], y)


# ---------------------------------------------------------------------------- shape ops


def _check_reshape_like(node: NodeSpec, facts: Facts) -> str | None:
    consts = (
        (1,)
        if node.op_type in ("Reshape", "Expand") or (node.op_type in ("Squeeze", "Unsqueeze") and node.opset >= 13)
        else ()
    )
    return require(node, facts, data=(0,), consts=consts, dtypes=ANY)


@register("Reshape", "Flatten", "Squeeze", "Unsqueeze", check=_check_reshape_like)
def _build_reshape(node: NodeSpec, ctx: BuildContext) -> None:
    out_shape = list(ctx.shape(node.outputs[0]))
    ctx.set(node.outputs[0], ctx.mb.reshape(x=ctx.x(node.inputs[0]), shape=np.array(out_shape, np.int32)))


@register("Expand", check=_check_reshape_like)
def _build_expand(node: NodeSpec, ctx: BuildContext) -> None:
    in_shape = list(ctx.shape(node.inputs[0]))
    out_shape = list(ctx.shape(node.outputs[0]))
    x = ctx.x(node.inputs[0])
    aligned = [1] * (len(out_shape) - len(in_shape)) + in_shape
    if aligned != in_shape:
        x = ctx.mb.reshape(x=x, shape=np.array(aligned, np.int32))
    reps = [o // a if a == 1 else 1 for a, o in zip(aligned, out_shape)]
    y = ctx.mb.tile(x=x, reps=np.array(reps, np.int32)) if any(r != 1 for r in reps) else ctx.mb.identity(x=x)
    ctx.set(node.outputs[0], y)


@register("Transpose", check=_req(dtypes=ANY))
def _build_transpose(node: NodeSpec, ctx: BuildContext) -> None:
    rank = len(ctx.shape(node.inputs[0]))
    perm = list(node.attr("perm", list(range(rank))[::-1]))
    ctx.set(node.outputs[0], ctx.mb.transpose(x=ctx.x(node.inputs[0]), perm=perm))


@register("Concat", check=lambda node, facts: require(node, facts, dtypes=ANY, variadic=True))
def _build_concat(node: NodeSpec, ctx: BuildContext) -> None:
    values = [ctx.x(n) for n in node.inputs if n and 0 not in ctx.shape(n)]
    rank = len(ctx.shape(node.outputs[0]))
    axis = node.attr("axis") % rank
    y = ctx.mb.concat(values=values, axis=axis) if len(values) > 1 else ctx.mb.identity(x=values[0])
    ctx.set(node.outputs[0], y)


def _split_sizes(node: NodeSpec, facts: Facts) -> list[int]:
    return [facts.shape(o)[node.attr("axis", 0) % len(facts.shape(o))] for o in node.outputs]  # type: ignore[index]


def _check_split(node: NodeSpec, facts: Facts) -> str | None:
    r = require(node, facts, data=(0,), consts=(1,), dtypes=ANY, outputs=len(node.outputs))
    if r:
        return r
    if any(s == 0 for s in _split_sizes(node, facts)):
        return "Split with empty outputs is not translated"
    return None


@register("Split", check=_check_split)
def _build_split(node: NodeSpec, ctx: BuildContext) -> None:
    rank = len(ctx.shape(node.inputs[0]))
    axis = node.attr("axis", 0) % rank
    sizes = _split_sizes(node, ctx.facts)
    if len(sizes) == 1:
        ctx.set(node.outputs[0], ctx.mb.identity(x=ctx.x(node.inputs[0])))
        return
    parts = ctx.mb.split(x=ctx.x(node.inputs[0]), split_sizes=np.array(sizes, np.int32), axis=axis)
    for name, part in zip(node.outputs, parts):
        ctx.set(name, part)


def _slice_spec(node: NodeSpec, facts: Facts) -> tuple[list[int], list[int], list[int], list[bool]] | str:
    shape = facts.shape(_in(node, 0))
    assert shape is not None
    rank = len(shape)
    try:
        if node.opset < 10:
            starts, ends = list(node.attr("starts")), list(node.attr("ends"))
            axes = list(node.attr("axes", range(len(starts))))
            steps = [1] * len(starts)
        else:
            def vals(i: int) -> list[int] | None:
                v = facts.value(_in(node, i)) if _in(node, i) else None
                return None if v is None else [int(t) for t in np.asarray(v).reshape(-1)]
            starts, ends = vals(1), vals(2)
            if starts is None or ends is None:
                return "Slice starts/ends must be constants"
            axes = vals(3) or list(range(len(starts)))
            steps = vals(4) or [1] * len(starts)
        begin, end, stride, end_mask = [0] * rank, list(shape), [1] * rank, [False] * rank
        for st, en, ax, sp in zip(starts, ends, axes, steps):
            ax %= rank
            b, e, s = _clamp_slice(st, en, sp, shape[ax])
            begin[ax], stride[ax] = b, s
            if e is None:
                end[ax], end_mask[ax] = 0, True
            else:
                end[ax] = e
    except _NotFoldable:
        return "Slice with step 0"
    return begin, end, stride, end_mask


def _check_slice(node: NodeSpec, facts: Facts) -> str | None:
    r = require(node, facts, data=(0,), consts=(1, 2, 3, 4), dtypes=ANY)
    if r:
        return r
    spec = _slice_spec(node, facts)
    if isinstance(spec, str):
        return spec
    out = facts.shape(node.outputs[0])
    if out is not None and 0 in out:
        return "Slice producing an empty tensor is not translated"
    return None


@register("Slice", check=_check_slice)
def _build_slice(node: NodeSpec, ctx: BuildContext) -> None:
    spec = _slice_spec(node, ctx.facts)
    assert not isinstance(spec, str)
    begin, end, stride, end_mask = spec
    y = ctx.mb.slice_by_index(x=ctx.x(node.inputs[0]), begin=np.array(begin, np.int32), end=np.array(end, np.int32),
                              stride=np.array(stride, np.int32), end_mask=end_mask)
    ctx.set(node.outputs[0], y)


def _check_gather(node: NodeSpec, facts: Facts) -> str | None:
    r = require(node, facts, data=(0,), consts=(1,), dtypes=ANY)
    if r:
        return r
    idx = facts.value(_in(node, 1))
    shape = facts.shape(_in(node, 0))
    assert shape is not None and idx is not None
    axis = node.attr("axis", 0) % len(shape)
    if idx.size and (idx.min() < -shape[axis] or idx.max() >= shape[axis]):
        return "Gather indices out of range"
    if idx.size == 0:
        return "Gather with empty indices is not translated"
    return None


@register("Gather", check=_check_gather)
def _build_gather(node: NodeSpec, ctx: BuildContext) -> None:
    shape = ctx.shape(node.inputs[0])
    axis = node.attr("axis", 0) % len(shape)
    idx = ctx.const(node.inputs[1]).astype(np.int64)
    idx = np.where(idx < 0, idx + shape[axis], idx).astype(np.int32)
    y = ctx.mb.gather(x=ctx.x(node.inputs[0]), indices=idx, axis=axis)
    if idx.ndim == 0 and len(ctx.shape(node.outputs[0])) != len(shape) - 1:
        y = ctx.mb.reshape(x=y, shape=list(ctx.shape(node.outputs[0])))
    ctx.set(node.outputs[0], y)


def _check_tile(node: NodeSpec, facts: Facts) -> str | None:
    return require(node, facts, data=(0,), consts=(1,), dtypes=ANY)


@register("Tile", check=_check_tile)
def _build_tile(node: NodeSpec, ctx: BuildContext) -> None:
    reps = ctx.const(node.inputs[1]).astype(np.int32).reshape(-1)
    ctx.set(node.outputs[0], ctx.mb.tile(x=ctx.x(node.inputs[0]), reps=reps))


def _check_pad(node: NodeSpec, facts: Facts) -> str | None:
    r = require(node, facts, data=(0,), consts=(1, 2, 3), dtypes=FLOAT)
    if r:
        return r
    mode = node.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        return f"Pad mode {mode!r} is not translated"
    pads = _pad_amounts(node, facts)
    if isinstance(pads, str):
        return pads
    if any(p < 0 for p in pads):
        return "Pad with negative pads (cropping) is not translated"
    rank = _rank(node, facts)
    if mode != "constant" and any(pads[: 2 * max(rank - 2, 0)]):
        return "reflect/edge Pad is translated on the last two dims only"
    return None


def _pad_amounts(node: NodeSpec, facts: Facts) -> list[int] | str:
    shape = facts.shape(_in(node, 0))
    assert shape is not None
    rank = len(shape)
    if node.opset < 11:
        raw = list(node.attr("pads"))
        axes = list(range(rank))
    else:
        raw = [int(v) for v in np.asarray(facts.value(_in(node, 1))).reshape(-1)]
        axes_v = facts.value(_in(node, 3)) if _in(node, 3) else None
        axes = list(range(rank)) if axes_v is None else [int(a) % rank for a in np.asarray(axes_v).reshape(-1)]
    n = len(axes)
    if len(raw) != 2 * n:
        return "Pad: pads length does not match axes"
    out = [0] * (2 * rank)
    for j, ax in enumerate(axes):
        out[2 * ax], out[2 * ax + 1] = raw[j], raw[j + n]
    return out


@register("Pad", check=_check_pad)
def _build_pad(node: NodeSpec, ctx: BuildContext) -> None:
    pads = _pad_amounts(node, ctx.facts)
    assert not isinstance(pads, str)
    mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}[node.attr("mode", "constant")]
    value = node.attr("value", 0.0) if node.opset < 11 else (
        float(ctx.const(node.inputs[2]).reshape(-1)[0]) if _in(node, 2) else 0.0)
    ctx.set(node.outputs[0], ctx.mb.pad(x=ctx.x(node.inputs[0]), pad=np.array(pads, np.int32), mode=mode,
                                        constant_val=np.float32(value)))


def _check_d2s(node: NodeSpec, facts: Facts) -> str | None:
    r = require(node, facts)
    if r:
        return r
    if _rank(node, facts) != 4:
        return f"{node.op_type} is translated for 4-D inputs only"
    return None


@register("DepthToSpace", check=_check_d2s)
def _build_depth_to_space(node: NodeSpec, ctx: BuildContext) -> None:
    b = int(node.attr("blocksize"))
    x = ctx.x(node.inputs[0])
    if node.attr("mode", "DCR") == "DCR":
        ctx.set(node.outputs[0], ctx.mb.depth_to_space(x=x, block_size=b))
        return
    n, c, h, w = ctx.shape(node.inputs[0])  # CRD: reshape / transpose / reshape
    y = ctx.mb.reshape(x=x, shape=[n, c // (b * b), b, b, h, w])
    y = ctx.mb.transpose(x=y, perm=[0, 1, 4, 2, 5, 3])
    ctx.set(node.outputs[0], ctx.mb.reshape(x=y, shape=[n, c // (b * b), h * b, w * b]))


@register("SpaceToDepth", check=_check_d2s)
def _build_space_to_depth(node: NodeSpec, ctx: BuildContext) -> None:
    ctx.set(node.outputs[0], ctx.mb.space_to_depth(x=ctx.x(node.inputs[0]), block_size=int(node.attr("blocksize"))))


# ---------------------------------------------------------------------------- reductions


_REDUCE = {
    "ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max", "ReduceMin": "reduce_min",
    "ReduceProd": "reduce_prod", "ReduceL1": "reduce_l1_norm", "ReduceL2": "reduce_l2_norm",
    "ReduceLogSumExp": "reduce_log_sum_exp", "ReduceSumSquare": "reduce_sum_square", "ReduceLogSum": "reduce_log_sum",
}
#: opset from which the op reads axes from input 1 instead of an attribute
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduce_axes(node: NodeSpec, facts: Facts) -> list[int] | None | str:
    """Axes reduced (None = all), or why they cannot be known."""
    rank = _rank(node, facts)
    if node.opset >= _AXES_INPUT_SINCE.get(node.op_type, 18):
        name = _in(node, 1)
        if not name:
            return [] if node.attr("noop_with_empty_axes", 0) else None
        value = facts.value(name)
        if value is None:
            return "reduction axes must be a constant"
        axes = [int(a) for a in np.asarray(value).reshape(-1)]
        if not axes:
            return [] if node.attr("noop_with_empty_axes", 0) else None
    else:
        attr = node.attr("axes")
        if attr is None:
            return None
        axes = [int(a) for a in attr]
    return sorted({a % rank for a in axes})


def _check_reduce(node: NodeSpec, facts: Facts) -> str | None:
    r = require(node, facts, data=(0,), dtypes=FLOAT)
    if r:
        return r
    axes = _reduce_axes(node, facts)
    if isinstance(axes, str):
        return axes
    if _rank(node, facts) == 0:
        return "reduction of a scalar is not translated"
    return None


@register(*_REDUCE, check=_check_reduce)
def _build_reduce(node: NodeSpec, ctx: BuildContext) -> None:
    axes = _reduce_axes(node, ctx.facts)
    assert not isinstance(axes, str)
    x = ctx.x(node.inputs[0])
    if axes == []:
        ctx.set(node.outputs[0], ctx.mb.identity(x=x))
        return
    rank = len(ctx.shape(node.inputs[0]))
    axes = list(range(rank)) if axes is None else axes
    keep = bool(node.attr("keepdims", 1))
    ctx.set(node.outputs[0], getattr(ctx.mb, _REDUCE[node.op_type])(x=x, axes=axes, keep_dims=keep))


def _check_arg(node: NodeSpec, facts: Facts) -> str | None:
    r = require(node, facts, data=(0,), dtypes=FLOAT, out_dtypes=INT)
    if r:
        return r
    if node.attr("select_last_index", 0):
        return f"{node.op_type} select_last_index=1 is not translated"
    return None


@register("ArgMax", "ArgMin", check=_check_arg)
def _build_arg(node: NodeSpec, ctx: BuildContext) -> None:
    fn = ctx.mb.reduce_argmax if node.op_type == "ArgMax" else ctx.mb.reduce_argmin
    rank = len(ctx.shape(node.inputs[0]))
    ctx.set(node.outputs[0], fn(x=ctx.x(node.inputs[0]), axis=node.attr("axis", 0) % rank,
                                keep_dims=bool(node.attr("keepdims", 1))))


def _check_cumsum(node: NodeSpec, facts: Facts) -> str | None:
    return require(node, facts, data=(0,), consts=(1,))


@register("CumSum", check=_check_cumsum)
def _build_cumsum(node: NodeSpec, ctx: BuildContext) -> None:
    rank = len(ctx.shape(node.inputs[0]))
    axis = int(ctx.const(node.inputs[1]).reshape(-1)[0]) % rank
    ctx.set(node.outputs[0], ctx.mb.cumsum(x=ctx.x(node.inputs[0]), axis=axis,
                                           exclusive=bool(node.attr("exclusive", 0)),
                                           reverse=bool(node.attr("reverse", 0))))


# ---------------------------------------------------------------------------- resize


def _resize_plan(node: NodeSpec, facts: Facts) -> tuple[str, int, int, bool] | str:
    """(mode, scale_h, scale_w, align_corners) for MIL upsample ops, or why not."""
    x_shape, y_shape = facts.shape(_in(node, 0)), facts.shape(node.outputs[0])
    assert x_shape is not None and y_shape is not None
    if len(x_shape) != 4:
        return "Resize is translated for 4-D (NCHW) inputs only"
    if tuple(x_shape[:2]) != tuple(y_shape[:2]):
        return "Resize of the batch or channel dimension is not translated"
    if node.op_type == "Upsample" or node.opset < 11:
        mode = node.attr("mode", "nearest")
        ctm, nearest_mode = "asymmetric", "floor"
    else:
        mode = node.attr("mode", "nearest")
        ctm = node.attr("coordinate_transformation_mode", "half_pixel")
        nearest_mode = node.attr("nearest_mode", "round_prefer_floor")
        if node.attr("antialias", 0):
            return "Resize antialias is not translated"
        if node.attr("axes") is not None and list(node.attr("axes")) not in ([2, 3], [-2, -1]):
            return "Resize axes other than the spatial ones are not translated"
        if node.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
            return "Resize keep_aspect_ratio_policy is not translated"
    h_in, w_in, h_out, w_out = x_shape[2], x_shape[3], y_shape[2], y_shape[3]
    if mode == "nearest":
        if h_out % h_in or w_out % w_in:
            return "nearest Resize is translated for integer upscales only"
        # integer upscales: half_pixel gives floor(x / scale) under every rounding mode
        ok = ctm in ("half_pixel", "pytorch_half_pixel") or (ctm == "asymmetric" and nearest_mode == "floor")
        if not ok:
            return (f"nearest Resize with coordinate_transformation_mode={ctm!r}, "
                    f"nearest_mode={nearest_mode!r} is not translated")
        return "nearest", h_out // h_in, w_out // w_in, False
    if mode in ("linear", "bilinear"):
        if node.op_type != "Upsample" and node.opset >= 11:
            scales = _resize_scales(node, facts)
            if scales is not None and (abs(scales[0] * h_in - h_out) > 1e-6 or abs(scales[1] * w_in - w_out) > 1e-6):
                return "linear Resize whose scales do not give the output size exactly is not translated"
        if ctm == "align_corners":
            return "linear", h_out, w_out, True
        if ctm in ("half_pixel", "pytorch_half_pixel"):
            if ctm == "pytorch_half_pixel" and (h_out == 1 or w_out == 1):
                return "pytorch_half_pixel Resize to size 1 is not translated"
            return "linear", h_out, w_out, False
        return f"linear Resize with coordinate_transformation_mode={ctm!r} is not translated"
    return f"Resize mode {mode!r} is not translated"


def _resize_scales(node: NodeSpec, facts: Facts) -> tuple[float, float] | None:
    name = _in(node, 2)
    value = facts.value(name) if name else None
    if value is None or np.asarray(value).size == 0:
        return None
    v = np.asarray(value, np.float64).reshape(-1)
    return float(v[-2]), float(v[-1])


def _check_resize(node: NodeSpec, facts: Facts) -> str | None:
    consts = (1,) if node.op_type == "Upsample" else (1, 2, 3)
    r = require(node, facts, data=(0,), consts=consts)
    if r:
        return r
    plan = _resize_plan(node, facts)
    return plan if isinstance(plan, str) else None


@register("Resize", "Upsample", check=_check_resize)
def _build_resize(node: NodeSpec, ctx: BuildContext) -> None:
    plan = _resize_plan(node, ctx.facts)
    assert not isinstance(plan, str)
    mode, sh, sw, align = plan
    x = ctx.x(node.inputs[0])
    if mode == "nearest":
        y = ctx.mb.upsample_nearest_neighbor(x=x, scale_factor_height=sh, scale_factor_width=sw)
    else:  # sh, sw are the output sizes here
        mode = "STRICT_ALIGN_CORNERS" if align else "UNALIGN_CORNERS"
        y = ctx.mb.resize_bilinear(x=x, target_size_height=sh, target_size_width=sw, sampling_mode=mode)
    ctx.set(node.outputs[0], y)


# ---------------------------------------------------------------------------- folded-only


def _folded_only(node: NodeSpec, facts: Facts) -> str | None:
    return f"{node.op_type} is translated only when its value is known at conversion time"


@register("Constant", "ConstantOfShape", "Shape", "Size", "Range", check=_folded_only)
def _build_nothing(node: NodeSpec, ctx: BuildContext) -> None:
    raise AssertionError("folded nodes are never built")


def supported_ops() -> list[str]:
    return sorted(OPS)

