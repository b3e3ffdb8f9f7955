"""The activations the compiled kernels apply in their store pass, by code.

Why one place: the direct and grid convolutions, the 1x1 GEMM epilogue and the BatchNorm pass
all finish with FusedConv's (or a fusion's) activation on each element while it is in a
register. Only exact elementwise ops are here, so a fused result equals the standalone
kernels' bit for bit; the rest run after the kernel, in numpy (``ops/conv.py``'s
``JIT_ACTIVATIONS`` maps names to these codes).
"""

from __future__ import annotations

from numba import njit

from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)

#: activation codes (``alpha``/``beta``: LeakyRelu's slope; Clip's low and high bounds)
ACT_NONE, ACT_RELU, ACT_LEAKY, ACT_CLIP = 0, 1, 2, 3
#: codes only :func:`activate_wide` has (``alpha``/``beta``: HardSigmoid's; HardSwish's 6 and 0.5)
ACT_HARD_SIGMOID, ACT_HARD_SWISH = 4, 5


@njit(inline="always", cache=True, nogil=True)
def activate(v, act, alpha, beta):  # pragma: no cover - compiled
    """``v`` through activation ``act``; NaN stays NaN."""
    if act == 1:
        return 0.0 if v < 0 else v
    if act == 2:
        return v if v >= 0 else v * alpha
    if act == 3:
        return beta if v > beta else (alpha if v < alpha else v)
    return v


@njit(inline="always", cache=True, nogil=True)
def unit(t):  # pragma: no cover - compiled
    """``t`` clipped to [0, 1] as numpy's clip does it; NaN stays NaN."""
    return 0.0 if t < 0 else (1.0 if t > 1 else t)


@njit(inline="always", cache=True, nogil=True)
def activate_wide(v, act, alpha, beta):  # pragma: no cover - compiled
    """:func:`activate` plus HardSigmoid (``clip(v * alpha + beta, 0, 1)``) and HardSwish (``v *
    clip(v / alpha + beta, 0, 1)``, alpha 6 and beta 0.5), each rounded as the numpy passes and
    ``kernels_special``'s loops round them: the same bits. For the store passes of kernels
    whose layers are small enough that a second pass over the output costs more than the
    branch (``kernels_conv_small``, the small-map depthwise kernels): each code is a branch in
    the store's loop, which slowed the larger kernels' stores (``ops/conv.JIT_ACTIVATIONS``)."""
    if act == ACT_HARD_SIGMOID:
        return unit(v * alpha + beta)
    if act == ACT_HARD_SWISH:
        return v * unit(v / alpha + beta)
    return activate(v, act, alpha, beta)
