"""Small helpers shared by op families (attribute defaults, axis handling, output dtypes)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from epoxy.contract import NodeSpec


def normalize_axis(axis: int, rank: int) -> int:
    """Negative axes count from the end, as ONNX allows."""
    return axis + rank if axis < 0 else axis


def normalize_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    return tuple(normalize_axis(int(a), rank) for a in axes)


def output_dtype(node: NodeSpec, index: int = 0) -> np.dtype | None:
    """Statically inferred dtype of an output, if shape inference knew it."""
    if index < len(node.output_types):
        return node.output_types[index].dtype
    return None


#: No output may be larger than this many bytes: numpy's own size arithmetic overflows
#: (and np.tile segfaults) long before, so shapes computed from tensor values are checked.
MAX_OUTPUT_BYTES = 1 << 48


def check_output_shape(op: str, shape: Sequence[int], itemsize: int) -> None:
    """Raise ``ValueError`` for a negative dim or a size no machine can allocate."""
    total = itemsize
    for d in shape:
        if d < 0:
            raise ValueError(f"{op}: output shape {list(shape)} has a negative dimension")
        total *= int(d)
    if total > MAX_OUTPUT_BYTES:
        raise ValueError(f"{op}: output shape {list(shape)} would need {total:,} bytes; refused")


def constant_input(node: NodeSpec, index: int) -> np.ndarray | None:
    """Value of input ``index`` when it is a constant no feed can override (for prepacking
    weights in a factory), else ``None``. The kernel still receives the value at run time."""
    if index >= len(node.inputs) or not node.inputs[index]:
        return None
    value = node.constants.get(node.inputs[index])
    return value if isinstance(value, np.ndarray) else None


def as_text(value: object) -> str:
    """A string attribute or a string-tensor element as ``str`` (onnx hands tensor
    elements back as UTF-8 ``bytes``)."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def text_or(value: object, default: str) -> str:
    """``as_text(value)``, or ``default`` when the attribute is absent."""
    return default if value is None else as_text(value)
