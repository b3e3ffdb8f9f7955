"""The activations the compiled kernels apply in their store pass, by code.

Why one place: the direct and grid convolutions, the 1x1 GEMM epilogue and the BatchNorm pass
all finish with FusedConv's (or a fusion's) activation on each element while it is in a
register. Only exact elementwise ops are here, so a fused result equals the standalone
kernels' bit for bit (HardSigmoid within one rounding, see ``activate``); the rest run after
the kernel, in numpy (``ops/conv.py``'s
``JIT_ACTIVATIONS`` maps names to these codes).
"""

from __future__ import annotations

from numba import njit

#: activation codes (``alpha``/``beta``: LeakyRelu's slope; Clip's low and high bounds;
#: HardSigmoid's ``alpha * v + beta``; HardSwish's divisor 6 and offset 0.5, ``v * clip(v / 6 +
#: 0.5, 0, 1)`` as the standalone kernel computes it)
ACT_NONE, ACT_RELU, ACT_LEAKY, ACT_CLIP, ACT_HARD_SIGMOID, ACT_HARD_SWISH = 0, 1, 2, 3, 4, 5


@njit(inline="always", cache=True, nogil=True)
def _unit(t):  # pragma: no cover - compiled
    """``t`` clipped to [0, 1]; NaN stays NaN."""
    return 0.0 if t < 0 else (1.0 if t > 1 else t)


@njit(inline="always", cache=True, nogil=True)
def activate(v, act, alpha, beta):  # pragma: no cover - compiled
    """``v`` through activation ``act``; NaN stays NaN. ``alpha`` and ``beta`` are of ``v``'s
    dtype, so the hard activations compute in it as the standalone kernels do (HardSigmoid's
    ``v * alpha + beta`` may become one fused multiply-add in a kernel compiled with
    contraction: within one rounding of the standalone kernel's)."""
    if act == 1:
        return 0.0 if v < 0 else v
    if act == 2:
        return v if v >= 0 else v * alpha
    if act == 3:
        return beta if v > beta else (alpha if v < alpha else v)
    if act == 4:
        return _unit(v * alpha + beta)
    if act == 5:
        return v * _unit(v / alpha + beta)
    return v
