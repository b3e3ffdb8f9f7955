"""Activation functions (Relu family, sigmoid family, Gelu, Swish...).

Float attributes are Python floats, so numpy keeps the array's dtype (NEP 50); float16 and
bfloat16 inputs are computed in float32 and cast back (see ``float_unary``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._elementwise_util import arr, compute_dtype, erf, float_unary, is_narrow_float, with_small_jit
from ._out import accepts_out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """Overflow-free logistic function."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)) without overflow."""
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


_CLIP_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _clip_ufunc() -> Any:
    """numpy's clip ufunc itself: ``np.clip`` reaches it through three Python wrappers
    (~2 us a call, most of a small tensor's Relu); the public function where it moved."""
    core = getattr(np, "_core", None) or getattr(np, "core", None)
    found = getattr(getattr(core, "umath", None), "clip", None)
    return found if isinstance(found, np.ufunc) else np.clip


_CLIP = _clip_ufunc()


#: Relu's bounds as scalars of each float dtype, made once (making two numpy scalars per call
#: doubled a small tensor's Relu: 3.3 us against 1.7)
_RELU_BOUNDS = {dt: (dt.type(0), dt.type(np.inf)) for dt in _CLIP_FLOATS}


def relu_into(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """max(x, 0) for float32/float64 (NaN stays NaN). The clip loop with both bounds of the
    array's dtype is ~3x faster than ``np.maximum`` against a scalar on large arrays (which
    takes a slow broadcasting path)."""
    lo, hi = _RELU_BOUNDS[x.dtype]
    return _CLIP(x, lo, hi, out=out)


@KERNELS.register("Relu", (1, 6, 13, 14))
def relu(node: NodeSpec):
    def run(x: np.ndarray) -> np.ndarray:
        if x.dtype in _CLIP_FLOATS:
            return arr(relu_into(x))
        if is_narrow_float(x.dtype):
            return arr(np.maximum(x.astype(np.float32), np.float32(0)).astype(x.dtype))
        return arr(np.maximum(x, x.dtype.type(0)))

    def into(out: np.ndarray, x: np.ndarray) -> np.ndarray | None:
        if x.dtype == out.dtype and x.shape == out.shape and x.dtype in _CLIP_FLOATS:
            return relu_into(x, out=out)
        return None

    return accepts_out(run, into)


@KERNELS.register("LeakyRelu", (1, 6, 16))
def leaky_relu(node: NodeSpec):
    alpha = float(node.attr("alpha", 0.01))
    return float_unary(lambda x: np.where(x >= 0, x, x * alpha))


@KERNELS.register("PRelu", (1, 6, 7, 9, 16))
def prelu(node: NodeSpec):
    legacy = node.opset < 7

    def run(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
        slope = np.asarray(slope)
        if legacy and slope.ndim == 1 and x.ndim > 2 and slope.size == x.shape[1] and slope.size != 1:
            # opset 1/6 (Caffe-style): a 1-D slope is per channel (axis 1)
            slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
        cdt = compute_dtype(x.dtype)
        xc = x.astype(cdt, copy=False)
        with np.errstate(all="ignore"):
            out = np.where(xc >= 0, xc, xc * slope.astype(cdt, copy=False))
        return arr(out).astype(x.dtype, copy=False)

    return run


@KERNELS.register("Elu", (1, 6, 22))
def elu(node: NodeSpec):
    alpha = float(node.attr("alpha", 1.0))
    return float_unary(lambda x: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))))


@KERNELS.register("Selu", (1, 6, 22))
def selu(node: NodeSpec):
    alpha = float(node.attr("alpha", 1.67326319217681884765625))
    gamma = float(node.attr("gamma", 1.05070102214813232421875))
    return float_unary(lambda x: gamma * np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))))


@KERNELS.register("Celu", (12, 28))
def celu(node: NodeSpec):
    alpha = float(node.attr("alpha", 1.0))
    return float_unary(lambda x: np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(np.minimum(x, 0) / alpha)))


KERNELS.register("Sigmoid", (1, 6, 13))(with_small_jit("sigmoid", float_unary(_sigmoid)))


def hard_sigmoid_into(x: np.ndarray, alpha: float, beta: float, out: np.ndarray | None = None) -> np.ndarray:
    """``clip(alpha * x + beta, 0, 1)`` for float32/float64 ``x``, in its dtype, into ``out``
    (``x`` itself may be it). The clip ufunc on scalars of the dtype, not ``np.clip``'s
    wrappers: a small tensor's call 4.9 -> ~2 us, the same bits."""
    dt = x.dtype.type
    y = np.multiply(x, dt(alpha), out=out)
    np.add(y, dt(beta), out=y)
    return _CLIP(y, dt(0), dt(1), out=y)  # type: ignore[no-any-return]


def hard_swish_into(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``x * clip(x / 6 + 0.5, 0, 1)`` for float32/float64 ``x``, in its dtype, into ``out``
    (``x`` itself may be it); see :func:`hard_sigmoid_into`."""
    dt = x.dtype.type
    t = np.divide(x, dt(6))
    np.add(t, dt(0.5), out=t)
    _CLIP(t, dt(0), dt(1), out=t)
    return np.multiply(x, t, out=t if out is None else out)


@KERNELS.register("HardSigmoid", (1, 6, 22))
def hard_sigmoid(node: NodeSpec):
    alpha = float(node.attr("alpha", 0.2))
    beta = float(node.attr("beta", 0.5))
    general = float_unary(lambda x: np.clip(alpha * x + beta, 0, 1))

    def run(x: np.ndarray) -> np.ndarray:
        if type(x) is np.ndarray and x.dtype in _CLIP_FLOATS:
            return hard_sigmoid_into(x, alpha, beta)
        return general(x)

    return run


@KERNELS.register("HardSwish", (14, 22))
def hard_swish(node: NodeSpec):
    general = float_unary(lambda x: x * np.clip(x / 6 + 0.5, 0, 1))

    def run(x: np.ndarray) -> np.ndarray:
        if type(x) is np.ndarray and x.dtype in _CLIP_FLOATS:
            return hard_swish_into(x)
        return general(x)

    return run


@KERNELS.register("Softplus", (1, 22))
def softplus(node: NodeSpec):
    return float_unary(_softplus)


@KERNELS.register("Softsign", (1, 22))
def softsign(node: NodeSpec):
    return float_unary(lambda x: x / (1 + np.abs(x)))


@KERNELS.register("Tanh", (1, 6, 13))
def tanh(node: NodeSpec):
    return float_unary(np.tanh)


@KERNELS.register("ThresholdedRelu", (10, 22))
def thresholded_relu(node: NodeSpec):
    alpha = float(node.attr("alpha", 1.0))
    return float_unary(lambda x: np.where(x > alpha, x, 0))


@KERNELS.register("Shrink", 9)
def shrink(node: NodeSpec):
    lambd = float(node.attr("lambd", 0.5))
    bias = float(node.attr("bias", 0.0))

    def math_(x: np.ndarray) -> np.ndarray:
        return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))

    floats = float_unary(math_)

    def run(x: np.ndarray) -> np.ndarray:
        if x.dtype.kind in "iu":
            with np.errstate(all="ignore"):
                return arr(math_(x.astype(np.float64))).astype(x.dtype)
        return floats(x)

    return run


@KERNELS.register("Mish", (18, 22))
def mish(node: NodeSpec):
    return float_unary(lambda x: x * np.tanh(_softplus(x)))


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    """0.5 * x * (1 + erf(x / sqrt(2))) with one temporary (erf's result, updated in place)."""
    y = erf(x * _INV_SQRT_2)
    if y.dtype != x.dtype:  # erf keeps float32 / float64; anything else goes the long way
        return 0.5 * x * (1 + y)
    y += 1
    y *= x
    y *= 0.5
    return y


@KERNELS.register("Gelu", 20)
def gelu(node: NodeSpec):
    approximate = node.attr("approximate", "none")
    if isinstance(approximate, bytes):
        approximate = approximate.decode()
    if approximate == "none":
        return with_small_jit("gelu", float_unary(_gelu_erf))(node)
    if approximate == "tanh":
        return float_unary(lambda x: 0.5 * x * (1 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))))
    raise Unsupported(f"Gelu: unknown approximate={approximate!r}")


@KERNELS.register("Swish", 24)
def swish(node: NodeSpec):
    alpha = float(node.attr("alpha", 1.0))
    return float_unary(lambda x: x * _sigmoid(alpha * x))
