"""The activations the compiled kernels apply in their store pass, by code.

Why one place: the direct and grid convolutions, the 1x1 GEMM epilogue and the BatchNorm pass
all finish with FusedConv's (or a fusion's) activation on each element while it is in a
register. Only exact elementwise ops are here, so a fused result equals the standalone
kernels' bit for bit; the rest run after the kernel, in numpy (``ops/conv.py``'s
``JIT_ACTIVATIONS`` maps names to these codes).
"""

from __future__ import annotations

from numba import njit

#: activation codes (``alpha``/``beta``: LeakyRelu's slope; Clip's low and high bounds)
ACT_NONE, ACT_RELU, ACT_LEAKY, ACT_CLIP = 0, 1, 2, 3


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
