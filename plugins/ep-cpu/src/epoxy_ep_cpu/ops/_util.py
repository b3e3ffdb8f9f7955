"""Small helpers shared by op families (attribute defaults, axis handling, output dtypes)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.run.limits import output_size_check


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


def output_guard(node: NodeSpec) -> Callable[[Sequence[int], np.dtype], None]:
    """``check(shape, dtype)`` to call before allocating an output whose shape comes from
    input values (ConstantOfShape, Expand, Range, Tile, Pad, Resize...): raises the core's
    ResourceLimitError naming the node, the shape and the bytes when it is over the
    session's memory limit or the memory left. Made in the kernel factory (binds the limit)."""
    return output_size_check(f"node {node.name!r} ({node.op_type})", node.outputs[0] if node.outputs else None)


def buffer_guard(node: NodeSpec, label: str) -> Callable[[Sequence[int], np.dtype], None]:
    """:func:`output_guard` for a temporary buffer a kernel sizes from attributes (a padded
    input, an accumulation buffer): the error names the node and ``label``."""
    return output_size_check(f"node {node.name!r} ({node.op_type}) {label}", node.outputs[0] if node.outputs else None)


def work_bytes_dtype(dtype: np.dtype) -> np.dtype:
    """A dtype as wide as the buffers float kernels compute ``dtype`` in (float32, or
    float64 for 8-byte inputs), for sizing them before they exist."""
    return np.dtype(np.float64) if np.dtype(dtype).itemsize > 4 else np.dtype(np.float32)


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
