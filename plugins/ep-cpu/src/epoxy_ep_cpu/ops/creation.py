"""Tensor creation: Constant, ConstantOfShape, Range, OneHot, EyeLike."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import helper

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._shape_util import norm_axis, schema_versions, to_ints
from ._util import as_text as _as_str
from ._util import output_guard


def _fix_strings(a: np.ndarray) -> np.ndarray:
    if a.dtype == object or a.dtype.kind in "SU":
        flat = [_as_str(v) for v in a.reshape(-1)]
        return np.array(flat, dtype=object).reshape(a.shape)
    return a


def constant_value(node: NodeSpec) -> np.ndarray:
    attrs = node.attributes
    if "value" in attrs:
        return _fix_strings(np.array(attrs["value"]))
    if "sparse_value" in attrs:
        return _fix_strings(np.array(attrs["sparse_value"]))
    if "value_float" in attrs:
        return np.array(attrs["value_float"], dtype=np.float32)
    if "value_floats" in attrs:
        return np.array(list(attrs["value_floats"]), dtype=np.float32).reshape(-1)
    if "value_int" in attrs:
        return np.array(attrs["value_int"], dtype=np.int64)
    if "value_ints" in attrs:
        return np.array(list(attrs["value_ints"]), dtype=np.int64).reshape(-1)
    if "value_string" in attrs:
        return np.array(_as_str(attrs["value_string"]), dtype=object)
    if "value_strings" in attrs:
        return np.array([_as_str(s) for s in attrs["value_strings"]] or [], dtype=object).reshape(-1)
    raise Unsupported("Constant without a value attribute")


@KERNELS.register("Constant", schema_versions("Constant"))
def constant(node: NodeSpec):
    value = constant_value(node)
    value.setflags(write=False)

    def run() -> np.ndarray:
        return value

    return run


@KERNELS.register("ConstantOfShape", schema_versions("ConstantOfShape"))
def constant_of_shape(node: NodeSpec):
    v = node.attr("value", None)
    if v is None:
        fill = np.zeros((), dtype=np.float32)
    else:
        fill = _fix_strings(np.asarray(v)).reshape(-1)[:1].reshape(())
    guard = output_guard(node)

    def run(shape: np.ndarray) -> np.ndarray:
        dims = to_ints(shape)
        if any(d < 0 for d in dims):
            raise ValueError(f"ConstantOfShape: negative dimension in {dims}")
        guard(dims, fill.dtype)
        return np.full(tuple(dims), fill, dtype=fill.dtype)

    return run


_LOW_FLOATS = {np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}
_WIDE = np.dtype(np.float64)  # Range computes in 64 bits before casting (int64 or float64)


@KERNELS.register("Range", schema_versions("Range"))
def range_(node: NodeSpec):
    stash_type = int(node.attr("stash_type", 1)) if node.opset >= 27 else 1
    guard = output_guard(node)

    def run(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
        dt = np.asarray(start).dtype
        s = np.asarray(start).reshape(())
        lim = np.asarray(limit).reshape(())
        d = np.asarray(delta).reshape(())
        if dt.kind in "iu":
            si, li, di = int(s), int(lim), int(d)
            if di == 0:
                raise ValueError("Range: delta is 0")
            n = max(-((si - li) // di), 0)
            guard((n,), _WIDE)
            return (si + np.arange(n, dtype=np.int64) * di).astype(dt)
        sf, lf, df = float(s), float(lim), float(d)
        if df == 0:
            raise ValueError("Range: delta is 0")
        n = int(max(np.ceil((lf - sf) / df), 0))
        guard((n,), _WIDE)
        if dt in _LOW_FLOATS and stash_type == 0:
            steps = np.full(n, d, dtype=dt)
            if n:
                steps[0] = s
            return np.cumsum(steps, dtype=dt) if n else steps
        if dt in _LOW_FLOATS:
            return (np.float32(sf) + np.arange(n, dtype=np.float32) * np.float32(df)).astype(dt)
        return (sf + np.arange(n, dtype=np.float64) * df).astype(dt)

    return run


@KERNELS.register("OneHot", schema_versions("OneHot"))
def one_hot(node: NodeSpec):
    axis = int(node.attr("axis", -1))
    guard = output_guard(node)

    def run(indices: np.ndarray, depth: np.ndarray, values: np.ndarray) -> np.ndarray:
        depth_n = int(np.asarray(depth).reshape(-1)[0])
        vals = np.asarray(values).reshape(-1)
        guard((*np.shape(indices), depth_n), vals.dtype)
        off, on = vals[0], vals[1]
        idx = np.asarray(indices)
        if idx.dtype.kind == "f":
            idx = np.trunc(idx)
        idx = idx.astype(np.int64)
        idx = np.where(idx < 0, idx + depth_n, idx)
        rank = idx.ndim + 1
        a = norm_axis(axis, rank)
        expanded = np.expand_dims(idx, a)
        shape = [1] * rank
        shape[a] = depth_n
        hot = expanded == np.arange(depth_n, dtype=np.int64).reshape(shape)
        return np.where(hot, on, off).astype(vals.dtype, copy=False)

    return run


@KERNELS.register("EyeLike", schema_versions("EyeLike"))
def eye_like(node: NodeSpec):
    k = int(node.attr("k", 0))
    dtype_attr = node.attr("dtype", None)
    target = None if dtype_attr is None else np.dtype(helper.tensor_dtype_to_np_dtype(int(dtype_attr)))

    def run(x: np.ndarray) -> np.ndarray:
        if x.ndim != 2:
            raise ValueError(f"EyeLike: input must be 2-D, got shape {x.shape}")
        dt = target if target is not None else x.dtype
        n, m = x.shape
        rows = np.arange(n)[:, None]
        cols = np.arange(m)[None, :]
        return (cols - rows == k).astype(dt)

    return run


