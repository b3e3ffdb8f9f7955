"""Shape manipulation: Identity, Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Transpose,
Concat, Split, Expand, Tile, Pad, DepthToSpace, SpaceToDepth, CenterCropPad, CumSum, CumProd,
Dropout (inference and seeded training)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported
from epoxy.kit.random import unseeded_generator

from ..registry import KERNELS
from ._attr_checks import check_at_least, invalid, static_rank
from ._flags import flag
from ._layout import CODES, as_nchw, channels_last
from ._shape_util import (
    arr,
    const_ints,
    contig,
    has_output,
    norm_axis,
    out_dtype,
    schema_versions,
    to_int,
    to_ints,
    versions_between,
)
from ._util import output_guard

# --------------------------------------------------------------------------------------------
# Identity


@KERNELS.register("Identity", schema_versions("Identity"))
def identity(node: NodeSpec):
    def run(x: Any) -> Any:
        if isinstance(x, list):
            return list(x)
        return x

    return run


# --------------------------------------------------------------------------------------------
# Shape / Size


@lru_cache(maxsize=4096)
def _shape_array(dims: tuple[int, ...]) -> np.ndarray:
    """Shape's int64 array for one input shape (callers copy it: outputs may be written to)."""
    return np.array(dims, dtype=np.int64)


@KERNELS.register("Shape", schema_versions("Shape"))
def shape(node: NodeSpec):
    start = node.attr("start", 0) if node.opset >= 15 else 0
    end = node.attr("end", None) if node.opset >= 15 else None

    if start == 0 and end is None:  # the whole shape (exporters' usual Shape): no clamping

        def whole(x: np.ndarray) -> np.ndarray:
            # the int64 array is built once per distinct shape; each run gets its own copy
            return _shape_array(x.shape if type(x) is np.ndarray else np.asarray(x).shape).copy()

        return whole

    def run(x: np.ndarray) -> np.ndarray:
        dims = np.asarray(x).shape
        r = len(dims)
        s = int(start) + r if start < 0 else int(start)
        e = r if end is None else (int(end) + r if end < 0 else int(end))
        s = min(max(s, 0), r)
        e = min(max(e, 0), r)
        return np.array(dims[s:e] if s < e else (), dtype=np.int64)

    return run


@KERNELS.register("Size", schema_versions("Size"))
def size(node: NodeSpec):
    def run(x: np.ndarray) -> np.ndarray:
        return np.array(np.asarray(x).size, dtype=np.int64)

    return run


# --------------------------------------------------------------------------------------------
# Reshape / Flatten / Squeeze / Unsqueeze / Transpose


def _reshape_target(in_shape: tuple[int, ...], target: Sequence[int], allowzero: bool) -> tuple[int, ...]:
    """Reshape's output shape (0 copies the input dim unless ``allowzero``, -1 is inferred),
    computed once per distinct (input shape, target): the run pays a dict lookup."""
    return _reshape_cached(in_shape, tuple(target), bool(allowzero))


@lru_cache(maxsize=4096)
def _reshape_cached(in_shape: tuple[int, ...], target: tuple[int, ...], allowzero: bool) -> tuple[int, ...]:
    out = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ValueError(f"Reshape: 0 at position {i} beyond input rank {len(in_shape)}")
            out.append(in_shape[i])
        else:
            out.append(d)
    if out.count(-1) > 1:
        raise ValueError("Reshape: more than one -1 in shape")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        total = int(np.prod(in_shape, dtype=np.int64))
        if known == 0:
            if total != 0:
                raise ValueError(f"Reshape: cannot infer -1 for {in_shape} -> {list(target)}")
            inferred = 0
        else:
            if total % known:
                raise ValueError(f"Reshape: cannot reshape {in_shape} to {list(target)}")
            inferred = total // known
        out[out.index(-1)] = inferred
    return tuple(out)


@KERNELS.register("Reshape", 1)
def reshape_v1(node: NodeSpec):
    target = [int(d) for d in node.attr("shape", ())]

    def run(x: np.ndarray) -> np.ndarray:
        return x.reshape(_reshape_target(x.shape, target, False))

    return run


@KERNELS.register("Reshape", versions_between("Reshape", 5))
def reshape(node: NodeSpec):
    allowzero = bool(flag(node, "allowzero", 0)) if node.opset >= 14 else False

    static = const_ints(node, 1)
    if static is not None:

        def run_static(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
            return x.reshape(_reshape_cached(x.shape, static, allowzero))

        return run_static

    def run(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
        return x.reshape(_reshape_target(x.shape, to_ints(shape), allowzero))

    return run


def _flatten_axis(node: NodeSpec, axis: int, rank: int) -> int:
    """Flatten's axis, in ``[-rank, rank]`` (the rank itself: everything outer)."""
    if not -rank <= axis <= rank:
        raise invalid(node, f"attribute 'axis' = {axis} is outside [{-rank}, {rank}] (input rank {rank})")
    return norm_axis(axis, rank)


@KERNELS.register("Flatten", schema_versions("Flatten"))
def flatten(node: NodeSpec):
    axis = int(node.attr("axis", 1))
    rank = static_rank(node, 0)
    if rank is not None:
        _flatten_axis(node, axis, rank)

    def run(x: np.ndarray) -> np.ndarray:
        a = _flatten_axis(node, axis, x.ndim)
        return x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))  # Python ints: np.prod is ~5 us

    return run


def _squeeze(x: np.ndarray, axes: Sequence[int] | None) -> np.ndarray:
    return x.reshape(_squeezed_shape(x.shape, None if axes is None else tuple(axes)))


@lru_cache(maxsize=4096)
def _squeezed_shape(shape: tuple[int, ...], axes: tuple[int, ...] | None) -> tuple[int, ...]:
    """Squeeze's output shape, once per distinct (input shape, axes)."""
    if axes is None or len(axes) == 0:
        return tuple(d for d in shape if d != 1)
    ax = sorted({norm_axis(a, len(shape)) for a in axes})
    for a in ax:
        if shape[a] != 1:
            raise ValueError(f"Squeeze: dimension {a} of shape {shape} is not 1")
    return tuple(d for i, d in enumerate(shape) if i not in ax)


@KERNELS.register("Squeeze", versions_between("Squeeze", 1, 13))
def squeeze_attr(node: NodeSpec):
    axes = node.attr("axes", None)
    axes = None if axes is None else [int(a) for a in axes]

    def run(x: np.ndarray) -> np.ndarray:
        return _squeeze(x, axes)

    return run


@KERNELS.register("Squeeze", versions_between("Squeeze", 13))
def squeeze(node: NodeSpec):
    static = const_ints(node, 1)
    if static is not None:

        def run_static(x: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
            return x.reshape(_squeezed_shape(x.shape, static))

        return run_static

    def run(x: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
        return _squeeze(x, None if axes is None else to_ints(axes))

    return run


def _unsqueeze(x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    return x.reshape(_unsqueezed_shape(x.shape, tuple(axes)))


@lru_cache(maxsize=4096)
def _unsqueezed_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    """Unsqueeze's output shape, once per distinct (input shape, axes)."""
    rank = len(shape) + len(axes)
    ax = sorted(norm_axis(a, rank) for a in axes)
    if len(set(ax)) != len(ax) or any(not 0 <= a < rank for a in ax):
        raise ValueError(f"Unsqueeze: invalid axes {list(axes)} for input rank {len(shape)}")
    out = list(shape)
    for a in ax:
        out.insert(a, 1)
    return tuple(out)


@KERNELS.register("Unsqueeze", versions_between("Unsqueeze", 1, 13))
def unsqueeze_attr(node: NodeSpec):
    axes = [int(a) for a in node.attr("axes", ())]

    def run(x: np.ndarray) -> np.ndarray:
        return _unsqueeze(x, axes)

    return run


@KERNELS.register("Unsqueeze", versions_between("Unsqueeze", 13))
def unsqueeze(node: NodeSpec):
    static = const_ints(node, 1)
    if static is not None:

        def run_static(x: np.ndarray, axes: np.ndarray) -> np.ndarray:
            return x.reshape(_unsqueezed_shape(x.shape, static))

        return run_static

    def run(x: np.ndarray, axes: np.ndarray) -> np.ndarray:
        return _unsqueeze(x, to_ints(axes))

    return run


@KERNELS.register("Transpose", schema_versions("Transpose"))
def transpose(node: NodeSpec):
    perm = node.attr("perm", None)
    perm = None if perm is None else tuple(int(p) for p in perm)

    def run(x: np.ndarray) -> np.ndarray:
        # the method, not np.transpose (a Python wrapper: ~1 us of a small tensor's step)
        y = x.transpose(perm) if perm is not None else x.transpose()
        return y if y.flags.c_contiguous else y.copy()

    return run


# --------------------------------------------------------------------------------------------
# Concat / Split


@KERNELS.register("Concat", schema_versions("Concat"))
def concat(node: NodeSpec):
    axis = int(node.attr("axis", 1))
    lists = axis in (0, -1)  # the only axes 1-d vectors have

    def run(*xs: np.ndarray) -> np.ndarray:
        if lists:  # shape arithmetic: Python lists, no np.concatenate
            small = _small_int_vectors(xs)
            if small is not None:
                return small
        arrays = [x if type(x) is np.ndarray else np.asarray(x) for x in xs if x is not None]
        rank = max([x.ndim for x in arrays])
        a = axis + rank if axis < 0 else axis
        dtype = arrays[0].dtype
        if dtype.kind == "O":
            return np.concatenate(arrays, axis=a)
        if a == 1 and rank == 4 and dtype in CODES and any(channels_last(x) is not None for x in arrays):
            return _channels_last_concat(arrays, dtype)
        return np.concatenate(arrays, axis=a, dtype=dtype)

    #: (out, inputs) of the last call whose inputs were all found in place: the same objects
    #: again (arena views, which never move) are in place again, without reading addresses
    in_place: list[tuple[Any, ...]] = [()]

    def run_into(*xs: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is not None:
            last = in_place[0]
            if last and last[0] is out and len(last) == len(xs) + 1 and all(a is b for a, b in zip(last[1:], xs)):
                return out
            placed = _concat_into(out, xs, axis)
            if placed is not None:
                if placed:
                    in_place[0] = (out, *xs)
                return out
        return run(*xs)

    run_into.supports_out = True  # type: ignore[attr-defined]
    run_into.out_parts = lambda out_shape, shapes: concat_parts(out_shape, shapes, axis)  # type: ignore[attr-defined]
    return run_into


def concat_parts(out_shape: tuple[int, ...], shapes: list[tuple[int, ...]], axis: int) -> list[int | None] | None:
    """``contract.OUT_PARTS`` of Concat: each input's element offset in the output, where the
    axes before ``axis`` are all 1 (then each input is one contiguous block of it: channels of
    one image); None otherwise or when the shapes do not concatenate to ``out_shape``."""
    rank = len(out_shape)
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < rank or math.prod(out_shape[:a]) != 1 or not _concatenates(out_shape, shapes, a):
        return None
    offsets: list[int | None] = []
    at = 0
    for shape in shapes:
        offsets.append(at)
        at += math.prod(shape)
    return offsets


def _concatenates(out_shape: tuple[int, ...], shapes: Sequence[tuple[int, ...]], a: int) -> bool:
    """Whether ``shapes`` joined along axis ``a`` make ``out_shape``."""
    return (all(len(s) == len(out_shape) and s[:a] == out_shape[:a] and s[a + 1:] == out_shape[a + 1:] for s in shapes)
            and sum(s[a] for s in shapes) == out_shape[a])


def _concat_into(out: np.ndarray, xs: tuple[Any, ...], axis: int) -> bool | None:
    """Concat into the planned buffer ``out``: inputs a producer already wrote at their place
    (``concat_parts``) are left there, the others copied; whether every input was found in
    place, or None (nothing written: the kernel allocates) for anything but plain numeric
    arrays of ``out``'s dtype that concatenate to its shape."""
    dtype = out.dtype
    if dtype.kind not in "fc":  # shape vectors and codes keep their own paths
        return None
    arrays = [x for x in xs if x is not None]
    if any(type(x) is not np.ndarray or x.dtype != dtype for x in arrays):
        return None
    rank = out.ndim
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < rank or not _concatenates(out.shape, [x.shape for x in arrays], a):
        return None
    if math.prod(out.shape[:a]) != 1:
        np.concatenate(arrays, axis=a, out=out)
        return False
    flat, base, at = out.reshape(-1), out.ctypes.data, 0
    all_placed = len(arrays) == len(xs)
    for x in arrays:
        size = x.size
        if not (x.ctypes.data == base + at * dtype.itemsize and x.flags.c_contiguous):
            flat[at:at + size] = x.reshape(-1)
            all_placed = False
        at += size
    return all_placed


def _channels_last_concat(arrays: list[np.ndarray], dtype: np.dtype) -> np.ndarray:
    """Concat over channels of codes, some of them channels last (an inception block's branch
    outputs): written channels last, so the pool or convolution that reads it takes it as it is."""
    parts = [x.transpose(0, 2, 3, 1) for x in arrays]
    return as_nchw(np.concatenate(parts, axis=3, dtype=dtype))


_SMALL_CONCAT = 16  # elements per input under which a list concatenation beats np.concatenate


def _small_int_vectors(xs: tuple[Any, ...]) -> np.ndarray | None:
    """Concat of short 1-d integer arrays of one dtype (exporters' shape vectors) through Python
    lists, cheaper than ``np.concatenate`` there; None when any input is not such a vector."""
    first = xs[0]
    if type(first) is not np.ndarray or first.dtype.kind not in "iu":
        return None
    dtype = first.dtype
    values: list[int] = []
    for x in xs:  # ``is``: an equal but distinct dtype object only costs the general path
        if type(x) is not np.ndarray or x.dtype is not dtype or x.ndim != 1 or x.size > _SMALL_CONCAT:
            return None
        values += x.tolist()
    return np.array(values, dtype=dtype)


def _split_sizes(dim: int, n_out: int, split: list[int] | None, num_outputs: int | None) -> list[int]:
    if split:
        if sum(split) != dim:
            raise ValueError(f"Split: sizes {split} do not add up to {dim}")
        return split
    n = num_outputs if num_outputs is not None else n_out
    chunk = -(-dim // n) if n else 0
    sizes = [max(0, min(chunk, dim - i * chunk)) for i in range(n)]
    return sizes


def _do_split(x: np.ndarray, axis: int, sizes: list[int]) -> tuple[np.ndarray, ...]:
    return tuple([contig(x[index]) for index in _split_indices(x.ndim, axis, tuple(sizes))])


@lru_cache(maxsize=64)
def _split_indices(ndim: int, axis: int, sizes: tuple[int, ...]) -> tuple[tuple[slice, ...], ...]:
    """Each piece's index tuple, built once per (rank, axis, sizes): the exporters' Splits
    run on the same sizes every time (np.cumsum and list building were ~8 us a call)."""
    a = norm_axis(axis, ndim)
    pieces, start = [], 0
    for size in sizes:
        index = [slice(None)] * ndim
        index[a] = slice(start, start + size)
        pieces.append(tuple(index))
        start += size
    return tuple(pieces)


def _split_result(node: NodeSpec, outs: tuple[np.ndarray, ...]) -> Any:
    if len(node.outputs) == 1:
        return outs[0]
    return outs


@KERNELS.register("Split", 1)
def split_v1(node: NodeSpec):
    axis = int(node.attr("axis", 0))
    split_attr = [int(s) for s in node.attr("split", ())]
    n_out = len(node.outputs)

    def run(x: np.ndarray, split: np.ndarray | None = None) -> Any:
        sp = to_ints(split) if split is not None else split_attr
        sizes = _split_sizes(x.shape[norm_axis(axis, x.ndim)], n_out, sp or None, None)
        return _split_result(node, _do_split(x, axis, sizes))

    return run


@KERNELS.register("Split", versions_between("Split", 2, 13))
def split_attr(node: NodeSpec):
    axis = int(node.attr("axis", 0))
    split_attr = [int(s) for s in node.attr("split", ())]
    n_out = len(node.outputs)

    def run(x: np.ndarray) -> Any:
        sizes = _split_sizes(x.shape[norm_axis(axis, x.ndim)], n_out, split_attr or None, None)
        return _split_result(node, _do_split(x, axis, sizes))

    return run


@KERNELS.register("Split", versions_between("Split", 13))
def split(node: NodeSpec):
    axis = int(node.attr("axis", 0))
    num_outputs = node.attr("num_outputs", None) if node.opset >= 18 else None
    n_out = len(node.outputs)

    def run(x: np.ndarray, split: np.ndarray | None = None) -> Any:
        sp = to_ints(split) if split is not None else None
        nout = None if num_outputs is None else int(num_outputs)
        sizes = _split_sizes(x.shape[norm_axis(axis, x.ndim)], n_out, sp or None, nout)
        return _split_result(node, _do_split(x, axis, sizes))

    return run


# --------------------------------------------------------------------------------------------
# Expand / Tile


@KERNELS.register("Expand", schema_versions("Expand"))
def expand(node: NodeSpec):
    guard = output_guard(node)

    @lru_cache(maxsize=32)
    def target_of(x_shape: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(np.broadcast_shapes(x_shape, shape))

    def run(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
        target = target_of(x.shape, tuple(to_ints(shape)))  # per distinct shape pair, not per run
        guard(target, x.dtype)
        out = np.empty(target, x.dtype)
        np.copyto(out, x)  # broadcasts in C (np.broadcast_to builds a view in Python first)
        return out

    return run


Guard = Callable[[Sequence[int], np.dtype], None]


def _check_tiles(x: np.ndarray, reps: list[int], guard: Guard) -> None:
    """Refuse negative repeats, and outputs too large to allocate (np.tile would crash)."""
    shape = [d * r for d, r in zip(x.shape, reps)]
    if any(r < 0 for r in reps):
        raise ValueError(f"Tile: repeats {reps} hold a negative count")
    guard(shape, x.dtype)


@KERNELS.register("Tile", 1)
def tile_v1(node: NodeSpec):
    guard = output_guard(node)

    def run(x: np.ndarray, tiles: np.ndarray, axis: np.ndarray) -> np.ndarray:
        reps = [1] * x.ndim
        reps[norm_axis(to_int(axis), x.ndim)] = to_int(tiles)
        _check_tiles(x, reps, guard)
        return np.tile(x, reps)

    return run


@KERNELS.register("Tile", versions_between("Tile", 6))
def tile(node: NodeSpec):
    guard = output_guard(node)

    def run(x: np.ndarray, repeats: np.ndarray) -> np.ndarray:
        reps = to_ints(repeats)
        if len(reps) != x.ndim:
            raise ValueError(f"Tile: repeats {reps} do not match input rank {x.ndim}")
        _check_tiles(x, reps, guard)
        return np.tile(x, reps) if x.ndim else x.copy()

    return run


# --------------------------------------------------------------------------------------------
# Pad


_NP_PAD_MODE = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _pad(x: np.ndarray, pads: list[int], mode: str, value: Any, axes: list[int] | None, guard: Guard) -> np.ndarray:
    rank = x.ndim
    if axes is None:
        axes = list(range(rank))
    else:
        axes = [norm_axis(a, rank) for a in axes]
    n = len(axes)
    if len(pads) != 2 * n:
        raise ValueError(f"Pad: {len(pads)} pads for {n} axes")
    begin = [0] * rank
    end = [0] * rank
    for i, a in enumerate(axes):
        begin[a] = pads[i]
        end[a] = pads[i + n]
    guard([d + b + e for d, b, e in zip(x.shape, begin, end)], x.dtype)
    if mode == "constant":
        # output[j] = input[j - begin] where that lies inside the input, else the constant
        out_shape = tuple(d + b + e for d, b, e in zip(x.shape, begin, end))
        if any(n < 0 for n in out_shape):
            raise ValueError(f"Pad: pads {pads} crop more than the input shape {x.shape}")
        if x.dtype == object:
            fill: Any = "" if value is None else value
        else:
            fill = np.zeros((), x.dtype) if value is None else np.asarray(value).astype(x.dtype)
        out = np.full(out_shape, fill, dtype=x.dtype)
        dst, src = [], []
        for d, b, n in zip(x.shape, begin, out_shape):
            lo, hi = max(b, 0), min(b + d, n)
            if hi <= lo:
                return out
            dst.append(slice(lo, hi))
            src.append(slice(lo - b, hi - b))
        out[tuple(dst)] = x[tuple(src)]
        return out
    # negative pads crop first, then the remaining (positive) pads use the mode
    if any(p < 0 for p in begin + end):
        if any(d + min(b, 0) + min(e, 0) <= 0 for d, b, e in zip(x.shape, begin, end) if b < 0 or e < 0):
            raise ValueError(f"Pad: pads {pads} crop away the whole input {x.shape}")
        x = x[tuple(slice(-min(b, 0), d + min(e, 0)) for d, b, e in zip(x.shape, begin, end))]
        begin = [max(b, 0) for b in begin]
        end = [max(e, 0) for e in end]
    width = list(zip(begin, end))
    if not any(b or e for b, e in width):
        return np.array(x)
    if x.size == 0:
        raise ValueError(f"Pad: mode {mode} on an empty tensor")
    return np.pad(x, width, mode=_NP_PAD_MODE[mode])


def _pad_mode(node: NodeSpec) -> str:
    mode = node.attr("mode", "constant")
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in _NP_PAD_MODE or (mode == "wrap" and node.opset < 19):
        raise Unsupported(f"Pad mode {mode!r}")
    return mode


@KERNELS.register("Pad", (1, 2))
def pad_attr(node: NodeSpec):
    mode = _pad_mode(node)
    pads = [int(p) for p in node.attr("pads" if node.opset >= 2 else "paddings", ())]
    value = float(node.attr("value", 0.0))
    guard = output_guard(node)

    def run(x: np.ndarray) -> np.ndarray:
        return _pad(x, pads, mode, value, None, guard)

    return run


@KERNELS.register("Pad", versions_between("Pad", 11))
def pad(node: NodeSpec):
    mode = _pad_mode(node)
    guard = output_guard(node)

    def run(x: np.ndarray, pads: np.ndarray, constant_value: np.ndarray | None = None,
            axes: np.ndarray | None = None) -> np.ndarray:
        value = None
        if constant_value is not None and np.asarray(constant_value).size:
            value = np.asarray(constant_value).reshape(-1)[0]
        return _pad(x, to_ints(pads), mode, value, None if axes is None else to_ints(axes), guard)

    return run


# --------------------------------------------------------------------------------------------
# DepthToSpace / SpaceToDepth / CenterCropPad


@KERNELS.register("DepthToSpace", schema_versions("DepthToSpace"))
def depth_to_space(node: NodeSpec):
    bs = int(node.attr("blocksize"))
    check_at_least(node, "blocksize", (bs,), 1)
    mode = node.attr("mode", "DCR") if node.opset >= 11 else "DCR"
    if mode not in ("DCR", "CRD"):
        raise Unsupported(f"DepthToSpace mode {mode!r}")

    def run(x: np.ndarray) -> np.ndarray:
        b, c, h, w = x.shape
        oc = c // (bs * bs)
        if mode == "DCR":
            t = x.reshape(b, bs, bs, oc, h, w).transpose(0, 3, 4, 1, 5, 2)
        else:
            t = x.reshape(b, oc, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
        return contig(t).reshape(b, oc, h * bs, w * bs)

    return run


@KERNELS.register("SpaceToDepth", schema_versions("SpaceToDepth"))
def space_to_depth(node: NodeSpec):
    bs = int(node.attr("blocksize"))
    check_at_least(node, "blocksize", (bs,), 1)
    mode = node.attr("mode", "DCR") if node.opset >= 28 else "DCR"
    if mode not in ("DCR", "CRD"):
        raise Unsupported(f"SpaceToDepth mode {mode!r}")
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)

    def run(x: np.ndarray) -> np.ndarray:
        b, c, h, w = x.shape
        t = x.reshape(b, c, h // bs, bs, w // bs, bs).transpose(perm)
        return contig(t).reshape(b, c * bs * bs, h // bs, w // bs)

    return run


@KERNELS.register("CenterCropPad", schema_versions("CenterCropPad"))
def center_crop_pad(node: NodeSpec):
    axes_attr = node.attr("axes", None)
    guard = output_guard(node)

    def run(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
        target = to_ints(shape)
        axes = list(range(x.ndim)) if axes_attr is None else [norm_axis(a, x.ndim) for a in axes_attr]
        if len(axes) != len(target):
            raise ValueError("CenterCropPad: shape and axes lengths differ")
        src = [slice(None)] * x.ndim
        dst = [slice(None)] * x.ndim
        out_shape = list(x.shape)
        for a, t in zip(axes, target):
            d = x.shape[a]
            out_shape[a] = t
            if t < d:
                off = (d - t) // 2
                src[a] = slice(off, off + t)
            elif t > d:
                off = (t - d) // 2
                dst[a] = slice(off, off + d)
        guard(out_shape, x.dtype)
        out = np.zeros(out_shape, dtype=x.dtype)
        out[tuple(dst)] = x[tuple(src)]
        return out

    return run


# --------------------------------------------------------------------------------------------
# CumSum / CumProd


def _cumulative(ufunc: np.ufunc, identity: int):
    def factory(node: NodeSpec):
        exclusive = flag(node, "exclusive", 0)
        reverse = flag(node, "reverse", 0)

        def run(x: np.ndarray, axis: np.ndarray) -> np.ndarray:
            a = norm_axis(to_int(axis), x.ndim)
            y = np.flip(x, a) if reverse else x
            if exclusive:
                n = y.shape[a]
                pad_shape = list(y.shape)
                pad_shape[a] = 1
                head = np.full(pad_shape, identity, dtype=x.dtype)
                y = np.concatenate([head, np.take(y, np.arange(max(n - 1, 0)), axis=a)], axis=a)
            out = ufunc.accumulate(y, axis=a, dtype=x.dtype) if y.size else np.array(y)
            if reverse:
                out = np.flip(out, a)
            return contig(out)

        return run

    return factory


KERNELS.register("CumSum", schema_versions("CumSum"))(_cumulative(np.add, 0))
KERNELS.register("CumProd", schema_versions("CumProd"))(_cumulative(np.multiply, 1))


# --------------------------------------------------------------------------------------------
# Dropout


def _dropout_apply(x: np.ndarray, ratio: float, seed: Any, want_mask: bool, mask_dtype: np.dtype) -> Any:
    if ratio == 0:
        return x, (np.ones(x.shape, dtype=mask_dtype) if want_mask else None)
    if seed is not None:
        keep = np.random.RandomState(int(seed)).uniform(0.0, 1.0, x.shape) >= ratio
    else:
        keep = unseeded_generator().uniform(0.0, 1.0, x.shape) >= ratio
    if ratio >= 1:
        y = np.zeros_like(x)
    else:
        scale = np.asarray(1.0 / (1.0 - ratio)).astype(x.dtype)
        y = (x * keep.astype(x.dtype) * scale).astype(x.dtype, copy=False)
    return y, (keep.astype(mask_dtype) if want_mask else None)


@KERNELS.register("Dropout", versions_between("Dropout", 1, 12))
def dropout_legacy(node: NodeSpec):
    ratio = float(node.attr("ratio", 0.5))
    training = node.opset < 7 and not int(node.attr("is_test", 0))
    want_mask = has_output(node, 1)
    mask_dt = out_dtype(node, 1)

    def run(x: np.ndarray) -> Any:
        mdt = mask_dt if mask_dt is not None else (np.dtype(bool) if node.opset >= 10 else x.dtype)
        if training:
            y, m = _dropout_apply(x, ratio, None, want_mask, mdt)
        else:
            y, m = x, (np.ones(x.shape, dtype=mdt) if want_mask else None)
        return (y, m) if len(node.outputs) > 1 else y

    return run


@KERNELS.register("Dropout", versions_between("Dropout", 12))
def dropout(node: NodeSpec):
    seed = node.attr("seed", None)
    want_mask = has_output(node, 1)

    def run(x: np.ndarray, ratio: np.ndarray | None = None, training_mode: np.ndarray | None = None) -> Any:
        train = training_mode is not None and bool(np.asarray(training_mode).reshape(-1)[0])
        if train:
            r = 0.5 if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
            y, m = _dropout_apply(x, r, seed, want_mask, np.dtype(bool))
        else:
            y, m = x, (np.ones(x.shape, dtype=bool) if want_mask else None)
        return (arr(y), m) if len(node.outputs) > 1 else arr(y)

    return run
