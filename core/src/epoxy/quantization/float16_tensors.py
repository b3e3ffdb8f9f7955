"""Float32 tensors to float16 / bfloat16, with out-of-range values clipped and tiny ones flushed.

Kept apart from the graph rewrite in :mod:`epoxy.quantization.float16` because this part is
plain numpy: it rounds (to nearest even, as every runtime casts) and counts what did not fit,
so the converter can name the initializers that lost values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper, numpy_helper

#: ``dtype`` name -> (ONNX element type, largest finite value, smallest positive subnormal)
TARGETS: dict[str, tuple[int, float, float]] = {
    "float16": (TensorProto.FLOAT16, 65504.0, 2.0**-24),
    "bfloat16": (TensorProto.BFLOAT16, 3.3895313892515355e38, 2.0**-133),
}


@dataclass(frozen=True)
class TensorLoss:
    """What converting one tensor cost: values clipped to the finite range, values flushed to 0."""

    name: str
    clipped: int
    flushed: int


def _bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 (nearest even) as uint16 bit patterns; NaN stays a quiet NaN."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


def convert_array(values: np.ndarray, dtype: str, *, max_finite: float, min_positive: float) -> tuple[
        np.ndarray, int, int]:
    """Clip finite values past ``max_finite`` to +-``max_finite`` and set magnitudes below
    ``min_positive`` to a signed zero; returns (float32 array ready to round, clipped, flushed).
    Infinities and NaN are kept: they were already there in the float32 model."""
    values = np.asarray(values, dtype=np.float32)
    finite = np.isfinite(values)
    over = finite & (np.abs(values) > max_finite)
    tiny = (values != 0) & (np.abs(values) < min_positive)
    out = np.where(over, np.sign(values) * np.float32(max_finite), values)
    out = np.where(tiny, np.copysign(np.float32(0), values), out).astype(np.float32)
    return out, int(over.sum()), int(tiny.sum())


def convert_tensor(tensor: TensorProto, dtype: str, *, max_finite: float, min_positive: float) -> tuple[
        TensorProto, TensorLoss]:
    """A float32 ``TensorProto`` as a ``dtype`` one of the same name and shape."""
    values, clipped, flushed = convert_array(numpy_helper.to_array(tensor), dtype, max_finite=max_finite,
                                             min_positive=min_positive)
    if dtype == "float16":
        out = numpy_helper.from_array(values.astype(np.float16), tensor.name)
    else:
        out = helper.make_tensor(tensor.name, TensorProto.BFLOAT16, list(values.shape),
                                 _bfloat16_bits(values).tobytes(), raw=True)
    if tensor.doc_string:
        out.doc_string = tensor.doc_string
    return out, TensorLoss(tensor.name, clipped, flushed)
