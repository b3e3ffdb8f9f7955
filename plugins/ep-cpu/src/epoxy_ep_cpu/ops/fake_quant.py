"""``com.epoxy.cpu::QuantizeDequantizeLinear``: an activation's QuantizeLinear -> DequantizeLinear
pair on one float32 temporary (written by the core's ``QuantizeDequantizePairPass``).

``QuantizeDequantizeLinear(X, scale, zero_point)`` with attribute ``axis`` (default 1) reads
like QuantizeLinear (per-tensor or per-axis, no blocks; the zero point's type is the integer
code type) and returns ``DequantizeLinear(QuantizeLinear(X))`` in float32.

Why it is exact: with ``q = rint(X / scale)`` (float32 division, half to even), the pair's
output is ``float32(clip(q + zp, lo, hi) - zp) * scale``; every integer here is below 2**24,
so ``clip(q, lo - zp, hi - zp)`` in float32 is that difference exactly (after ``q + 0.0`` turns
``rint``'s -0.0 into the pair's +0.0), and a NaN (code 0 in epoxy's QuantizeLinear) becomes
``-zp``. The integer codes are never materialized: a division and
in-place passes over one float32 temporary (the clip and NaN scan only when the
values leave the range) instead of eight passes over three arrays.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from epoxy.contract import NodeSpec

from .. import jit
from ..registry import KERNELS
from ._util import normalize_axis
from .fused import DOMAIN
from .quantize import FAST_CODES, expand_param, int_range, saturate_into

_F32 = np.dtype(np.float32)


class QuantizeDequantizeError(TypeError):
    """An input of a QuantizeDequantizeLinear node has a type the fused op does not take."""


def _check(node: NodeSpec, x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> None:
    if x.dtype != _F32 or scale.dtype != _F32 or zero_point.dtype not in FAST_CODES:
        raise QuantizeDequantizeError(
            f"node {node.name!r} ({node.qualified_op}): needs float32 X and scale and an 8/16-bit integer "
            f"zero point, got X {x.dtype}, scale {scale.dtype}, zero_point {zero_point.dtype}")


def fake_quantize(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """``dequantize(quantize(x))`` for float32 ``x``/``scale`` and broadcastable ``zero_point``
    of the code type (see the module docstring for why it equals the pair)."""
    lo, hi = int_range(zero_point.dtype)
    zp = zero_point.astype(_F32)
    y = np.divide(x, scale, dtype=_F32)
    np.rint(y, out=y)
    y += _F32.type(0.0)  # -0.0 -> +0.0: the pair's code zp - zp is +0 (rint(-0.3) is -0.0)
    saturate_into(y, _F32.type(lo) - zp, _F32.type(hi) - zp, _F32.type(0.0) - zp)  # 0 - 0 is +0, -0 is not
    y *= scale
    return y


@KERNELS.register("QuantizeDequantizeLinear", 1, domain=DOMAIN)
def quantize_dequantize_linear(node: NodeSpec) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    axis = int(node.attr("axis", 1))
    compiled = jit.kernels("quantize")
    nthreads = jit.thread_count() if compiled is not None else 0

    def run(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
        _check(node, x, scale, zero_point)
        if compiled is not None and x.size:
            lo, hi = int_range(zero_point.dtype)
            if scale.size == 1 and zero_point.size == 1:
                return compiled.run_fake_quant(x, scale, zero_point, lo, hi, None, nthreads)
            ax = normalize_axis(axis, x.ndim)
            if 0 <= ax < x.ndim and scale.shape == zero_point.shape == (x.shape[ax],):
                return compiled.run_fake_quant(x, scale, zero_point, lo, hi, ax, nthreads)
        return fake_quantize(x, expand_param(scale, x.shape, axis, 0),
                             expand_param(zero_point, x.shape, axis, 0))

    return run
