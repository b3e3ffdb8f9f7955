"""Indexing: Slice, Gather*, Scatter*, Compress, NonZero, Unique, TopK, ReverseSequence, Trilu."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._flags import flag
from ._shape_util import (
    const_ints,
    contig,
    norm_axis,
    normalize_indices,
    scalar_index,
    schema_versions,
    to_int,
    to_ints,
    versions_between,
)

# --------------------------------------------------------------------------------------------
# Slice


def _slice(x: np.ndarray, starts: list[int], ends: list[int], axes: list[int] | None,
           steps: list[int] | None) -> np.ndarray:
    index = _slice_index(x.shape, tuple(starts), tuple(ends), None if axes is None else tuple(axes),
                         None if steps is None else tuple(steps))
    return contig(x[index])


@lru_cache(maxsize=4096)
def _slice_index(shape: tuple[int, ...], starts: tuple[int, ...], ends: tuple[int, ...],
                 axes: tuple[int, ...] | None, steps: tuple[int, ...] | None) -> tuple[slice, ...]:
    """Slice's clamped index tuple, once per distinct (input shape, starts, ends, axes, steps)."""
    rank = len(shape)
    if axes is None:
        axes = tuple(range(len(starts)))
    if steps is None:
        steps = (1,) * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError("Slice: starts/ends/axes/steps lengths differ")
    index: list[slice] = [slice(None)] * rank
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = norm_axis(a, rank)
        if st == 0:
            raise ValueError("Slice: step 0")
        d = shape[a]
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if st > 0:
            s = min(max(s, 0), d)
            e = min(max(e, 0), d)
            index[a] = slice(s, e, st)
        else:
            s = min(max(s, 0), d - 1)
            e = min(max(e, -1), d - 1)
            index[a] = slice(s, e if e >= 0 else None, st) if d > 0 else slice(0, 0)
    return tuple(index)


@KERNELS.register("Slice", 1)
def slice_v1(node: NodeSpec):
    starts = [int(v) for v in node.attr("starts", ())]
    ends = [int(v) for v in node.attr("ends", ())]
    axes = node.attr("axes", None)
    axes = None if axes is None else [int(v) for v in axes]

    def run(x: np.ndarray) -> np.ndarray:
        return _slice(x, starts, ends, axes, None)

    return run


@KERNELS.register("Slice", versions_between("Slice", 10))
def slice_(node: NodeSpec):
    given = [i < len(node.inputs) and bool(node.inputs[i]) for i in range(1, 5)]
    starts, ends, axes, steps = (const_ints(node, i + 1) if g else None for i, g in enumerate(given))
    static = all(p is not None for p, g in zip((starts, ends, axes, steps), given) if g) and given[0] and given[1]
    if static:  # every parameter a constant: the run only looks up the clamped index per input shape

        def run_static(x: np.ndarray, *_params: np.ndarray | None) -> np.ndarray:
            return contig(x[_slice_index(x.shape, starts, ends, axes, steps)])

        return run_static

    def run(x: np.ndarray, starts: np.ndarray, ends: np.ndarray, axes: np.ndarray | None = None,
            steps: np.ndarray | None = None) -> np.ndarray:
        return _slice(x, to_ints(starts), to_ints(ends), None if axes is None else to_ints(axes),
                      None if steps is None else to_ints(steps))

    return run


# --------------------------------------------------------------------------------------------
# Gather family


def _check_range(idx: np.ndarray, dim: int, op: str) -> None:
    if idx.size and (idx.min() < 0 or idx.max() >= dim):
        raise IndexError(f"{op}: index out of range for dimension of size {dim}")


@KERNELS.register("Gather", schema_versions("Gather"))
def gather(node: NodeSpec):
    axis = int(node.attr("axis", 0))

    def run(x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        a = norm_axis(axis, x.ndim)
        if type(x) is np.ndarray:  # a 0-d index (shape arithmetic): no index array is built
            i = scalar_index(indices, x.shape[a])
            if i is not None:
                # 1-d data: a 0-d array copy (an ndarray, as onnxruntime returns; take() gives a
                # numpy scalar that the next Unsqueeze/Concat must convert back)
                return x[i, ...].copy() if x.ndim == 1 else x.take(i, axis=a)
        # take() reads negative indices from the end and raises IndexError outside [-dim, dim),
        # ONNX's rule: no normalized copy and no min/max passes (19 -> 1.2 us on an embedding)
        try:
            return np.take(x, indices, axis=a)
        except IndexError:
            raise IndexError(f"Gather: index out of range for dimension of size {x.shape[a]}") from None

    return run


@KERNELS.register("GatherElements", schema_versions("GatherElements"))
def gather_elements(node: NodeSpec):
    axis = int(node.attr("axis", 0))

    def run(x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        a = norm_axis(axis, x.ndim)
        idx = normalize_indices(indices, x.shape[a])
        _check_range(idx, x.shape[a], "GatherElements")
        # indices may be smaller than data on the other axes
        src = x[tuple(slice(0, n) if i != a else slice(None) for i, n in enumerate(idx.shape))]
        return np.take_along_axis(src, idx, axis=a)

    return run


@KERNELS.register("GatherND", schema_versions("GatherND"))
def gather_nd(node: NodeSpec):
    """Each index tuple becomes one flat row number of ``x`` (batch rows first), and one
    ``take`` gathers the rows. Why not one advanced-indexing expression with an index array
    per dimension: on the small index sets exporters write (Llama's causal-mask GatherND:
    16 pairs into a [1, 16] mask) that took ~20 us a call, this ~6."""
    batch_dims = int(node.attr("batch_dims", 0)) if node.opset >= 12 else 0

    def run(x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        b = batch_dims
        k = indices.shape[-1]
        batch_shape, indexed, rest = x.shape[:b], x.shape[b:b + k], x.shape[b + k:]
        inner = indices.shape[b:-1]
        out_shape = tuple(batch_shape) + tuple(inner) + rest
        nb, n_idx, per_batch = math.prod(batch_shape), math.prod(inner), math.prod(indexed)
        rows = x.reshape((nb * per_batch,) + rest)
        if nb * n_idx == 0:
            return np.empty(out_shape, dtype=x.dtype)
        idx = indices.reshape(nb * n_idx, k).astype(np.int64, copy=False)
        limits = np.array(indexed, dtype=np.int64)
        below = idx < 0
        if below.any():
            idx = idx + below * limits
        if (idx >= limits).any() or (idx < 0).any():  # one pass; the message names the dimension
            for j in range(k):
                _check_range(idx[:, j], indexed[j], "GatherND")
        place = np.array([math.prod(indexed[j + 1:]) for j in range(k)], dtype=np.int64)
        flat = idx @ place
        if nb > 1:
            flat = flat + np.repeat(np.arange(nb, dtype=np.int64) * per_batch, n_idx)
        return rows.take(flat, axis=0).reshape(out_shape)

    return run


# --------------------------------------------------------------------------------------------
# Scatter family

_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reduction(node: NodeSpec) -> str:
    r = node.attr("reduction", "none")
    if isinstance(r, bytes):
        r = r.decode()
    if r != "none" and r not in _REDUCE:
        raise Unsupported(f"reduction {r!r}")
    return r


def _scatter_into(out: np.ndarray, index: tuple[np.ndarray, ...], updates: np.ndarray, reduction: str) -> np.ndarray:
    if reduction == "none":
        out[index] = updates
    else:
        _REDUCE[reduction].at(out, index, updates)
    return out


def _scatter_elements(x: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int, reduction: str) -> np.ndarray:
    a = norm_axis(axis, x.ndim)
    idx = normalize_indices(indices, x.shape[a])
    _check_range(idx, x.shape[a], "ScatterElements")
    grid = list(np.indices(idx.shape, sparse=True))
    grid[a] = idx
    full = tuple(np.broadcast_to(g, idx.shape) for g in grid)
    return _scatter_into(np.array(x), full, updates, reduction)


@KERNELS.register("Scatter", schema_versions("Scatter"))
def scatter(node: NodeSpec):
    axis = int(node.attr("axis", 0))

    def run(x: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
        return _scatter_elements(x, indices, updates, axis, "none")

    return run


@KERNELS.register("ScatterElements", schema_versions("ScatterElements"))
def scatter_elements(node: NodeSpec):
    axis = int(node.attr("axis", 0))
    reduction = _reduction(node) if node.opset >= 16 else "none"

    def run(x: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
        return _scatter_elements(x, indices, updates, axis, reduction)

    return run


@KERNELS.register("ScatterND", schema_versions("ScatterND"))
def scatter_nd(node: NodeSpec):
    reduction = _reduction(node) if node.opset >= 16 else "none"

    def run(x: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
        k = indices.shape[-1]
        idx = normalize_indices(indices, np.array(x.shape[:k], dtype=np.int64))
        for j in range(k):
            _check_range(idx[..., j], x.shape[j], "ScatterND")
        index = tuple(idx[..., j] for j in range(k))
        return _scatter_into(np.array(x), index, updates, reduction)

    return run


# --------------------------------------------------------------------------------------------
# Compress / NonZero / Unique


@KERNELS.register("Compress", schema_versions("Compress"))
def compress(node: NodeSpec):
    axis = node.attr("axis", None)

    def run(x: np.ndarray, condition: np.ndarray) -> np.ndarray:
        cond = np.asarray(condition).reshape(-1).astype(bool)
        if axis is None:
            return np.compress(cond, x.reshape(-1))
        return np.compress(cond, x, axis=norm_axis(int(axis), x.ndim))

    return run


@KERNELS.register("NonZero", schema_versions("NonZero"))
def nonzero(node: NodeSpec):
    def run(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if x.ndim == 0:
            return np.zeros((0, 1 if bool(x) else 0), dtype=np.int64)
        nz = np.nonzero(x.astype(bool) if x.dtype.kind not in "biuf" else x)
        return np.array(nz, dtype=np.int64).reshape(x.ndim, -1)

    return run


@KERNELS.register("Unique", schema_versions("Unique"))
def unique(node: NodeSpec):
    axis = node.attr("axis", None)
    is_sorted = flag(node, "sorted", 1)
    n_out = len(node.outputs)

    def run(x: np.ndarray) -> Any:
        if axis is None:
            flat = x.reshape(-1)
            y, first, inverse, counts = np.unique(flat, return_index=True, return_inverse=True, return_counts=True)
            a = None
        else:
            a = norm_axis(int(axis), x.ndim)
            y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=a)
        inverse = np.asarray(inverse).reshape(-1)
        if not is_sorted:
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            y = np.take(y, order, axis=0 if a is None else a)
            first = first[order]
            counts = counts[order]
            inverse = rank[inverse]
        outs = (np.asarray(y, dtype=x.dtype), first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64))
        return outs[0] if n_out == 1 else outs[:n_out]

    return run


# --------------------------------------------------------------------------------------------
# TopK


def _topk(x: np.ndarray, k: int, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    a = norm_axis(axis, x.ndim)
    n = x.shape[a]
    if k < 0 or k > n:
        raise ValueError(f"TopK: k={k} out of range for axis of size {n}")
    if largest:
        # stable ascending sort of the reversed axis, read backwards: descending values with
        # ties ordered by smaller original index first
        s = np.argsort(np.flip(x, a), axis=a, kind="stable")
        order = (n - 1) - np.flip(s, a)
    else:
        order = np.argsort(x, axis=a, kind="stable")
    idx = np.take(order, np.arange(k), axis=a)
    vals = np.take_along_axis(x, idx, axis=a)
    return vals, idx.astype(np.int64)


@KERNELS.register("TopK", 1)
def topk_v1(node: NodeSpec):
    axis = int(node.attr("axis", -1))
    k = int(node.attr("k"))

    def run(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _topk(x, k, axis, True)

    return run


@KERNELS.register("TopK", versions_between("TopK", 10))
def topk(node: NodeSpec):
    axis = int(node.attr("axis", -1))
    largest = flag(node, "largest", 1) if node.opset >= 11 else True

    def run(x: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _topk(x, to_int(k), axis, largest)

    return run


# --------------------------------------------------------------------------------------------
# ReverseSequence / Trilu


@KERNELS.register("ReverseSequence", schema_versions("ReverseSequence"))
def reverse_sequence(node: NodeSpec):
    batch_axis = int(node.attr("batch_axis", 1))
    time_axis = int(node.attr("time_axis", 0))

    def run(x: np.ndarray, sequence_lens: np.ndarray) -> np.ndarray:
        ba = norm_axis(batch_axis, x.ndim)
        ta = norm_axis(time_axis, x.ndim)
        lens = np.asarray(sequence_lens).astype(np.int64).reshape(-1)
        t = np.arange(x.shape[ta], dtype=np.int64)
        shape_t = [1] * x.ndim
        shape_t[ta] = x.shape[ta]
        shape_b = [1] * x.ndim
        shape_b[ba] = x.shape[ba]
        t = t.reshape(shape_t)
        ln = lens.reshape(shape_b)
        src = np.where(t < ln, ln - 1 - t, t)
        src = np.broadcast_to(src, tuple(x.shape[i] if i in (ta, ba) else 1 for i in range(x.ndim)))
        src = np.broadcast_to(src, x.shape)
        return np.take_along_axis(x, src, axis=ta)

    return run


@KERNELS.register("Trilu", schema_versions("Trilu"))
def trilu(node: NodeSpec):
    upper = flag(node, "upper", 1)

    def run(x: np.ndarray, k: np.ndarray | None = None) -> np.ndarray:
        kk = 0 if k is None else to_int(k)
        n, m = x.shape[-2], x.shape[-1]
        rows = np.arange(n, dtype=np.int64)[:, None]
        cols = np.arange(m, dtype=np.int64)[None, :]
        keep = (cols - rows >= kk) if upper else (cols - rows <= kk)
        return np.where(keep, x, np.zeros((), dtype=x.dtype))

    return run


