"""ONNX element types <-> numpy dtypes, in one place (exotic floats come from ml_dtypes)."""

from __future__ import annotations

from functools import cache

import numpy as np
import onnx
from onnx import helper


@cache
def onnx_to_numpy(elem_type: int) -> np.dtype:
    """Numpy dtype for an ONNX ``TensorProto.DataType`` value."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


@cache
def onnx_type_name(elem_type: int) -> str:
    """Readable ONNX name of an element type (``FLOAT``, ``INT64``...)."""
    return onnx.TensorProto.DataType.Name(elem_type)


def describe_dtype(dtype: np.dtype | None) -> str:
    """Short dtype text for error messages."""
    if dtype is None:
        return "any"
    return "string" if np.dtype(dtype) == np.dtype(object) else str(np.dtype(dtype))
