"""Shape and data-movement ops. Most are ``host_capable``: when all their inputs are shape
values (host-resident int64 tensors) they run on the host with numpy, never touching the GPU."""

from __future__ import annotations

from typing import Any

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..ops_table import FIB, Ctx, I, dtype_name, register


def _ints(v: Any) -> list[int]:
    return [int(a) for a in np.asarray(v).reshape(-1)]


@register("Shape", dtypes=None, raw_inputs=(0,), host_capable=True)
def shape(node: NodeSpec, ctx: Ctx) -> Any:
    start, end = node.attr("start", 0), node.attr("end")

    def run(x: Any) -> np.ndarray:
        return np.array(x.shape[start:end], dtype=np.int64)

    return run


@register("Size", dtypes=None, raw_inputs=(0,), host_capable=True)
def size(node: NodeSpec, ctx: Ctx) -> Any:
    return lambda x: np.array(int(np.prod(x.shape, dtype=np.int64)), dtype=np.int64)


@register("Reshape", dtypes=FIB, host_params=(1,), host_capable=True)
def reshape(node: NodeSpec, ctx: Ctx) -> Any:
    allowzero = bool(node.attr("allowzero", 0))
    fixed = node.attr("shape")  # opset < 5

    def run(x: Any, shp: Any = None) -> Any:
        dims = _ints(fixed if shp is None else shp)
        if not allowzero:
            dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
        return ctx.xp.ascontiguousarray(x).reshape(dims)

    return run


@register("Flatten", dtypes=FIB, host_capable=True)
def flatten(node: NodeSpec, ctx: Ctx) -> Any:
    axis = int(node.attr("axis", 1))

    def run(x: Any) -> Any:
        a = axis % x.ndim if x.ndim else 0
        lead = int(np.prod(x.shape[:a], dtype=np.int64))
        return ctx.xp.ascontiguousarray(x).reshape(lead, -1 if lead else int(np.prod(x.shape[a:], dtype=np.int64)))

    return run


@register("Transpose", dtypes=FIB, host_capable=True)
def transpose(node: NodeSpec, ctx: Ctx) -> Any:
    perm = node.attr("perm")
    xp = ctx.xp
    return lambda x: xp.ascontiguousarray(xp.transpose(x, perm if perm is not None else None))


@register("Concat", dtypes=FIB, host_capable=True)
def concat(node: NodeSpec, ctx: Ctx) -> Any:
    axis = int(node.attr("axis", 0))
    xp = ctx.xp
    return lambda *xs: xp.concatenate([x for x in xs if x is not None], axis=axis)


@register("Slice", dtypes=FIB, host_params=(1, 2, 3, 4), host_capable=True)
def slice_(node: NodeSpec, ctx: Ctx) -> Any:
    legacy = node.opset < 10
    xp = ctx.xp

    def run(x: Any, starts: Any = None, ends: Any = None, axes: Any = None, steps: Any = None) -> Any:
        if legacy:
            starts, ends, axes, steps = node.attr("starts"), node.attr("ends"), node.attr("axes"), None
        st, en = _ints(starts), _ints(ends)
        ax = _ints(axes) if axes is not None else list(range(len(st)))
        sp = _ints(steps) if steps is not None else [1] * len(st)
        index = [slice(None)] * x.ndim
        for a, s, e, p in zip(ax, st, en, sp):
            index[a % x.ndim] = slice(s, e, p)
        return xp.ascontiguousarray(x[tuple(index)])

    return run


@register("Gather", dtypes=FIB, host_capable=True)
def gather(node: NodeSpec, ctx: Ctx) -> Any:
    axis = int(node.attr("axis", 0))
    xp = ctx.xp
    fixed = ctx.const(1)

    def run(data: Any, indices: Any) -> Any:
        dim = data.shape[axis]
        if fixed is not None and not ctx.host_mode:
            idx = indices  # a constant: normalized once below
            if (fixed < 0).any():
                idx = xp.asarray(np.where(fixed < 0, fixed + dim, fixed))
        elif ctx.host_mode:
            idx = np.where(indices < 0, indices + dim, indices)
        else:
            idx = xp.where(indices < 0, indices + dim, indices)
        return xp.take(data, idx, axis=axis)

    return run


def _axes_from(node: NodeSpec, value: Any) -> list[int] | None:
    if node.opset < 13:
        a = node.attr("axes")
        return None if a is None else list(a)
    return None if value is None else _ints(value)


@register("Squeeze", dtypes=FIB, host_params=(1,), host_capable=True)
def squeeze(node: NodeSpec, ctx: Ctx) -> Any:
    def run(x: Any, axes: Any = None) -> Any:
        ax = _axes_from(node, axes)
        if ax is None:
            return x.reshape([d for d in x.shape if d != 1])
        ax = {a % x.ndim for a in ax}
        return x.reshape([d for i, d in enumerate(x.shape) if i not in ax])

    return run


@register("Unsqueeze", dtypes=FIB, host_params=(1,), host_capable=True)
def unsqueeze(node: NodeSpec, ctx: Ctx) -> Any:
    def run(x: Any, axes: Any = None) -> Any:
        ax = _axes_from(node, axes) or []
        rank = x.ndim + len(ax)
        ax = sorted(a % rank for a in ax)
        dims = list(x.shape)
        for a in ax:
            dims.insert(a, 1)
        return x.reshape(dims)

    return run


@register("Expand", dtypes=FIB, host_params=(1,), host_capable=True)
def expand(node: NodeSpec, ctx: Ctx) -> Any:
    xp = ctx.xp

    def run(x: Any, shp: Any) -> Any:
        target = np.broadcast_shapes(tuple(x.shape), tuple(_ints(shp)))
        return xp.ascontiguousarray(xp.broadcast_to(x, target))

    return run


def _dropout_check(node: NodeSpec) -> str | None:
    if len([o for o in node.outputs if o]) > 1:
        return "Dropout with mask output"
    return None


@register("Dropout", dtypes=FIB, host_params=(1, 2), check=_dropout_check)
def dropout(node: NodeSpec, ctx: Ctx) -> Any:
    return lambda x, ratio=None, training=None: x


@register("Split", dtypes=FIB, host_params=(1,), host_capable=True)
def split(node: NodeSpec, ctx: Ctx) -> Any:
    axis = int(node.attr("axis", 0))
    n_out = len(node.outputs)
    xp = ctx.xp

    def run(x: Any, sizes: Any = None) -> tuple[Any, ...]:
        a = axis % x.ndim
        if node.opset < 13:
            sizes = node.attr("split")
        if sizes is None:
            num = int(node.attr("num_outputs", n_out))
            chunk = -(-x.shape[a] // num)
            sizes = [min(chunk, x.shape[a] - i * chunk) for i in range(num)]
        bounds = np.cumsum([0] + _ints(sizes))
        out = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            index = [slice(None)] * x.ndim
            index[a] = slice(int(lo), int(hi))
            out.append(xp.ascontiguousarray(x[tuple(index)]))
        return tuple(out)

    return run


@register("Tile", dtypes=FIB, host_params=(1,), host_capable=True)
def tile(node: NodeSpec, ctx: Ctx) -> Any:
    return lambda x, reps: ctx.xp.tile(x, _ints(reps))


def _value_attr(node: NodeSpec) -> np.ndarray:
    for key, dt in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                    ("value_int", np.int64), ("value_ints", np.int64)):
        v = node.attr(key)
        if v is not None:
            return np.asarray(v, dtype=dt)
    raise Unsupported(f"{node.op_type}: value attribute kind not supported on cuda")


@register("ConstantOfShape", dtypes=FIB, type_input=-1, host_params=(0,), host_capable=True)
def constant_of_shape(node: NodeSpec, ctx: Ctx) -> Any:
    v = node.attr("value")
    value = np.zeros(1, dtype=np.float32) if v is None else np.asarray(v).reshape(-1)
    xp = ctx.xp
    cache: list[Any] = []

    def run(shp: Any) -> Any:
        if cache:  # constant shape: the same (never mutated) value every run
            return cache[0]
        out = xp.full(tuple(_ints(shp)), value[0], dtype=value.dtype)
        if ctx.const(0) is not None:
            cache.append(out)
        return out

    return run


@register("Constant", dtypes=FIB, type_input=-1, host_capable=True)
def constant(node: NodeSpec, ctx: Ctx) -> Any:
    value = _value_attr(node)
    cache: list[Any] = []

    def run() -> Any:
        if not cache:
            cache.append(ctx.xp.asarray(value))
        return cache[0]

    return run


@register("Range", dtypes=FIB, host_params=(0, 1, 2), host_capable=True)
def range_(node: NodeSpec, ctx: Ctx) -> Any:
    def run(start: Any, limit: Any, delta: Any) -> Any:
        s, l_, d = (np.asarray(v).reshape(()) for v in (start, limit, delta))
        n = max(int(np.ceil((l_ - s) / d)), 0)
        return ctx.xp.asarray((s + np.arange(n, dtype=s.dtype) * d).astype(s.dtype))

    return run


@register("Pad", dtypes=FIB, host_params=(1, 2, 3), host_capable=True)
def pad(node: NodeSpec, ctx: Ctx) -> Any:
    mode = node.attr("mode", "constant")
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode != "constant":
        raise Unsupported(f"Pad mode {mode!r} (only constant on cuda)")
    xp = ctx.xp

    def run(x: Any, pads: Any = None, value: Any = None, axes: Any = None) -> Any:
        if node.opset < 11:
            pads, value = node.attr("pads"), node.attr("value", 0.0)
        p = _ints(pads)
        ax = _ints(axes) if axes is not None else list(range(x.ndim))
        width = [(0, 0)] * x.ndim
        half = len(p) // 2
        for k, a in enumerate(ax):
            width[a % x.ndim] = (p[k], p[k + half])
        cval = 0 if value is None else np.asarray(value).reshape(-1)[0] if np.asarray(value).size else 0
        return xp.pad(x, width, mode="constant", constant_values=cval)

    return run


__all__ = ["I", "dtype_name"]
