"""``com.epoxy.cpu::QuantizedGlobalAveragePool(x, x_scale, x_zero_point, y_scale, y_zero_point)``:
a QDQ global average pool on its 8-bit codes (written by the core's QDQGlobalAveragePoolPass,
``epoxy/optimize/passes/qdq_pool.py``, which says how its codes relate to the QDQ graph's).

Per (n, c): ``sat(rint((sum(x) - count * x_zp) * x_scale / (y_scale * count)) + y_zp)``, the sum
exact in integers, the rest in float64. The jit tier sums in one compiled pass over the codes in
the order they lie (the channels-last codes QLinearConv hands on need no transpose).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from epoxy.contract import NodeSpec

from .. import jit
from ..registry import KERNELS
from .fused import DOMAIN
from .quantize import int_range

_CODES = (np.dtype(np.uint8), np.dtype(np.int8))


class QuantizedPoolError(TypeError):
    """An input of a QuantizedGlobalAveragePool node has a type or shape the op does not take."""


def _check(node: NodeSpec, x: np.ndarray, params: tuple[np.ndarray, ...]) -> None:
    where = f"node {node.name!r} ({node.qualified_op})"
    if x.dtype not in _CODES or x.ndim < 3:
        raise QuantizedPoolError(f"{where}: input x must be 8-bit codes of rank 3 or more, got {x.dtype} "
                                 f"of shape {list(x.shape)}")
    for name, value in zip(("x_scale", "x_zero_point", "y_scale", "y_zero_point"), params):
        is_scale = name.endswith("scale")
        if value.size != 1 or (value.dtype != np.float32 if is_scale else value.dtype not in _CODES):
            raise QuantizedPoolError(f"{where}: {name} must be a scalar {'float32' if is_scale else '8-bit integer'}"
                                     f", got {value.dtype} of shape {list(value.shape)}")


@KERNELS.register("QuantizedGlobalAveragePool", 1, domain=DOMAIN)
def quantized_global_average_pool(node: NodeSpec) -> Callable[..., np.ndarray]:
    compiled = jit.kernels("quantize")
    nthreads = jit.thread_count() if compiled is not None else 0

    def run(x: np.ndarray, x_scale: np.ndarray, x_zp: np.ndarray, y_scale: np.ndarray,
            y_zp: np.ndarray) -> np.ndarray:
        _check(node, x, (x_scale, x_zp, y_scale, y_zp))
        count = int(np.prod(x.shape[2:]))
        shape = x.shape[:2] + (1,) * (x.ndim - 2)
        if count == 0:  # the float reading's mean is NaN, which QuantizeLinear maps to code 0 here
            return np.zeros(shape, y_zp.dtype)
        if compiled is not None and x.size:
            sums = compiled.run_channel_sums(x, nthreads)
        else:
            sums = x.sum(axis=tuple(range(2, x.ndim)), dtype=np.int64)
        centred = sums.astype(np.float64) - count * float(x_zp.reshape(()))
        factor = float(x_scale.reshape(())) / (float(y_scale.reshape(())) * count)
        codes = np.rint(centred * factor) + float(y_zp.reshape(()))
        lo, hi = int_range(y_zp.dtype)
        out = np.clip(codes, lo, hi).astype(y_zp.dtype)
        return out.reshape(shape)

    return run
