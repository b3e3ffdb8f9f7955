"""Edits ``SessionOptions`` asks for on the model as loaded, before checking and shape
inference (free-dimension overrides, replaced initializers), and writing the optimized
model (``optimized_model_filepath``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import InvalidArgumentError
from ..options import SessionOptions


def model_edits(options: SessionOptions) -> Callable[[onnx.ModelProto], None] | None:
    """One function applying the options' model edits to a proto, or None when there are none."""
    dims = options.free_dimension_overrides
    initializers = options.initializer_overrides
    if not (dims["name"] or dims["denotation"] or initializers):
        return None

    def apply(proto: onnx.ModelProto) -> None:
        override_free_dimensions(proto.graph, dims["name"], dims["denotation"])
        replace_initializers(proto.graph, initializers)

    return apply


def override_free_dimensions(graph: onnx.GraphProto, by_name: dict[str, int], by_denotation: dict[str, int]) -> None:
    """Fix the symbolic input dimensions named (``dim_param``) or denoted as given."""
    for value in graph.input:
        if not value.type.HasField("tensor_type"):
            continue
        for dim in value.type.tensor_type.shape.dim:
            size = None
            if dim.HasField("dim_param") and dim.dim_param in by_name:
                size = by_name[dim.dim_param]
            elif dim.denotation and dim.denotation in by_denotation:
                size = by_denotation[dim.denotation]
            if size is not None:
                dim.dim_value = size  # clears dim_param (a oneof)


def _as_array(name: str, value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    to_numpy = getattr(value, "numpy", None)
    if callable(to_numpy):
        return np.asarray(to_numpy())
    raise InvalidArgumentError(f"initializer {name!r}: expected an OrtValue or numpy array, got {type(value).__name__}")


def replace_initializers(graph: onnx.GraphProto, values: dict[str, Any]) -> None:
    """Replace initializers by name; the dtype and shape must stay the model's."""
    existing = {t.name: k for k, t in enumerate(graph.initializer)}
    for name, value in values.items():
        if name not in existing:
            raise InvalidArgumentError(
                f"add_initializer: the model has no initializer {name!r} to replace "
                f"(initializers: {sorted(existing)[:20]}{' ...' if len(existing) > 20 else ''})")
        array = _as_array(name, value)
        old = graph.initializer[existing[name]]
        want_dtype = onnx.helper.tensor_dtype_to_np_dtype(old.data_type)
        if array.dtype != want_dtype or list(array.shape) != list(old.dims):
            raise InvalidArgumentError(
                f"add_initializer {name!r}: expected {np.dtype(want_dtype)} {list(old.dims)} as in the model, "
                f"got {array.dtype} {list(array.shape)}")
        graph.initializer[existing[name]].CopyFrom(numpy_helper.from_array(array, name))


def save_optimized(model: Any, path: str) -> None:
    """Write the optimized ``onnx_ir`` model as ONNX (weights beside it when over 2 GiB)."""
    import onnx_ir as ir

    from .map_types import restore_map_types

    proto = ir.serde.serialize_model(model)
    restore_map_types(proto, model)  # onnx_ir holds no map types: the loader carried them
    target = Path(path)
    try:
        onnx.save(proto, str(target))
    except ValueError:  # over protobuf's 2 GiB: weights in a side file
        onnx.save(proto, str(target), save_as_external_data=True, location=target.name + ".data")
