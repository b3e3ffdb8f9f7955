"""Scale and zero point from a float range, with ONNX QuantizeLinear's conventions.

QuantizeLinear computes ``saturate(round_half_to_even(x / scale) + zero_point)``; the range
is widened to include 0 so that 0.0 maps exactly to the zero point (padding and Relu's zeros
must survive the round trip). The integer ranges are onnxruntime's, so a model quantized here
and one quantized there agree: symmetric int8 uses [-127, 127] (zero point 0, no lonely
-128), reduce_range keeps 7 bits ([-64, 64], [0, 127]) for the u8s8 instructions whose
pairwise sums would otherwise overflow int16.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np

QuantDtype = Literal["int8", "uint8"]

_NUMPY = {"int8": np.int8, "uint8": np.uint8}


class Range(NamedTuple):
    """A float range ``[lo, hi]`` chosen for a tensor."""

    lo: float
    hi: float


class QuantParams(NamedTuple):
    """``scale`` (float32) and ``zero_point`` (int8 or uint8), as QuantizeLinear takes them."""

    scale: np.float32
    zero_point: np.integer


def qrange(dtype: QuantDtype = "int8", *, symmetric: bool = False, reduce_range: bool = False) -> tuple[int, int]:
    """The integer range ``(qmin, qmax)`` for a quantized type and scheme."""
    if dtype not in _NUMPY:
        raise ValueError(f"dtype must be 'int8' or 'uint8', got {dtype!r}")
    if reduce_range:
        return (-64, 64) if dtype == "int8" else (0, 127)
    if dtype == "int8":
        return (-127, 127) if symmetric else (-128, 127)
    return (0, 255)


def quant_params(rng: float | tuple[float, float], *, dtype: QuantDtype = "int8", symmetric: bool = False,
                 reduce_range: bool = False) -> QuantParams:
    """Scale and zero point for a threshold ``t`` (the range ``[-t, t]``) or a ``(lo, hi)`` range.

    Symmetric: the range becomes ``[-m, m]`` with ``m = max(|lo|, |hi|)`` and the zero point is
    the middle of the integer range (0 for int8, 128 for uint8). A range of width 0 gives
    scale 1 and zero point 0 (everything quantizes to zero, which is exact).
    """
    if isinstance(rng, tuple):
        lo, hi = float(rng[0]), float(rng[1])
    else:
        lo, hi = -abs(float(rng)), abs(float(rng))
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo > hi:
        raise ValueError(f"range must be finite with lo <= hi, got ({lo}, {hi})")
    qmin, qmax = qrange(dtype, symmetric=symmetric, reduce_range=reduce_range)
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if symmetric:
        m = max(-lo, hi)
        lo, hi = -m, m
    scale = (hi - lo) / (qmax - qmin)
    if scale < np.finfo(np.float32).tiny:
        return QuantParams(np.float32(1.0), _NUMPY[dtype](0))
    if symmetric:
        zero_point = float(np.round((qmin + qmax) / 2.0))
    else:
        zero_point = float(np.clip(np.round(qmin - lo / scale), qmin, qmax))
    return QuantParams(np.float32(scale), _NUMPY[dtype](zero_point))


def quantize(x: np.ndarray, params: QuantParams, *, clip: tuple[int, int] | None = None) -> np.ndarray:
    """ONNX QuantizeLinear (per tensor): round half to even, then saturate to the type, or to
    ``clip`` (a :func:`qrange`) as a quantizer does for weights under reduce_range."""
    scale, zero_point = params
    info = np.iinfo(zero_point.dtype)
    low, high = clip if clip is not None else (info.min, info.max)
    q = np.rint(np.asarray(x, np.float32) / scale) + np.float32(zero_point)
    return np.clip(q, low, high).astype(zero_point.dtype)


def dequantize(q: np.ndarray, params: QuantParams) -> np.ndarray:
    """ONNX DequantizeLinear (per tensor)."""
    scale, zero_point = params
    return ((q.astype(np.int32) - np.int32(zero_point)).astype(np.float32) * scale).astype(np.float32)
