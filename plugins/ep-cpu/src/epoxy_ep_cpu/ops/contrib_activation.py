"""com.microsoft (onnxruntime contrib) activations that onnxruntime's transformer optimizer
and Hugging Face Optimum emit: Gelu, FastGelu, BiasGelu, QuickGelu, BiasAdd, BiasSplitGelu.

Narrow floats (float16, bfloat16) are computed in float32 and rounded once at the end.
"""

from __future__ import annotations

import numpy as np

from epoxy.contract import NodeSpec

from ..registry import KERNELS
from ._attention_util import sigmoid
from ._elementwise_util import compute_dtype, float_unary
from .activation import _SQRT_2_OVER_PI, _gelu_erf

MS = "com.microsoft"


def _tanh_gelu(x: np.ndarray) -> np.ndarray:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))."""
    return 0.5 * x * (1 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


def _biased(fn):
    """``fn(x + bias)`` in the compute dtype, cast back to x's dtype; bias optional."""

    def run(x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        cd = compute_dtype(x.dtype)
        xc = x.astype(cd)  # a copy: fn may work in place
        if bias is not None:
            xc += bias.astype(cd, copy=False)
        with np.errstate(all="ignore"):
            return np.asarray(fn(xc)).astype(x.dtype, copy=False)

    return run


@KERNELS.register("Gelu", 1, domain=MS)
def gelu(node: NodeSpec):
    """Exact (erf) GELU."""
    return float_unary(_gelu_erf)


@KERNELS.register("BiasGelu", 1, domain=MS)
def bias_gelu(node: NodeSpec):
    """Exact GELU of ``A + B`` (B broadcast over the last axis)."""
    return _biased(_gelu_erf)


@KERNELS.register("FastGelu", 1, domain=MS)
def fast_gelu(node: NodeSpec):
    """tanh-approximated GELU of ``X + bias`` (bias optional)."""
    return _biased(_tanh_gelu)


@KERNELS.register("QuickGelu", 1, domain=MS)
def quick_gelu(node: NodeSpec):
    """``x * sigmoid(alpha * x)`` (alpha defaults to 1.702)."""
    alpha = float(node.attr("alpha", 1.702))
    return float_unary(lambda x: x * sigmoid(x * x.dtype.type(alpha)))


@KERNELS.register("BiasAdd", 1, domain=MS)
def bias_add(node: NodeSpec):
    """``X + bias + skip`` (X, skip: [N, S, C]; bias: [C])."""

    def run(x: np.ndarray, bias: np.ndarray, skip: np.ndarray) -> np.ndarray:
        cd = compute_dtype(x.dtype)
        y = x.astype(cd) + bias.astype(cd, copy=False)
        y += skip.astype(cd, copy=False)
        return y.astype(x.dtype, copy=False)

    return run


@KERNELS.register("BiasSplitGelu", 1, domain=MS)
def bias_split_gelu(node: NodeSpec):
    """``left * gelu(right)`` where ``[left, right]`` are the halves of ``X + bias`` along the
    last axis (X: [N, S, D]; bias: [D]; Y: [N, S, D/2])."""

    def run(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
        d = x.shape[-1]
        if d % 2:
            raise ValueError(f"BiasSplitGelu: last dimension {d} is odd")
        cd = compute_dtype(x.dtype)
        xb = x.astype(cd) + bias.astype(cd, copy=False)
        left, right = xb[..., : d // 2], np.ascontiguousarray(xb[..., d // 2:])
        with np.errstate(all="ignore"):
            return (left * _gelu_erf(right)).astype(x.dtype, copy=False)

    return run
