"""The numpy evaluation of the data-movement ops folded when all their inputs are constants
(ConstantOfShape, Unsqueeze, Squeeze, Reshape, Transpose, Concat, Identity): exact, so a fold
gives what the kernel would.

Why a module of its own: the optimizer's :class:`~epoxy.optimize.passes.ConstantFoldingPass`
and loading (:mod:`epoxy.load.constant_fills`, which folds them on the protobuf before the
graph is built) apply the same rules, read from one place. An evaluator reads a node only
through its attributes, so either can call it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

#: a node's attribute by name, ``(name, default=None) -> value`` (repeated ones as lists,
#: a tensor as an object with ``numpy()``): all an evaluator reads of its node
Attributes = Callable[..., Any]


def _axes(attrs: Attributes, opset: int, since: int, args: list[np.ndarray | None]) -> list[int] | None:
    if opset >= since:
        return None if len(args) < 2 or args[1] is None else [int(a) for a in args[1].reshape(-1)]
    found = attrs("axes")
    return None if found is None else [int(a) for a in found]


def _constant_of_shape(attrs: Attributes, opset: int, args: list) -> np.ndarray:
    shape = tuple(int(d) for d in args[0].reshape(-1))
    value = attrs("value")
    fill = np.zeros(1, dtype=np.float32) if value is None else value.numpy().reshape(-1)
    return np.full(shape, fill[0], dtype=fill.dtype)


def _unsqueeze(attrs: Attributes, opset: int, args: list) -> np.ndarray | None:
    x = args[0]
    axes = _axes(attrs, opset, 13, args)
    if axes is None:
        return None
    rank = x.ndim + len(axes)
    axes = sorted(a + rank if a < 0 else a for a in axes)
    if len(set(axes)) != len(axes) or any(not 0 <= a < rank for a in axes):
        return None
    out = x
    for a in axes:
        out = np.expand_dims(out, a)
    return out


def _squeeze(attrs: Attributes, opset: int, args: list) -> np.ndarray | None:
    x = args[0]
    axes = _axes(attrs, opset, 13, args)
    if axes is None:
        return np.squeeze(x)
    axes = [a + x.ndim if a < 0 else a for a in axes]
    if any(not 0 <= a < x.ndim or x.shape[a] != 1 for a in axes):
        return None
    return np.squeeze(x, axis=tuple(axes))


def _reshape(attrs: Attributes, opset: int, args: list) -> np.ndarray | None:
    x = args[0]
    if opset < 5:
        return None
    shape = [int(d) for d in args[1].reshape(-1)]
    allowzero = opset >= 14 and bool(attrs("allowzero", 0))
    if not allowzero:
        shape = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(shape)]
    if shape.count(-1) > 1:
        return None
    try:
        return x.reshape(shape)
    except ValueError:
        return None


def _transpose(attrs: Attributes, opset: int, args: list) -> np.ndarray | None:
    perm = attrs("perm")
    return np.transpose(args[0], None if perm is None else tuple(perm))


def _concat(attrs: Attributes, opset: int, args: list) -> np.ndarray | None:
    axis = attrs("axis")
    if axis is None or any(a is None for a in args) or len({a.dtype for a in args}) != 1:
        return None
    return np.concatenate(args, axis=axis)


#: op: (number of inputs read, -1 for all; evaluator)
FOLDERS: dict[str, tuple[int, Callable[[Attributes, int, list], np.ndarray | None]]] = {
    "ConstantOfShape": (1, _constant_of_shape),
    "Unsqueeze": (2, _unsqueeze),
    "Squeeze": (2, _squeeze),
    "Reshape": (2, _reshape),
    "Transpose": (1, _transpose),
    "Identity": (1, lambda attrs, opset, args: args[0]),
    "Concat": (-1, _concat),
}


#: the folds whose result is their first input's elements in another shape: of a constant
#: fill (one value everywhere), a fill again (Identity too, but the optimizer removes those
#: before it folds: :class:`~epoxy.optimize.passes.IdentityEliminationPass`)
RESHAPING = frozenset({"Unsqueeze", "Squeeze", "Reshape", "Transpose"})
