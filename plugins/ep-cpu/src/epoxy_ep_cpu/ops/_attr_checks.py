"""Refusing attribute values no kernel can run, before they reach numpy.

A kernel factory calls these with what is static at session creation (attributes, the
inferred input ranks and dims); a kernel whose input shapes were unknown then calls the same
check at run time, before it allocates. A value the spec does not allow is an
:class:`InvalidGraphError` naming the node, the attribute, its value and the allowed range
(not a ``ZeroDivisionError`` or a ``MemoryError`` from deep inside numpy, nor a loop that
never ends).
"""

from __future__ import annotations

from collections.abc import Sequence

from epoxy.contract import NodeSpec
from epoxy.errors import InvalidGraphError


def invalid(node: NodeSpec, message: str) -> InvalidGraphError:
    """The error for ``node``: ``node 'name' (Op): message``."""
    return InvalidGraphError(f"node {node.name!r} ({node.op_type}): {message}", node=node.name)


def static_rank(node: NodeSpec, index: int) -> int | None:
    """Rank of input ``index`` when shape inference knew it, else None."""
    if index >= len(node.input_types):
        return None
    shape = node.input_types[index].shape
    return None if shape is None else len(shape)


def static_dim(node: NodeSpec, index: int, axis: int) -> int | None:
    """Dim ``axis`` (negative counts from the end) of input ``index`` when it is a known int."""
    if index >= len(node.input_types):
        return None
    shape = node.input_types[index].shape
    if shape is None or not -len(shape) <= axis < len(shape):
        return None
    dim = shape[axis]
    return dim if isinstance(dim, int) else None


def check_axis(node: NodeSpec, name: str, axis: int, rank: int) -> int:
    """``axis`` normalized for an input of ``rank``; outside ``[-rank, rank - 1]`` it is refused."""
    if not -rank <= axis < rank:
        raise invalid(node, f"attribute {name!r} = {axis} is outside [{-rank}, {rank - 1}] (input rank {rank})")
    return axis + rank if axis < 0 else axis


def check_static_axis(node: NodeSpec, name: str, axis: int, index: int = 0) -> None:
    """:func:`check_axis` against input ``index`` when its rank is static (else the kernel
    checks at run time)."""
    rank = static_rank(node, index)
    if rank is not None:
        check_axis(node, name, axis, rank)


def check_at_least(node: NodeSpec, name: str, values: Sequence[int], minimum: int) -> None:
    """Every entry of an int or ints attribute at least ``minimum`` (kernel sizes, strides,
    dilations, block sizes: a 0 divides by zero, a negative one reads backwards)."""
    bad = [int(v) for v in values if int(v) < minimum]
    if bad:
        shown = values[0] if len(values) == 1 else list(values)
        raise invalid(node, f"attribute {name!r} = {shown} must be >= {minimum}")
