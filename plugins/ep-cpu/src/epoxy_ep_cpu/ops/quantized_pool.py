"""``com.epoxy.cpu::QuantizedGlobalAveragePool(x, x_scale, x_zero_point, y_scale, y_zero_point)``:
a QDQ global average pool on its 8-bit codes (written by the core's QDQGlobalAveragePoolPass,
``epoxy/optimize/passes/qdq_pool.py``, which says how its codes relate to the QDQ graph's).

Per (n, c): ``sat(rint((sum(x) - count * x_zp) * x_scale / (y_scale * count)) + y_zp)``, the sum
exact in integers, the rest in float64. The jit tier sums and writes the codes in one compiled
pass over the codes in the order they lie (the channels-last codes QLinearConv hands on need no
transpose).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from epoxy.contract import NodeSpec

from .. import jit
from ..registry import KERNELS
from ._packed_params import PackedParams
from .fused import DOMAIN
from .quantize import int_range

_CODES = (np.dtype(np.uint8), np.dtype(np.int8))


class QuantizedPoolError(TypeError):
    """An input of a QuantizedGlobalAveragePool node has a type or shape the op does not take."""


def _check_codes(node: NodeSpec, x: np.ndarray) -> None:
    if x.dtype not in _CODES or x.ndim < 3:
        raise QuantizedPoolError(f"node {node.name!r} ({node.qualified_op}): input x must be 8-bit codes of rank 3 "
                                 f"or more, got {x.dtype} of shape {list(x.shape)}")


def _packer(node: NodeSpec) -> Callable[..., tuple[float, float, float, np.dtype]]:
    """The four parameters checked, as (x_zp, x_scale / y_scale, y_zp, codes dtype)."""

    def pack(*params: np.ndarray) -> tuple[float, float, float, np.dtype]:
        for name, value in zip(("x_scale", "x_zero_point", "y_scale", "y_zero_point"), params):
            is_scale = name.endswith("scale")
            if value.size != 1 or (value.dtype != np.float32 if is_scale else value.dtype not in _CODES):
                raise QuantizedPoolError(f"node {node.name!r} ({node.qualified_op}): {name} must be a scalar "
                                         f"{'float32' if is_scale else '8-bit integer'}, got {value.dtype} of shape "
                                         f"{list(value.shape)}")
        x_scale, x_zp, y_scale, y_zp = params
        ratio = float(x_scale.reshape(())) / float(y_scale.reshape(()))
        return float(x_zp.reshape(())), ratio, float(y_zp.reshape(())), y_zp.dtype

    return pack


@KERNELS.register("QuantizedGlobalAveragePool", 1, domain=DOMAIN)
def quantized_global_average_pool(node: NodeSpec) -> Callable[..., np.ndarray]:
    compiled = jit.kernels("quantize")
    nthreads = jit.thread_count() if compiled is not None else 0

    packed = PackedParams(_packer(node))

    def run(x: np.ndarray, x_scale: np.ndarray, x_zp: np.ndarray, y_scale: np.ndarray,
            y_zp: np.ndarray) -> np.ndarray:
        _check_codes(node, x)
        zx, ratio, zy, dtype = packed(x_scale, x_zp, y_scale, y_zp)
        count = math.prod(x.shape[2:])
        shape = x.shape[:2] + (1,) * (x.ndim - 2)
        if count == 0:  # the float reading's mean is NaN, which QuantizeLinear maps to code 0 here
            return np.zeros(shape, dtype)
        factor = ratio / count
        lo, hi = int_range(dtype)
        if compiled is not None and x.size:
            params = np.array([zx, factor, zy, lo, hi], np.float64)
            return compiled.run_channel_means(x, params, dtype, nthreads).reshape(shape)
        sums = x.sum(axis=tuple(range(2, x.ndim)), dtype=np.int64)
        codes = np.rint((sums - count * int(zx)).astype(np.float64) * factor) + zy
        return np.clip(codes, lo, hi).astype(dtype).reshape(shape)

    return run
