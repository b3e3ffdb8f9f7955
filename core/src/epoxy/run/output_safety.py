"""Outputs never share memory with the caller's feeds or the session's weights.

A graph output that is a graph input (pass-through), or a view of one (Identity, Reshape,
Squeeze kernels return views), would hand the caller its own buffer back: writing into the
input after ``run`` would change the "output". One that is an initializer, or a view of one,
would let the caller overwrite the model's weights. onnxruntime returns fresh arrays; so does
epoxy: such outputs are copied, everything else is returned as computed (no extra pass).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


def memory_owner(array: np.ndarray) -> Any:
    """The object at the end of ``array``'s ``.base`` chain (itself when it owns its data)."""
    owner: Any = array
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    return owner


def owners_of(values: Iterable[Any]) -> set[int]:
    """ids of the memory owners of the arrays among ``values``, and of the sequences
    (lists) and maps (dicts) among them (a constant-folded ZipMap gives a list of dicts)."""
    return {id(memory_owner(v)) if isinstance(v, np.ndarray) else id(v) for v in values
            if isinstance(v, (np.ndarray, list, dict))}


def detach_aliases(results: Sequence[Any], feeds: Iterable[Any], constant_owners: set[int]) -> list[Any]:
    """``results`` with every array that shares an owner with a feed or a constant copied, and
    every other array C-ordered (a kernel may hand back a strided view, e.g. ep-cpu's int8
    convolution writes channels last; callers get the layout onnxruntime gives them)."""
    feeds = list(feeds)
    for v in results:  # a plain loop: this runs after every run (generators cost ~0.5 us here)
        if type(v) is not np.ndarray or v.base is not None or not v.flags.c_contiguous or id(v) in constant_owners:
            break
        if any(v is f for f in feeds):
            break
    else:
        return list(results)  # each owns its C-ordered memory and is no feed or constant: nothing to do
    feed_owners = owners_of(feeds)
    feed_owners |= {id(memory_owner(v)) for seq in feeds if isinstance(seq, list) for v in seq
                    if isinstance(v, np.ndarray)}
    shared = feed_owners | constant_owners

    def detach(value: Any, inside_shared: bool = False) -> Any:
        if isinstance(value, np.ndarray):
            if id(memory_owner(value)) in shared:
                return value.copy()
            return value if value.flags.c_contiguous else np.ascontiguousarray(value)
        if isinstance(value, list):  # sequence outputs: their elements
            inside = inside_shared or id(value) in shared
            return [detach(v, inside) for v in value]
        if isinstance(value, dict):  # maps: their keys and values are immutable scalars
            return dict(value) if inside_shared or id(value) in shared else value
        return value

    return [detach(v) for v in results]
