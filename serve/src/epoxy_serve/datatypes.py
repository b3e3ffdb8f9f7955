"""Open Inference Protocol (KServe v2) datatype names <-> numpy dtypes: the one table every engine
and the protocol codec read."""

from __future__ import annotations

import ml_dtypes
import numpy as np

#: protocol name -> numpy dtype (BYTES: object arrays of bytes, as tritonclient sends them)
DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_), "UINT8": np.dtype(np.uint8), "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32), "UINT64": np.dtype(np.uint64), "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16), "INT32": np.dtype(np.int32), "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16), "FP32": np.dtype(np.float32), "FP64": np.dtype(np.float64),
    "BF16": np.dtype(ml_dtypes.bfloat16), "BYTES": np.dtype(object),
}
_NAMES: dict[np.dtype, str] = {dtype: name for name, dtype in DATATYPES.items()}


def to_numpy(datatype: str) -> np.dtype:
    """The numpy dtype of a protocol datatype; KeyError for an unknown name (callers word the error)."""
    return DATATYPES[datatype.upper()]


def to_protocol(dtype: np.dtype | type) -> str:
    """The protocol datatype of a numpy dtype (strings travel as BYTES)."""
    dt = np.dtype(dtype)
    if dt.kind in ("U", "S", "O"):
        return "BYTES"
    try:
        return _NAMES[dt]
    except KeyError:
        raise ValueError(f"numpy dtype {dt} has no Open Inference Protocol datatype") from None
