"""Broadcast shapes of two operands, remembered: ``np.broadcast_shapes`` costs 3-5 us a call,
as much as the tiny Add or bias it guards on the exporter models; a model has few shape pairs."""

from __future__ import annotations

import numpy as np

_SHAPES: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, ...] | None] = {}
_MAX = 4096


def broadcast_pair(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The numpy broadcast of shapes ``a`` and ``b``, or None when they do not broadcast."""
    key = (a, b)
    try:
        return _SHAPES[key]
    except KeyError:
        pass
    try:
        out: tuple[int, ...] | None = tuple(int(d) for d in np.broadcast_shapes(a, b))
    except ValueError:
        out = None
    if len(_SHAPES) >= _MAX:
        _SHAPES.clear()
    _SHAPES[key] = out
    return out


def fits_into(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    """Whether ``small`` broadcasts to ``big`` without changing it (an in-place update of an
    array of shape ``big`` by one of shape ``small`` is possible)."""
    return small == big or broadcast_pair(big, small) == big
