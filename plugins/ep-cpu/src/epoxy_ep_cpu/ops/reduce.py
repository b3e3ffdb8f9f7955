"""Reductions (Reduce*) and arg ops (ArgMax / ArgMin).

Axes come from the ``axes`` attribute (ReduceSum < 13, the others < 18) or from the optional
second input; both paths share one kernel: the input wins when given. Empty reductions give
the identity of the operation (0, 1, -inf, +inf, the dtype's min/max for integers).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from epoxy.contract import NodeSpec

from .. import jit
from ..registry import KERNELS
from ._flags import flag
from ._reduce_util import as_array, float_work_dtype, is_float, resolve_axes, work_dtype
from ._util import constant_input

Reducer = Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]


def _max_identity(dtype: np.dtype):
    if dtype == np.bool_:
        return False
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    return -np.inf


def _min_identity(dtype: np.dtype):
    if dtype == np.bool_:
        return True
    if dtype.kind in "iu":
        return np.iinfo(dtype).max
    return np.inf


def _sum(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.sum(x, axis=axes, dtype=work_dtype(x.dtype), keepdims=keepdims)


def _prod(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.prod(x, axis=axes, dtype=work_dtype(x.dtype), keepdims=keepdims)


def _mean(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    wd = float_work_dtype(x.dtype)
    count = 1
    for a in axes:
        count *= x.shape[a]
    total = np.add.reduce(x, axis=axes, dtype=wd, keepdims=keepdims)  # np.sum without its wrappers
    if count == 0:
        return np.full(np.shape(total), np.nan, dtype=wd)
    if type(total) is np.ndarray:
        return np.true_divide(total, wd.type(count), out=total)
    return np.asarray(total) / wd.type(count)


def _max(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    xw = x.astype(work_dtype(x.dtype), copy=False)
    return np.max(xw, axis=axes, keepdims=keepdims, initial=_max_identity(xw.dtype))


def _min(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    xw = x.astype(work_dtype(x.dtype), copy=False)
    return np.min(xw, axis=axes, keepdims=keepdims, initial=_min_identity(xw.dtype))


def _l1(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    xw = x.astype(work_dtype(x.dtype), copy=False)
    return np.sum(np.abs(xw), axis=axes, keepdims=keepdims)


def _l2(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    xw = x.astype(float_work_dtype(x.dtype), copy=False)
    return np.sqrt(np.sum(xw * xw, axis=axes, keepdims=keepdims))


def _sum_square(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    xw = x.astype(work_dtype(x.dtype), copy=False)
    return np.sum(xw * xw, axis=axes, keepdims=keepdims)


def _log_sum(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    xw = x.astype(float_work_dtype(x.dtype), copy=False)
    return np.log(np.sum(xw, axis=axes, keepdims=keepdims))


def _log_sum_exp(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    xw = x.astype(float_work_dtype(x.dtype), copy=False)
    m = np.max(xw, axis=axes, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, xw.dtype.type(0))
    out = np.log(np.sum(np.exp(xw - m), axis=axes, keepdims=True)) + m
    if not keepdims:
        out = np.squeeze(out, axis=axes)
    return out


_REDUCERS: dict[str, tuple[Reducer, tuple[int, ...]]] = {
    # op: (reducer, since versions); axes became an input at 13 (ReduceSum) / 18 (others)
    "ReduceSum": (_sum, (1, 11, 13)),
    "ReduceMean": (_mean, (1, 11, 13, 18)),
    "ReduceMax": (_max, (1, 11, 12, 13, 18, 20)),
    "ReduceMin": (_min, (1, 11, 12, 13, 18, 20)),
    "ReduceProd": (_prod, (1, 11, 13, 18)),
    "ReduceL1": (_l1, (1, 11, 13, 18)),
    "ReduceL2": (_l2, (1, 11, 13, 18)),
    "ReduceLogSum": (_log_sum, (1, 11, 13, 18)),
    "ReduceLogSumExp": (_log_sum_exp, (1, 11, 13, 18)),
    "ReduceSumSquare": (_sum_square, (1, 11, 13, 18)),
}


def _spatial_mean(reducer: Reducer) -> Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray | None] | None:
    """For ReduceMean on the jit tier: the mean over every axis after the first two (a CNN's
    global pool as the dynamo exporter writes it, ``mean(x, [2, 3])``) on GlobalAveragePool's
    compiled kernel (float64 sums, as ``_mean``), or None for other reductions. Why: numpy's
    reduce took 8 us of a batch-1 ResNet's ~40 inside the model, GlobalAveragePool's 4."""
    if reducer is not _mean:
        return None
    compiled = jit.kernels("pool")
    if compiled is None:
        return None
    nthreads = jit.thread_count()

    def run(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray | None:
        if x.ndim < 3 or axes != tuple(range(2, x.ndim)):
            return None
        y = compiled.run_global_avg(x, nthreads)
        return y if y is None or keepdims else y.reshape(x.shape[:2])

    return run


def _reduce_factory(reducer: Reducer):
    def factory(node: NodeSpec):
        spatial_mean = _spatial_mean(reducer)
        keepdims = flag(node, "keepdims", 1)
        noop = flag(node, "noop_with_empty_axes", 0)
        attr_axes = node.attr("axes")
        has_axes_input = len(node.inputs) > 1 and bool(node.inputs[1])
        const_axes = constant_input(node, 1) if has_axes_input else None
        # axes known now (the attribute, or an input no feed can replace): resolved once per rank
        by_rank = None
        if not has_axes_input or const_axes is not None:
            fixed = const_axes if has_axes_input else attr_axes
            listed = None if fixed is None else tuple(int(a) for a in np.asarray(fixed).reshape(-1).tolist())
            by_rank = functools.lru_cache(maxsize=8)(functools.partial(_resolve_fixed, listed, noop))

        def run(data: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
            data = np.asarray(data)
            if by_rank is not None and (axes is None or axes is const_axes):
                ax = by_rank(data.ndim)
            else:
                ax = resolve_axes(attr_axes if axes is None else axes, data.ndim, noop)
            if spatial_mean is not None:
                pooled = spatial_mean(data, ax, bool(keepdims))
                if pooled is not None:
                    return pooled
            out = reducer(data, ax, keepdims)
            return out if type(out) is np.ndarray and out.dtype == data.dtype else as_array(out, data.dtype)

        return run

    return factory


def _resolve_fixed(axes: tuple[int, ...] | None, noop: bool, rank: int) -> tuple[int, ...]:
    return resolve_axes(axes, rank, noop)


for _op, (_fn, _versions) in _REDUCERS.items():
    KERNELS.register(_op, _versions)(_reduce_factory(_fn))


def _arg_factory(find: Callable[..., np.ndarray]):
    def factory(node: NodeSpec):
        axis = int(node.attr("axis", 0))
        keepdims = flag(node, "keepdims", 1)
        last = flag(node, "select_last_index", 0)

        def run(data: np.ndarray) -> np.ndarray:
            x = np.asarray(data)
            if is_float(x.dtype):
                x = x.astype(work_dtype(x.dtype), copy=False)
            if x.ndim == 0:
                x = x.reshape(1)
            ax = axis + x.ndim if axis < 0 else axis
            if last:
                n = x.shape[ax]
                idx = (n - 1) - find(np.flip(x, axis=ax), axis=ax)
            else:
                idx = find(x, axis=ax)
            idx = np.asarray(idx, dtype=np.int64)
            if keepdims:
                idx = np.expand_dims(idx, ax)
            return idx

        return run

    return factory


KERNELS.register("ArgMax", (1, 11, 12, 13))(_arg_factory(np.argmax))
KERNELS.register("ArgMin", (1, 11, 12, 13))(_arg_factory(np.argmin))


@KERNELS.register("Det", (11, 22))
def det(node: NodeSpec):
    """Determinant of the trailing [M, M] matrices (a reduction of the last two dims)."""

    def run(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise ValueError(f"Det needs [..., M, M] input, got shape {x.shape}")
        xw = x.astype(float_work_dtype(x.dtype), copy=False)
        if x.shape[-1] == 0:
            return np.ones(x.shape[:-2], dtype=x.dtype)
        return as_array(np.linalg.det(xw), x.dtype)

    return run
