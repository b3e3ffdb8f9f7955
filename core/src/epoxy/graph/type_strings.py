"""onnxruntime's type strings (``tensor(float)``, ``tensor(int64)``...) for epoxy's types.

``NodeArg.type`` (the session's ``get_inputs()``) and ``OrtValue.data_type()`` must spell a
type the same way, or code comparing the two breaks; one function serves both.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..contract import ValueType
from .dtypes import describe_dtype

# numpy names that onnxruntime spells differently; the others (int64, bool, float16...) agree
_ORT_TYPE_NAMES = {
    "float32": "float", "float64": "double", "object": "string",
}


def type_string(vt: ValueType) -> str:
    """onnxruntime's name for a value type: ``tensor(float)``, ``seq(tensor(int64))``,
    ``optional(tensor(float))``, ``map(string,tensor(int64))``; element types are ONNX's
    names in lower case (``bfloat16``, ``float8e4m3fn``, ``int4``), as onnxruntime prints them."""
    if vt.kind == "tensor":
        if vt.elem_type:
            from .dtypes import onnx_type_name

            return f"tensor({onnx_type_name(vt.elem_type).lower()})"
        name = describe_dtype(vt.dtype)
        return f"tensor({_ORT_TYPE_NAMES.get(name, name)})"
    if vt.kind == "sequence":
        return f"seq({type_string(vt.element or ValueType())})"
    if vt.kind == "optional":
        return f"optional({type_string(vt.element or ValueType())})"
    if vt.kind == "map":  # onnxruntime: map(string,tensor(int64)), no space after the comma
        key = describe_dtype(vt.key_dtype)
        return f"map({_ORT_TYPE_NAMES.get(key, key)},{type_string(vt.element or ValueType())})"
    return "unknown"


def tensor_type_string(dtype: Any) -> str:
    """onnxruntime's name for a tensor of this numpy dtype (``float32`` -> ``tensor(float)``)."""
    return type_string(ValueType("tensor", dtype=np.dtype(dtype)))
