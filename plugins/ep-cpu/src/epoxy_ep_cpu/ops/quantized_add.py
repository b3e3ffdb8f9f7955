"""``com.epoxy.cpu::QuantizedAdd`` and ``QuantizedMul``: a QDQ model's addition (a residual) or
product of two tensors (SiLU's and HardSwish's ``x * gate``) on its codes (written by the core's
``QDQAddPass``, ``epoxy/optimize/passes/qdq_add.py``, which says why the values are the graph's).

``QuantizedAdd(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point)``,
attribute ``relu`` (0 or 1): ``QuantizeLinear(max?(DequantizeLinear(a) + DequantizeLinear(b), 0))``
with scalar float32 scales and 8-bit zero points, each step in float32 as those ops compute it
here (``ops/quantize.py``: ``float32(codes - zp) * scale``; ``sat(rint(v / scale) + zp)``, NaN to
code 0); ``QuantizedMul`` the same with ``*``. The jit tier runs same-shape inputs as one
compiled pass that keeps their layout (the channels-last codes QLinearConv hands on), and a
per-channel ``[N, C, 1, 1]`` operand (a squeeze-excite gate) as one pass over the planes; the
numpy path runs the graph's steps, other broadcasts too.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from epoxy.contract import NodeSpec

from .. import jit
from ..registry import KERNELS
from ._packed_params import PackedParams
from .fused import DOMAIN
from .quantize import dequantize_f32, int_range, quantize_f32

_F32 = np.dtype(np.float32)
_CODES = (np.dtype(np.uint8), np.dtype(np.int8))


class QuantizedAddError(TypeError):
    """An input of a QuantizedAdd / QuantizedMul node has a type or size the fused op does not take."""


def _check_codes(node: NodeSpec, a: np.ndarray, b: np.ndarray) -> None:
    for name, value in (("a", a), ("b", b)):
        if value.dtype not in _CODES:
            raise QuantizedAddError(f"node {node.name!r} ({node.qualified_op}): input {name} must hold 8-bit codes, "
                                    f"got {value.dtype}")


def _packer(node: NodeSpec) -> Callable[..., np.ndarray]:
    """The six parameters checked, as float32 (a_zp, a_scale, b_zp, b_scale, y_scale, y_zp, lo, hi)."""

    def pack(*params: np.ndarray) -> np.ndarray:
        for name, value in zip(("a_scale", "a_zero_point", "b_scale", "b_zero_point", "y_scale", "y_zero_point"),
                               params):
            want = _F32 if name.endswith("scale") else None
            wrong_type = value.dtype != want if want is not None else value.dtype not in _CODES
            if value.size != 1 or wrong_type:
                raise QuantizedAddError(f"node {node.name!r} ({node.qualified_op}): {name} must be a scalar "
                                        f"{'float32' if want is not None else '8-bit integer'}, got {value.dtype} "
                                        f"of shape {list(value.shape)}")
        a_scale, a_zp, b_scale, b_zp, y_scale, y_zp = params
        lo, hi = int_range(y_zp.dtype)
        return np.array([a_zp.reshape(()), a_scale.reshape(()), b_zp.reshape(()), b_scale.reshape(()),
                         y_scale.reshape(()), y_zp.reshape(()), lo, hi], dtype=_F32)

    return pack


def _per_plane(small: np.ndarray, full: np.ndarray) -> bool:
    """``small`` holds one value per (n, c) plane of ``full`` [N, C, ...]: a squeeze-excite gate."""
    return (full.ndim >= 3 and small.ndim == full.ndim and small.shape[:2] == full.shape[:2]
            and all(d == 1 for d in small.shape[2:]))


@KERNELS.register("QuantizedAdd", 1, domain=DOMAIN)
def quantized_add(node: NodeSpec) -> Callable[..., np.ndarray]:
    return _quantized_binary(node, np.add, mul=False)


@KERNELS.register("QuantizedMul", 1, domain=DOMAIN)
def quantized_mul(node: NodeSpec) -> Callable[..., np.ndarray]:
    return _quantized_binary(node, np.multiply, mul=True)


def _quantized_binary(node: NodeSpec, combine: np.ufunc, mul: bool) -> Callable[..., np.ndarray]:
    relu = bool(int(node.attr("relu", 0)))
    compiled = jit.kernels("quantize")
    nthreads = jit.thread_count() if compiled is not None else 0

    packed = PackedParams(_packer(node))

    def run(a: np.ndarray, a_scale: np.ndarray, a_zp: np.ndarray, b: np.ndarray, b_scale: np.ndarray,
            b_zp: np.ndarray, y_scale: np.ndarray, y_zp: np.ndarray) -> np.ndarray:
        _check_codes(node, a, b)
        params = packed(a_scale, a_zp, b_scale, b_zp, y_scale, y_zp)
        if compiled is not None and a.size and b.size:
            if a.shape == b.shape:
                return compiled.run_quantized_binary(a, b, params, relu, mul, y_zp.dtype, nthreads)
            if _per_plane(b, a):
                return compiled.run_quantized_binary_rows(a, b, params, relu, mul, y_zp.dtype, nthreads)
            if _per_plane(a, b):  # the op commutes exactly in float32: the plane values go second
                swapped = np.concatenate([params[2:4], params[0:2], params[4:]])
                return compiled.run_quantized_binary_rows(b, a, swapped, relu, mul, y_zp.dtype, nthreads)
        v = combine(dequantize_f32(a, a_scale.reshape(()), a_zp.reshape(())),
                    dequantize_f32(b, b_scale.reshape(()), b_zp.reshape(())))
        if relu:
            np.maximum(v, _F32.type(0), out=v)
        return quantize_f32(v, y_scale.reshape(()), y_zp.reshape(()), y_zp.dtype)

    return run
