"""Sequence and optional ops: sequences are Python lists of arrays, an empty optional is None.

Every op returns a new list; inputs (lists and arrays) are never modified.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from epoxy.contract import NodeSpec

from ..registry import KERNELS
from ._flags import flag


def _position(value: Any, length: int, *, inclusive_end: bool, what: str) -> int:
    """A scalar position tensor as an index into a sequence of ``length`` (negatives from the end)."""
    arr = np.asarray(value)
    if arr.size != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"{what}: position must be an integer scalar, got {arr.dtype} with shape {list(arr.shape)}")
    pos = int(arr.reshape(-1)[0])
    upper = length if inclusive_end else length - 1
    if not -length <= pos <= upper:
        raise IndexError(f"{what}: position {pos} out of range for a sequence of {length}")
    return pos + length if pos < 0 else pos


def _sequence(value: Any, what: str) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{what}: expected a sequence, got {type(value).__name__}")
    return list(value)


@KERNELS.register("SequenceConstruct", since=11)
def sequence_construct(node: NodeSpec):
    def run(*tensors: np.ndarray) -> list[np.ndarray]:
        if tensors:
            first = np.asarray(tensors[0]).dtype
            if any(np.asarray(t).dtype != first for t in tensors):
                raise TypeError("SequenceConstruct: all tensors must have the same dtype")
        return list(tensors)

    return run


@KERNELS.register("SequenceEmpty", since=11)
def sequence_empty(node: NodeSpec):
    def run() -> list[np.ndarray]:
        return []

    return run


@KERNELS.register("SequenceAt", since=11)
def sequence_at(node: NodeSpec):
    def run(seq: list[np.ndarray], position: np.ndarray) -> np.ndarray:
        seq = _sequence(seq, "SequenceAt")
        return seq[_position(position, len(seq), inclusive_end=False, what="SequenceAt")]

    return run


@KERNELS.register("SequenceInsert", since=11)
def sequence_insert(node: NodeSpec):
    def run(seq: list[np.ndarray], tensor: np.ndarray, position: np.ndarray | None = None) -> list[np.ndarray]:
        out = _sequence(seq, "SequenceInsert")
        if out and np.asarray(tensor).dtype != np.asarray(out[0]).dtype:
            raise TypeError(
                f"SequenceInsert: tensor dtype {np.asarray(tensor).dtype} differs from the sequence's "
                f"{np.asarray(out[0]).dtype}"
            )
        where = (
            len(out) if position is None else _position(position, len(out), inclusive_end=True, what="SequenceInsert")
        )
        out.insert(where, tensor)
        return out

    return run


@KERNELS.register("SequenceErase", since=11)
def sequence_erase(node: NodeSpec):
    def run(seq: list[np.ndarray], position: np.ndarray | None = None) -> list[np.ndarray]:
        out = _sequence(seq, "SequenceErase")
        if not out:
            raise IndexError("SequenceErase: the sequence is empty")
        where = (
            len(out) - 1
            if position is None
            else _position(position, len(out), inclusive_end=False, what="SequenceErase")
        )
        del out[where]
        return out

    return run


@KERNELS.register("SequenceLength", since=11)
def sequence_length(node: NodeSpec):
    def run(seq: list[np.ndarray]) -> np.ndarray:
        return np.asarray(len(_sequence(seq, "SequenceLength")), dtype=np.int64)

    return run


@KERNELS.register("SplitToSequence", since=(11, 24))
def split_to_sequence(node: NodeSpec):
    axis = int(node.attr("axis", 0))
    keepdims = flag(node, "keepdims", 1)

    def run(x: np.ndarray, split: np.ndarray | None = None) -> list[np.ndarray]:
        x = np.asarray(x)
        if x.ndim == 0:
            raise ValueError("SplitToSequence: input must have rank >= 1")
        ax = axis + x.ndim if axis < 0 else axis
        if not 0 <= ax < x.ndim:
            raise ValueError(f"SplitToSequence: axis {axis} out of range for rank {x.ndim}")
        size = x.shape[ax]
        if split is None:
            parts = np.split(x, size, axis=ax) if size else []
            return [np.squeeze(p, axis=ax) for p in parts] if not keepdims else parts
        split_arr = np.asarray(split).astype(np.int64)
        if split_arr.ndim == 0:
            chunk = int(split_arr)
            if chunk <= 0:
                raise ValueError(f"SplitToSequence: split must be positive, got {chunk}")
            bounds = list(range(chunk, size, chunk))
        else:
            lengths = split_arr.reshape(-1)
            if (lengths < 0).any() or int(lengths.sum()) != size:
                raise ValueError(f"SplitToSequence: split {lengths.tolist()} does not sum to dim {size} of axis {ax}")
            bounds = np.cumsum(lengths)[:-1].tolist()
        return list(np.split(x, bounds, axis=ax))

    return run


@KERNELS.register("ConcatFromSequence", since=11)
def concat_from_sequence(node: NodeSpec):
    axis = int(node.attr("axis"))
    new_axis = flag(node, "new_axis", 0)

    def run(seq: list[np.ndarray]) -> np.ndarray:
        items = [np.asarray(t) for t in _sequence(seq, "ConcatFromSequence")]
        if not items:
            raise ValueError("ConcatFromSequence: cannot concatenate an empty sequence")
        rank = items[0].ndim + (1 if new_axis else 0)
        ax = axis + rank if axis < 0 else axis
        if not 0 <= ax < rank:
            raise ValueError(f"ConcatFromSequence: axis {axis} out of range for rank {rank}")
        return np.stack(items, axis=ax) if new_axis else np.concatenate(items, axis=ax)

    return run


@KERNELS.register("Optional", since=15)
def optional(node: NodeSpec):
    def run(value: Any = None) -> Any:
        return value  # a present value is the optional's element; None is the empty optional

    return run


@KERNELS.register("OptionalHasElement", since=(15, 18))
def optional_has_element(node: NodeSpec):
    def run(value: Any = None) -> np.ndarray:
        return np.asarray(value is not None)

    return run


@KERNELS.register("OptionalGetElement", since=(15, 18))
def optional_get_element(node: NodeSpec):
    def run(value: Any) -> Any:
        if value is None:
            raise ValueError("OptionalGetElement: the optional is empty")
        return value

    return run
