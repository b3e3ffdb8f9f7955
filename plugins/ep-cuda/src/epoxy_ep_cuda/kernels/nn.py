"""MatMul/Gemm (cuBLAS via ``xp.matmul``), Conv (1x1 as GEMM, else im2col + GEMM), pooling,
normalization, softmax, LRN and reductions."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec

from .. import codegen
from ..ops_table import Ctx, F, I, dtype_name, register


def _rank(node: NodeSpec, i: int) -> int | None:
    if i >= len(node.input_types) or node.input_types[i].shape is None:
        return None
    return len(node.input_types[i].shape)


def _used_outputs(node: NodeSpec) -> int:
    return len([o for o in node.outputs if o])


# ----------------------------------------------------------------------------- MatMul / Gemm
@register("MatMul", dtypes=F)
def matmul(node: NodeSpec, ctx: Ctx) -> Any:
    return ctx.xp.matmul


_AFFINE_CACHE: dict[tuple[float, float], codegen.Program] = {}


def affine_program(alpha: float, beta: float) -> codegen.Program:
    """out = alpha * in0 + beta * in1 (literals folded away when 1)."""
    key = (alpha, beta)
    if key not in _AFFINE_CACHE:
        b = codegen.ProgramBuilder(2)
        a = ("in", 0) if alpha == 1.0 else b.add("Mul", [("in", 0), ("lit", alpha)])
        c = ("in", 1) if beta == 1.0 else b.add("Mul", [("in", 1), ("lit", beta)])
        _AFFINE_CACHE[key] = b.build([b.add("Add", [a, c])])
    return _AFFINE_CACHE[key]


@register("Gemm", dtypes=F)
def gemm(node: NodeSpec, ctx: Ctx) -> Any:
    xp, be = ctx.xp, ctx.be
    ta, tb = node.attr("transA", 0), node.attr("transB", 0)
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    prog = affine_program(alpha, beta)
    scale = None
    if alpha != 1.0:
        sb = codegen.ProgramBuilder(1)
        scale = sb.build([sb.add("Mul", [("in", 0), ("lit", alpha)])])

    def run(a: Any, b: Any, c: Any = None) -> Any:
        y = xp.matmul(a.T if ta else a, b.T if tb else b)
        if c is not None and beta != 0.0:
            return be.ew(prog, [y, c], [str(y.dtype)])[0]
        if scale is not None:
            return be.ew(scale, [y], [str(y.dtype)])[0]
        return y

    return run


# ----------------------------------------------------------------------------- Conv
def _conv_check(node: NodeSpec) -> str | None:
    r = _rank(node, 0) or _rank(node, 1)
    if r is not None and r != 4:
        return f"{node.op_type}: only 2-D (NCHW) on cuda, got rank {r}"
    if r is None:
        ks = node.attr("kernel_shape")
        if ks is None or len(ks) != 2:
            return f"{node.op_type}: rank unknown"
    return None


def resolve_pads(node: NodeSpec, in_hw: tuple[int, int], k: tuple[int, int], s: tuple[int, int],
                 d: tuple[int, int], ceil: bool = False) -> tuple[tuple[int, int, int, int], tuple[int, int]]:
    """(pads top, left, bottom, right) and output (oh, ow)."""
    auto = node.attr("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    pads = list(node.attr("pads", (0, 0, 0, 0)))
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = [math.ceil(in_hw[i] / s[i]) for i in range(2)]
        pads = [0, 0, 0, 0]
        for i in range(2):
            total = max(0, (out[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in_hw[i])
            small, big = total // 2, total - total // 2
            pads[i], pads[i + 2] = (small, big) if auto == "SAME_UPPER" else (big, small)
        return tuple(pads), tuple(out)  # type: ignore[return-value]
    if auto == "VALID":
        pads = [0, 0, 0, 0]
    out = []
    for i in range(2):
        span = in_hw[i] + pads[i] + pads[i + 2] - d[i] * (k[i] - 1) - 1
        o = (-(-span // s[i]) if ceil else span // s[i]) + 1
        if ceil and (o - 1) * s[i] >= in_hw[i] + pads[i]:
            o -= 1
        out.append(o)
    return tuple(pads), tuple(out)  # type: ignore[return-value]


def bias_relu_program(relu: bool, has_bias: bool) -> codegen.Program | None:
    if not relu and not has_bias:
        return None
    b = codegen.ProgramBuilder(2 if has_bias else 1)
    ref: Any = ("in", 0)
    if has_bias:
        ref = b.add("Add", [ref, ("in", 1)])
    if relu:
        ref = b.add("Relu", [ref])
    return b.build([ref])


def make_conv(node: NodeSpec, ctx: Ctx, *, relu: bool = False) -> Any:
    """Conv kernel ``(x, w, b=None)``; ``relu`` fuses a following Relu into the epilogue."""
    xp, be = ctx.xp, ctx.be
    group = int(node.attr("group", 1))
    strides = tuple(node.attr("strides", (1, 1)))
    dil = tuple(node.attr("dilations", (1, 1)))
    ks = node.attr("kernel_shape")

    def run(x: Any, w: Any, b: Any = None) -> Any:
        n, c, h, wd = x.shape
        m = w.shape[0]
        k = (int(w.shape[2]), int(w.shape[3])) if ks is None else (int(ks[0]), int(ks[1]))
        pads, (oh, ow) = resolve_pads(node, (h, wd), k, strides, dil)
        kg = (c // group) * k[0] * k[1]
        if group == 1 and k == (1, 1) and pads == (0, 0, 0, 0):
            xs = x if strides == (1, 1) else x[:, :, ::strides[0], ::strides[1]]
            xs = xp.ascontiguousarray(xs).reshape(n, c, oh * ow)
            y = xp.matmul(w.reshape(m, c), xs)
        else:
            cols = be.im2col(x, k, strides, pads, dil, (oh, ow))
            if group == 1:
                y = xp.matmul(w.reshape(m, kg), cols)
            else:
                y = xp.matmul(w.reshape(1, group, m // group, kg), cols.reshape(n, group, kg, oh * ow))
        y = y.reshape(n, m, oh, ow)
        prog = bias_relu_program(relu, b is not None)
        if prog is not None:
            ins = [y] if b is None else [y, b.reshape(1, m, 1, 1)]
            y = be.ew(prog, ins, [str(y.dtype)])[0]
        return y

    return run


@register("Conv", dtypes=F, check=_conv_check)
def conv(node: NodeSpec, ctx: Ctx) -> Any:
    return make_conv(node, ctx)


# ----------------------------------------------------------------------------- pooling
def _pool_check(node: NodeSpec) -> str | None:
    reason = _conv_check(node) if node.op_type not in ("GlobalAveragePool", "GlobalMaxPool") else None
    if reason:
        return reason
    if node.op_type == "MaxPool" and _used_outputs(node) > 1:
        return "MaxPool with Indices output"
    return None


def _pool(mode: str) -> Any:
    def factory(node: NodeSpec, ctx: Ctx) -> Any:
        be = ctx.be
        k = tuple(node.attr("kernel_shape"))
        s = tuple(node.attr("strides", (1, 1)))
        d = tuple(node.attr("dilations", (1, 1)))
        ceil = bool(node.attr("ceil_mode", 0))
        count_pad = bool(node.attr("count_include_pad", 0))

        def run(x: Any) -> Any:
            pads, out = resolve_pads(node, tuple(x.shape[2:]), k, s, d, ceil)
            return be.pool2d(x, mode, k, s, pads, d, out, count_pad)

        return run

    return factory


register("MaxPool", dtypes=F, check=_pool_check)(_pool("max"))
register("AveragePool", dtypes=F, check=_pool_check)(_pool("avg"))


@register(("GlobalAveragePool", "GlobalMaxPool"), dtypes=F, check=_pool_check)
def global_pool(node: NodeSpec, ctx: Ctx) -> Any:
    xp = ctx.xp
    fn = xp.mean if node.op_type == "GlobalAveragePool" else xp.max

    def run(x: Any) -> Any:
        axes = tuple(range(2, x.ndim))
        return fn(x, axis=axes, keepdims=True).astype(x.dtype, copy=False)

    return run


# ----------------------------------------------------------------------------- normalization
_MULADD = codegen.single_op_program("MulAdd", 3)


def bn_scale_shift(
    scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray, eps: float
) -> tuple[np.ndarray, np.ndarray]:
    s = scale.astype(np.float32) / np.sqrt(var.astype(np.float32) + np.float32(eps))
    return s, bias.astype(np.float32) - mean.astype(np.float32) * s


def _bn_check(node: NodeSpec) -> str | None:
    if _used_outputs(node) > 1 or node.attr("training_mode", 0):
        return "BatchNormalization in training mode"
    return None


@register("BatchNormalization", dtypes=F, check=_bn_check)
def batchnorm(node: NodeSpec, ctx: Ctx) -> Any:
    xp, be = ctx.xp, ctx.be
    eps = float(node.attr("epsilon", 1e-5))
    cached: dict[str, Any] = {}
    if all(i in ctx.consts for i in (1, 2, 3, 4)):
        s_h, t_h = bn_scale_shift(*(ctx.consts[i] for i in (1, 2, 3, 4)), eps)
    else:
        s_h = t_h = None

    def run(x: Any, scale: Any, bias: Any, mean: Any, var: Any) -> Any:
        shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        if s_h is not None:
            if str(x.dtype) not in cached:
                cached[str(x.dtype)] = (xp.asarray(s_h.astype(x.dtype)).reshape(shape),
                                        xp.asarray(t_h.astype(x.dtype)).reshape(shape))
            s, t = cached[str(x.dtype)]
        else:
            s = (scale.astype(np.float32) / xp.sqrt(var.astype(np.float32) + np.float32(eps)))
            t = (bias.astype(np.float32) - mean.astype(np.float32) * s).astype(x.dtype).reshape(shape)
            s = s.astype(x.dtype).reshape(shape)
        return be.ew(_MULADD, [x, s, t], [str(x.dtype)])[0]

    return run


def _ln_check(node: NodeSpec) -> str | None:
    if _used_outputs(node) > 1:
        return "LayerNormalization with Mean/InvStdDev outputs"
    return None


@register("LayerNormalization", dtypes=F, check=_ln_check)
def layernorm(node: NodeSpec, ctx: Ctx) -> Any:
    be = ctx.be
    axis = int(node.attr("axis", -1))
    eps = float(node.attr("epsilon", 1e-5))

    def run(x: Any, scale: Any, bias: Any = None) -> Any:
        ax = axis % x.ndim
        cols = int(np.prod(x.shape[ax:], dtype=np.int64))
        rows = x.size // cols if cols else 0
        g = scale.reshape(-1) if scale.size == cols else ctx.xp.broadcast_to(scale, x.shape[ax:]).reshape(-1)
        b = (
            None
            if bias is None
            else (bias.reshape(-1) if bias.size == cols else ctx.xp.broadcast_to(bias, x.shape[ax:]).reshape(-1))
        )
        return be.layernorm_rows(x.reshape(rows, cols), g, b, eps).reshape(x.shape)

    return run


@register("LRN", dtypes=F)
def lrn(node: NodeSpec, ctx: Ctx) -> Any:
    xp = ctx.xp
    size = int(node.attr("size"))
    alpha, beta, bias = float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75)), float(node.attr("bias", 1.0))
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2

    def run(x: Any) -> Any:
        xf = x.astype(np.float32)
        sq = xf * xf
        c = x.shape[1]
        pad = [(0, 0)] * x.ndim
        pad[1] = (lo, hi)
        sqp = xp.pad(sq, pad)
        acc = sqp[:, 0:c]
        for i in range(1, size):
            acc = acc + sqp[:, i:i + c]
        return (xf / (np.float32(bias) + np.float32(alpha / size) * acc) ** np.float32(beta)).astype(x.dtype)

    return run


# ----------------------------------------------------------------------------- softmax
def _softmax(log: bool) -> Any:
    def factory(node: NodeSpec, ctx: Ctx) -> Any:
        xp, be = ctx.xp, ctx.be
        legacy = node.opset < 13
        axis = int(node.attr("axis", 1 if legacy else -1))

        def run(x: Any) -> Any:
            ax = axis % x.ndim
            if legacy or ax == x.ndim - 1:
                cols = int(np.prod(x.shape[ax:], dtype=np.int64))
                rows = x.size // cols if cols else 0
                return be.softmax_rows(x.reshape(rows, cols), log).reshape(x.shape)
            moved = xp.moveaxis(x, ax, -1)
            shp = moved.shape
            y = be.softmax_rows(xp.ascontiguousarray(moved).reshape(-1, shp[-1]), log).reshape(shp)
            return xp.ascontiguousarray(xp.moveaxis(y, -1, ax))

        return run

    return factory


register("Softmax", dtypes=F)(_softmax(False))
register("LogSoftmax", dtypes=F)(_softmax(True))


# ----------------------------------------------------------------------------- reductions
_AXES_INPUT_FROM = {"ReduceSum": 13}


def _reduce(node: NodeSpec, ctx: Ctx) -> Any:
    xp = ctx.xp
    op = node.op_type
    keep = bool(node.attr("keepdims", 1))
    noop = bool(node.attr("noop_with_empty_axes", 0))
    axes_from_input = node.opset >= _AXES_INPUT_FROM.get(op, 18)
    attr_axes = node.attr("axes")

    def reduce(x: Any, axes_in: Any = None) -> Any:
        axes = (tuple(int(a) for a in np.asarray(axes_in).reshape(-1)) if axes_from_input and axes_in is not None
                else (tuple(attr_axes) if attr_axes is not None and not axes_from_input else None))
        if axes is not None and len(axes) == 0:
            axes = None
        if axes is None and noop and axes_from_input:
            return x
        ax = None if axes is None else tuple(a % x.ndim for a in axes)
        dt = x.dtype
        xf = x.astype(np.float32) if dt.kind == "f" else x
        if op == "ReduceSum":
            y = xp.sum(xf, axis=ax, keepdims=keep)
        elif op == "ReduceMean":
            y = xp.mean(xf, axis=ax, keepdims=keep)
        elif op == "ReduceMax":
            y = xp.max(x, axis=ax, keepdims=keep)
        elif op == "ReduceMin":
            y = xp.min(x, axis=ax, keepdims=keep)
        elif op == "ReduceProd":
            y = xp.prod(xf, axis=ax, keepdims=keep)
        elif op == "ReduceSumSquare":
            y = xp.sum(xf * xf, axis=ax, keepdims=keep)
        elif op == "ReduceL2":
            y = xp.sqrt(xp.sum(xf * xf, axis=ax, keepdims=keep))
        elif op == "ReduceL1":
            y = xp.sum(xp.abs(xf), axis=ax, keepdims=keep)
        else:  # ReduceLogSumExp
            m = xp.max(xf, axis=ax, keepdims=True)
            y = xp.log(xp.sum(xp.exp(xf - m), axis=ax, keepdims=True)) + m
            if not keep:
                y = xp.squeeze(y, axis=ax) if ax is not None else y.reshape(())
        return xp.asarray(y).astype(dt, copy=False)

    return reduce


register(("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL2",
          "ReduceL1", "ReduceLogSumExp"), dtypes=F | I, host_params=(1,))(_reduce)


def _arg_check(node: NodeSpec) -> str | None:
    return f"{node.op_type} with select_last_index" if node.attr("select_last_index", 0) else None


@register(("ArgMax", "ArgMin"), dtypes=F | I, check=_arg_check)
def argmax(node: NodeSpec, ctx: Ctx) -> Any:
    xp = ctx.xp
    axis, keep = int(node.attr("axis", 0)), bool(node.attr("keepdims", 1))
    fn = xp.argmax if node.op_type == "ArgMax" else xp.argmin

    def run(x: Any) -> Any:
        y = fn(x, axis=axis).astype(np.int64)
        return xp.expand_dims(y, axis % x.ndim) if keep else y

    return run


__all__ = ["I", "dtype_name"]
