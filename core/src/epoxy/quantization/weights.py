"""Weights and biases to integers, per tensor or per output channel, from their own values.

Weights need no calibration: their range is their min and max. Per channel, each slice along
the output-channel axis gets its own scale, so a channel of small weights is not rounded to
zero by the scale a large channel needs. A bias becomes int32 with scale
``input_scale * weight_scale`` and zero point 0: the scale an integer kernel's int32
accumulator already has, so the bias adds to it without rescaling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epoxy.quantization.params import QuantDtype, qrange, quant_params

_INT32 = np.iinfo(np.int32)


@dataclass(frozen=True)
class QuantizedTensor:
    """Integer values with DequantizeLinear's ``scale`` and ``zero_point`` (scalars per
    tensor, 1-D along ``axis`` per channel; ``axis`` is None per tensor)."""

    values: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None

    def dequantized(self) -> np.ndarray:
        """DequantizeLinear of the values (the float tensor the model computes with)."""
        scale, zero_point = self.scale, self.zero_point.astype(np.int64)
        if self.axis is not None:
            shape = [1] * self.values.ndim
            shape[self.axis] = -1
            scale, zero_point = scale.reshape(shape), zero_point.reshape(shape)
        return ((self.values.astype(np.int64) - zero_point).astype(np.float32) * scale).astype(np.float32)


def quantize_weight(w: np.ndarray, *, dtype: QuantDtype = "int8", axis: int | None = None, symmetric: bool = True,
                    reduce_range: bool = False) -> QuantizedTensor:
    """Quantize ``w`` per tensor (``axis=None``) or per slice along ``axis``.

    ``reduce_range`` keeps 7 bits (see :func:`qrange`); values are clipped to that range
    even where the type holds more, as the u8s8 kernels it exists for need.
    """
    w = np.asarray(w, np.float32)
    clip = qrange(dtype, symmetric=symmetric, reduce_range=reduce_range)
    if axis is None:
        params = quant_params((float(w.min(initial=0.0)), float(w.max(initial=0.0))), dtype=dtype,
                              symmetric=symmetric, reduce_range=reduce_range)
        scale = np.asarray(params.scale, np.float32)
        zero_point = np.asarray(params.zero_point)
        q = np.rint(w / scale) + np.float32(zero_point)
    else:
        axis = axis % w.ndim
        rows = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
        per = [quant_params((float(r.min(initial=0.0)), float(r.max(initial=0.0))), dtype=dtype,
                            symmetric=symmetric, reduce_range=reduce_range) for r in rows]
        scale = np.array([p.scale for p in per], np.float32)
        zero_point = np.array([p.zero_point for p in per], dtype=np.dtype(dtype))
        shape = [1] * w.ndim
        shape[axis] = -1
        q = np.rint(w / scale.reshape(shape)) + zero_point.reshape(shape).astype(np.float32)
    values = np.clip(q, clip[0], clip[1]).astype(np.dtype(dtype))
    return QuantizedTensor(values, scale, zero_point, axis)


def quantize_bias(b: np.ndarray, input_scale: np.floating | float, weight_scale: np.ndarray) -> QuantizedTensor | None:
    """``b`` as int32 with scale ``input_scale * weight_scale`` (per channel when the weight's
    scale is), zero point 0; None when a value does not fit int32 (the bias then stays float:
    clipping it would silently change the model's output)."""
    b = np.asarray(b, np.float32)
    scale = (np.float32(input_scale) * np.asarray(weight_scale, np.float32)).astype(np.float32)
    if scale.ndim and scale.shape[0] != (b.shape[0] if b.ndim == 1 else -1):
        raise ValueError(f"bias of shape {b.shape} does not match {scale.shape[0]} weight channels")
    q = np.rint(b.astype(np.float64) / scale.astype(np.float64))
    if q.size and (q.min() < _INT32.min or q.max() > _INT32.max):
        return None
    zero_point = np.zeros(scale.shape, np.int32)
    return QuantizedTensor(q.astype(np.int32), scale, zero_point, 0 if scale.ndim else None)
