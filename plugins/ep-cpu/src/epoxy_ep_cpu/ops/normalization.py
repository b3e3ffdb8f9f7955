"""Normalizations: BatchNormalization, InstanceNormalization, LayerNormalization,
GroupNormalization, RMSNormalization, LRN, LpNormalization, MeanVarianceNormalization."""

from __future__ import annotations

from typing import Any

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from .. import jit
from ..registry import KERNELS
from ._attr_checks import check_axis, check_static_axis, invalid, static_dim
from ._broadcast import fits_into
from ._conv_util import compute_dtype
from ._flags import flag
from ._util import constant_input

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _out_dtype(node: NodeSpec, index: int, default: np.dtype) -> np.dtype:
    if index < len(node.output_types) and node.output_types[index].dtype is not None:
        return np.dtype(node.output_types[index].dtype)
    return np.dtype(default)


def _channel_shape(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Per-channel parameter ``v`` broadcastable against ``x`` (N, C, ...). Parameters of
    the legacy non-spatial form (shape C x D1 x ...) broadcast as they are."""
    if v.ndim <= 1:
        return v.reshape((1, -1) + (1,) * max(0, x.ndim - 2)) if x.ndim >= 2 else v
    return v.reshape((1,) + v.shape)


def _stash_dtype(stash_type: int, x_dtype: np.dtype) -> np.dtype:
    if stash_type == 11:
        return _F64
    if x_dtype == _F64 and stash_type not in (1,):
        return _F64
    return _F32


# --------------------------------------------------------------------------- BatchNormalization


@KERNELS.register("BatchNormalization", (1, 6, 7, 9, 14, 15))
def batch_normalization(node: NodeSpec):
    eps = float(node.attr("epsilon", 1e-5))
    momentum = float(node.attr("momentum", 0.9))
    n_out = len(node.outputs)
    if node.opset >= 14:
        training = flag(node, "training_mode", 0)
    else:
        is_test = int(node.attr("is_test", 0)) if node.opset < 7 else 0
        training = n_out > 1 and not is_test

    def affine(cdt, sc, bc, mc, vc):
        """Inference BatchNorm as y = x * a + shift."""
        sc, bc = sc.astype(cdt, copy=False), bc.astype(cdt, copy=False)
        mc, vc = mc.astype(cdt, copy=False), vc.astype(cdt, copy=False)
        a = sc / np.sqrt(vc + cdt.type(eps))
        return a, bc - mc * a

    params = [constant_input(node, i) for i in range(1, 5)]
    packed = None
    compiled = None
    if not training and all(p is not None and p.dtype.kind == "f" for p in params):
        cdt0 = compute_dtype(params[0].dtype)
        packed = (cdt0, affine(cdt0, *params))  # scale/shift computed once
        module = jit.kernels("normalization")
        if module is not None and packed[1][0].ndim == 1:
            compiled = module.BatchNormKernel(*packed[1], jit.thread_count())

    def run(x, scale, b, mean, var, out=None):
        if compiled is not None and compiled.handles(x) and scale is params[0]:
            if out is not None and (out.dtype != x.dtype or out.shape != x.shape or not out.flags.c_contiguous):
                out = None
            y = compiled(x, out)
            return y if n_out == 1 else (y,) + (None,) * (n_out - 1)
        dtype = x.dtype
        cdt = compute_dtype(dtype)
        xc = x.astype(cdt, copy=False)
        if not training:
            a, shift = packed[1] if packed is not None and packed[0] == cdt else affine(cdt, scale, b, mean, var)
            if out is not None and x.dtype == cdt and out.dtype == cdt and out.shape == x.shape and x.ndim >= 2:
                y = np.multiply(xc, _channel_shape(x, a), out=out)
                y += _channel_shape(x, shift)
                return y
            y = np.multiply(xc, _channel_shape(x, a))
            y += _channel_shape(x, shift)
            return y.astype(dtype, copy=False) if n_out == 1 else (y.astype(dtype, copy=False),) + (None,) * (n_out - 1)
        sc, bc = scale.astype(cdt, copy=False), b.astype(cdt, copy=False)
        mc, vc = mean.astype(cdt, copy=False), var.astype(cdt, copy=False)
        eps_c = cdt.type(eps)
        axes = (0,) + tuple(range(2, x.ndim))
        cur_mean = xc.mean(axis=axes)
        cur_var = xc.var(axis=axes)
        a = sc / np.sqrt(cur_var + eps_c)
        shift = bc - cur_mean * a
        y = xc * _channel_shape(x, a)
        y += _channel_shape(x, shift)
        mom = cdt.type(momentum)
        run_mean = (mc * mom + cur_mean * (cdt.type(1) - mom)).astype(mean.dtype, copy=False)
        run_var = (vc * mom + cur_var * (cdt.type(1) - mom)).astype(var.dtype, copy=False)
        outs = [y.astype(dtype, copy=False), run_mean, run_var]
        if node.opset < 14:
            outs += [cur_mean.astype(mean.dtype, copy=False), cur_var.astype(var.dtype, copy=False)]
        outs = outs[:n_out]
        return outs[0] if n_out == 1 else tuple(outs)

    if not training and n_out == 1:
        run.supports_out = True  # type: ignore[attr-defined]
    return run


# --------------------------------------------------------------------------- Instance / Group


def _normalize(xc: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    mean = xc.mean(axis=axes, keepdims=True)
    d = xc - mean
    var = np.mean(np.square(d), axis=axes, keepdims=True)
    d *= 1 / np.sqrt(var + xc.dtype.type(eps))
    return d


@KERNELS.register("InstanceNormalization", (1, 6, 22))
def instance_normalization(node: NodeSpec):
    eps = float(node.attr("epsilon", 1e-5))

    def run(x, scale, b):
        cdt = compute_dtype(x.dtype)
        y = _normalize(x.astype(cdt, copy=False), tuple(range(2, x.ndim)), eps)
        y *= _channel_shape(x, scale.astype(cdt, copy=False))
        y += _channel_shape(x, b.astype(cdt, copy=False))
        return y.astype(x.dtype, copy=False)

    return run


@KERNELS.register("GroupNormalization", (18, 21))
def group_normalization(node: NodeSpec):
    eps = float(node.attr("epsilon", 1e-5))
    groups = node.attr("num_groups")
    if groups is None:
        raise Unsupported("GroupNormalization without num_groups")
    groups = int(groups)
    per_channel = node.opset >= 21
    stash = int(node.attr("stash_type", 1))
    _check_groups(node, groups, static_dim(node, 0, 1))

    def run(x, scale, b):
        n, c = x.shape[:2]
        _check_groups(node, groups, c)
        cdt = _stash_dtype(stash, x.dtype) if per_channel else compute_dtype(x.dtype)
        xg = x.astype(cdt, copy=False).reshape(n, groups, -1)
        y = _normalize(xg, (2,), eps).reshape(x.shape)
        if per_channel:
            y = y.astype(x.dtype, copy=False)
            sc = scale.reshape((1, c) + (1,) * (x.ndim - 2))
            bc = b.reshape((1, c) + (1,) * (x.ndim - 2))
        else:
            sc = np.repeat(scale.astype(cdt, copy=False), c // groups).reshape((1, c) + (1,) * (x.ndim - 2))
            bc = np.repeat(b.astype(cdt, copy=False), c // groups).reshape((1, c) + (1,) * (x.ndim - 2))
        y = y * sc.astype(y.dtype, copy=False) + bc.astype(y.dtype, copy=False)
        return y.astype(x.dtype, copy=False)

    return run


def _check_groups(node: NodeSpec, groups: int, channels: int | None) -> None:
    """``num_groups`` must split the channels evenly (else the reshape to groups fails, or
    a huge value asks numpy for an absurd shape)."""
    if groups < 1:
        raise invalid(node, f"attribute 'num_groups' = {groups} must be >= 1")
    if channels is not None and channels % groups:
        raise invalid(node, f"attribute 'num_groups' = {groups} does not divide the {channels} channels")


# --------------------------------------------------------------------------- Layer / RMS


def standardize(
    xc: np.ndarray, axis: int, eps: float, *, center: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normalize ``xc`` over axes ``axis..`` (a non-negative axis): ``(d, mean, inv_std)``
    with ``d = (xc - mean) * inv_std`` a fresh array the caller may scale in place and the
    statistics kept as dims. ``center=False`` is the RMS form (mean taken as 0, so
    ``inv_std = 1 / sqrt(mean(x^2) + eps)``; the returned mean is zeros)."""
    axes = tuple(range(axis, xc.ndim))
    cdt = xc.dtype
    if center:
        mean = xc.mean(axis=axes, keepdims=True)
        d = xc - mean
    else:
        mean = np.zeros(xc.shape[:axis] + (1,) * (xc.ndim - axis), dtype=cdt)
        d = xc.copy()
    inner = int(np.prod(xc.shape[axis:], dtype=np.int64))
    if inner and d.size and d.flags.c_contiguous:
        # sum of squares per row by einsum: no squared temporary
        rows = d.reshape(-1, inner)
        var = (np.einsum("ij,ij->i", rows, rows) / cdt.type(inner)).reshape(mean.shape)
    else:
        var = np.mean(np.square(d), axis=axes, keepdims=True)
    inv = 1 / np.sqrt(var + cdt.type(eps))
    d *= inv
    return d, mean, inv


#: input shapes per LayerNormalization node with a prepared jit call (dynamic axes see a few)
_PREPARED_PER_NODE = 16


@KERNELS.register("LayerNormalization", 17)
def layer_normalization(node: NodeSpec):
    eps = float(node.attr("epsilon", 1e-5))
    axis = int(node.attr("axis", -1))
    stash = int(node.attr("stash_type", 1))
    n_out = len(node.outputs)
    stat_dtype = _out_dtype(node, 1, _F32) if n_out > 1 else _F32
    check_static_axis(node, "axis", axis)
    compiled = jit.kernels("normalization")
    nthreads = jit.thread_count() if compiled is not None else 0
    # constant scale and bias (the usual case): a prepared call per input shape
    const_scale = constant_input(node, 1)
    const_bias = constant_input(node, 2) if len(node.inputs) > 2 and node.inputs[2] else None
    has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
    preparable = compiled is not None and const_scale is not None and (const_bias is not None or not has_bias)
    prepared: dict[tuple[int, ...], Any] = {}

    def prepare(x: np.ndarray, ax: int) -> Any:
        """The shape's prepared call, or None when the general path must run it."""
        if len(prepared) >= _PREPARED_PER_NODE:
            prepared.clear()
        ok = (compiled.handles(x, const_scale, const_bias, ax) and x.flags.c_contiguous
              and _stash_dtype(stash, x.dtype) == x.dtype)
        call = compiled.LayerNormCall(x.shape, x.dtype, ax, const_scale, const_bias, eps, nthreads) if ok else None
        prepared[x.shape] = call
        return call

    def run(x, scale, b=None):
        if preparable and scale is const_scale and b is const_bias:
            call = prepared.get(x.shape)
            if call is None and x.shape not in prepared:
                call = prepare(x, check_axis(node, "axis", axis, x.ndim))
            if call is not None and call.accepts(x):
                if n_out == 1:
                    return call.normalized(x)
                y, mean, inv = call(x)
                return (y, mean.astype(stat_dtype, copy=False), inv.astype(stat_dtype, copy=False))[:n_out]
        ax = check_axis(node, "axis", axis, x.ndim)
        cdt = _stash_dtype(stash, x.dtype)
        if compiled is not None and cdt == x.dtype:
            done = compiled.run_layer_norm(x, scale, b, ax, eps, nthreads)
            if done is not None:
                y, mean, inv = done
                if n_out == 1:
                    return y
                return (y, mean.astype(stat_dtype, copy=False), inv.astype(stat_dtype, copy=False))[:n_out]
        d, mean, inv = standardize(x.astype(cdt, copy=False), ax, eps)
        if d.dtype == x.dtype and scale.dtype == x.dtype and fits_into(scale.shape, d.shape):
            d *= scale  # d is our own temporary: finish in place
            y = d
        else:
            y = d.astype(x.dtype, copy=False)
            y = y * scale
        if b is not None:
            if y.dtype == b.dtype and fits_into(b.shape, y.shape):
                y += b
            else:
                y = y + b
        y = y.astype(x.dtype, copy=False)
        if n_out == 1:
            return y
        outs = (y, mean.astype(stat_dtype, copy=False), inv.astype(stat_dtype, copy=False))
        return outs[:n_out]

    return run


@KERNELS.register("RMSNormalization", 23)
def rms_normalization(node: NodeSpec):
    eps = float(node.attr("epsilon", 1e-5))
    axis = int(node.attr("axis", -1))
    stash = int(node.attr("stash_type", 1))
    check_static_axis(node, "axis", axis)
    compiled = jit.kernels("normalization")
    const_scale = constant_input(node, 1) if compiled is not None else None
    nthreads = jit.thread_count() if const_scale is not None else 0
    prepared: dict[tuple[int, ...], Any] = {}  # input shape -> compiled call, or None: numpy

    def prepare(x: np.ndarray) -> Any:
        if len(prepared) >= _PREPARED_PER_NODE:
            prepared.clear()
        ax = check_axis(node, "axis", axis, x.ndim)
        ok = (compiled.RMSNormCall.handles(x, const_scale, ax) and x.flags.c_contiguous
              and _stash_dtype(stash, x.dtype) == x.dtype)
        call = compiled.RMSNormCall(x.shape, x.dtype, ax, const_scale, eps, nthreads) if ok else None
        prepared[x.shape] = call
        return call

    def run(x, scale):
        if const_scale is not None and scale is const_scale:
            call = prepared.get(x.shape) if x.shape in prepared else prepare(x)
            if call is not None and call.accepts(x):
                return call(x)
        ax = check_axis(node, "axis", axis, x.ndim)
        axes = tuple(range(ax, x.ndim))
        cdt = _stash_dtype(stash, x.dtype)
        xc = x.astype(cdt, copy=False)
        ms = np.mean(np.square(xc), axis=axes, keepdims=True)
        y = (xc / np.sqrt(ms + cdt.type(eps))).astype(x.dtype, copy=False)
        return (y * scale.astype(x.dtype, copy=False)).astype(scale.dtype, copy=False)

    return run


# --------------------------------------------------------------------------- LRN / Lp / MVN


@KERNELS.register("LRN", (1, 13))
def lrn(node: NodeSpec):
    size = node.attr("size")
    if size is None:
        raise Unsupported("LRN without size")
    size = int(size)
    if size < 1:
        raise invalid(node, f"attribute 'size' = {size} must be >= 1")
    alpha = float(node.attr("alpha", 1e-4))
    beta = float(node.attr("beta", 0.75))
    bias = float(node.attr("bias", 1.0))
    before = (size - 1) // 2
    after = size - 1 - before
    compiled = jit.kernels("lrn")
    nthreads = jit.thread_count() if compiled is not None else 1
    calls: dict[tuple[Any, ...], Any] = {}  # (shape, dtype) -> the compiled call

    def run(x):
        if compiled is not None and compiled.LRNCall.handles(x):
            call = calls.get((x.shape, x.dtype))
            if call is None:
                if len(calls) >= 16:
                    calls.clear()
                call = calls[(x.shape, x.dtype)] = compiled.LRNCall(x.shape, x.dtype, size, alpha, beta, bias,
                                                                    nthreads)
            return call(x)
        cdt = compute_dtype(x.dtype)
        xc = x.astype(cdt, copy=False)
        c = x.shape[1]
        sq = np.square(xc)
        # window sums over channels [i - before, i + after], clipped at the edges (no padding copy)
        ss = sq.copy()
        # only offsets inside the channel axis add anything: a huge size costs no more than c
        for off in range(-min(before, c - 1), min(after, c - 1) + 1):
            if off == 0:
                continue
            if off > 0:
                ss[:, : c - off] += sq[:, off:]
            else:
                ss[:, -off:] += sq[:, : c + off]
        ss *= cdt.type(alpha / size)
        ss += cdt.type(bias)
        # x / d**beta as x * exp(-beta * log d): numpy's float32 log/exp are vectorized, pow is not
        with np.errstate(all="ignore"):
            np.log(ss, out=ss)
            ss *= cdt.type(-beta)
            np.exp(ss, out=ss)
        ss *= xc
        return ss.astype(x.dtype, copy=False)

    return run


@KERNELS.register("LpNormalization", (1, 22))
def lp_normalization(node: NodeSpec):
    axis = int(node.attr("axis", -1))
    p = int(node.attr("p", 2))
    if p not in (1, 2):
        raise Unsupported(f"LpNormalization p={p}")

    def run(x):
        cdt = compute_dtype(x.dtype)
        xc = x.astype(cdt, copy=False)
        if p == 2:
            norm = np.sqrt(np.sum(np.square(xc), axis=axis, keepdims=True))
        else:
            norm = np.sum(np.abs(xc), axis=axis, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where(norm == 0, cdt.type(0), xc / norm)
        return y.astype(x.dtype, copy=False)

    return run


@KERNELS.register("MeanVarianceNormalization", (9, 13))
def mean_variance_normalization(node: NodeSpec):
    axes_attr = tuple(int(a) for a in node.attr("axes", (0, 2, 3)))

    def run(x):
        cdt = compute_dtype(x.dtype)
        xc = x.astype(cdt, copy=False)
        axes = tuple(a + x.ndim if a < 0 else a for a in axes_attr)
        mean = xc.mean(axis=axes, keepdims=True)
        d = xc - mean
        std = np.sqrt(np.mean(np.square(d), axis=axes, keepdims=True))
        return (d / (std + cdt.type(1e-9))).astype(x.dtype, copy=False)

    return run
