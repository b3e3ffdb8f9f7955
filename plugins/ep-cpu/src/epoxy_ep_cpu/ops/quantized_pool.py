"""``com.epoxy.cpu::QuantizedGlobalAveragePool(x, x_scale, x_zero_point, y_scale, y_zero_point)``
and ``QuantizedAveragePool`` (the same inputs, AveragePool's 2-D attributes):
a QDQ global or windowed average pool on its 8-bit codes (written by the core's QDQGlobalAveragePoolPass,
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
from ._attr_checks import invalid
from ._flags import flag
from ._layout import as_nchw
from ._packed_params import PackedParams
from .fused import DOMAIN
from .pool import _PoolAttrs, _window_counts, _window_sums
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


@KERNELS.register("QuantizedAveragePool", 1, domain=DOMAIN)
def quantized_average_pool(node: NodeSpec) -> Callable[..., np.ndarray]:
    """``QuantizedAveragePool(x, x_scale, x_zero_point, y_scale, y_zero_point)`` with AveragePool's
    2-D attributes (written by the core's QDQAveragePoolPass): per window
    ``sat(rint((sum(x) - n * x_zp) * x_scale / (y_scale * d)) + y_zp)``, ``n`` the window's
    positions inside the input and ``d`` its divisor (``n``, or with ``count_include_pad`` the
    padding too), the sum exact. The jit tier runs it channels last (the layout QLinearConv
    hands codes on in) and writes channels last; both paths compute the same float64 steps."""
    attrs = _PoolAttrs(node)
    if attrs.nsp != 2:
        raise invalid(node, f"QuantizedAveragePool takes 2-D windows, got kernel_shape {list(attrs.kernel)}")
    include_pad = flag(node, "count_include_pad", 0)
    compiled = jit.kernels("pool")
    nthreads = jit.thread_count() if compiled is not None else 0
    packed = PackedParams(_packer(node))
    seen: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def terms(sp: tuple[int, ...], out_sp: list[int], begin: list[int], end: list[int], zx: float,
              ratio: float) -> tuple[np.ndarray, np.ndarray]:
        """Per output position: its positions inside the input times x_zp, and x_scale / y_scale
        over its divisor (float64, (OH, OW)); kept per input shape and parameters."""
        key = (sp, zx, ratio)
        found = seen.get(key)
        if found is None:
            real, divisor = [], []
            for i in range(2):
                args = (sp[i], out_sp[i], attrs.kernel[i], attrs.strides[i], attrs.dilations[i], begin[i])
                real.append(_window_counts(*args, 0, sp[i]))
                divisor.append(_window_counts(*args, -begin[i], sp[i] + end[i]) if include_pad else real[-1])
            positions = np.outer(real[0], real[1]).astype(np.float64)
            found = (positions * zx, ratio / np.maximum(np.outer(divisor[0], divisor[1]), 1).astype(np.float64))
            if len(seen) < 16:
                seen[key] = found
        return found

    def run(x: np.ndarray, x_scale: np.ndarray, x_zp: np.ndarray, y_scale: np.ndarray,
            y_zp: np.ndarray) -> np.ndarray:
        _check_codes(node, x)
        if x.ndim != 4:
            raise QuantizedPoolError(f"node {node.name!r} ({node.qualified_op}): input x must be 4-D codes "
                                     f"(N, C, H, W), got shape {list(x.shape)}")
        zx, ratio, zy, dtype = packed(x_scale, x_zp, y_scale, y_zp)
        out_sp, begin, end, _ = attrs.geometry(x)
        if min(out_sp) <= 0 or x.shape[0] == 0 or x.shape[1] == 0:
            return np.zeros(x.shape[:2] + tuple(max(o, 0) for o in out_sp), dtype)
        shift, factor = terms(x.shape[2:], out_sp, begin, end, zx, ratio)
        lo, hi = int_range(dtype)
        if compiled is not None:
            nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))  # free for QLinearConv's codes
            params = np.array([zy, lo, hi], np.float64)
            return as_nchw(compiled.codes.average_pool(nhwc, attrs.kernel, attrs.strides, attrs.dilations, begin,
                                                       shift, factor, params, dtype, nthreads))
        sums = _window_sums(x, attrs, lambda v: v.astype(np.float64))[0]
        codes = np.rint((sums - shift) * factor) + zy
        return np.clip(codes, lo, hi).astype(dtype)

    return run
