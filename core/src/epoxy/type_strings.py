"""onnxruntime's type strings (``tensor(float)``, ``tensor(int64)``...) for epoxy's types.

``NodeArg.type`` (the session's ``get_inputs()``) and ``OrtValue.data_type()`` must spell a
type the same way, or code comparing the two breaks; one function serves both.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .contract import ValueType
from .dtypes import describe_dtype

# numpy names that onnxruntime spells differently; the others (int64, bool, float16...) agree
_ORT_TYPE_NAMES = {
    "float32": "float", "float64": "double", "object": "string",
}


def type_string(vt: ValueType) -> str:
    """onnxruntime's name for a value type: ``tensor(float)``, ``sequence(tensor(int64))``..."""
    if vt.kind == "tensor":
        name = describe_dtype(vt.dtype)
        return f"tensor({_ORT_TYPE_NAMES.get(name, name)})"
    if vt.kind in ("sequence", "optional"):
        return f"{vt.kind}({type_string(vt.element or ValueType())})"
    return "unknown"


def tensor_type_string(dtype: Any) -> str:
    """onnxruntime's name for a tensor of this numpy dtype (``float32`` -> ``tensor(float)``)."""
    return type_string(ValueType("tensor", dtype=np.dtype(dtype)))
