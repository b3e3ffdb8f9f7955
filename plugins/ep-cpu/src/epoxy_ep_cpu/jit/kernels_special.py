"""Compiled Erf, Gelu (erf form) and Sigmoid for small float32/float64 tensors.

Why only small ones: the numpy paths evaluate these as a chain of whole-array passes (erf
is a polynomial of ~20 numpy calls, sigmoid an ``exp`` plus a ``where``), so on the
exporter-made models' [1, 16, 32] activations a call costs 9-25 us of fixed overhead,
while a scalar loop over libm's ``erf``/``exp`` costs ~1 us plus a few ns an element. On
large tensors numpy's vectorized passes win (no SVML here: libm's erf is ~12 ns an
element), so above :data:`SMALL` elements the numpy path runs. The loops are serial: a
parallel launch alone costs ~2 us.

Accuracy: each element is computed in float64 (libm ``erf``/``exp``) and rounded once to
the output dtype, as exact as the numpy paths or more.

float32 has its own loops on the vectorizable exp and erf of ``fast_math`` (Sigmoid ~1 ns an
element, Erf ~4; within 0.504 ulp of the true value); Gelu's works in float32 lanes
(``gelu_f32``: ~1 ns an element, within 5 ulp, its small negative values included, which
1 + erf loses). They beat numpy's passes at every size up to :data:`SMALL_F32`, so they take
those too.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numba import njit

from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
from .activations import unit
from .fast_math import erf as fast_erf
from .fast_math import exp as fast_exp
from .gelu_f32 import gelu as gelu_f32

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
#: the most elements each compiled loop takes: timed against the numpy paths at 1 thread
#: (float32, median of 3000 calls), jit / numpy us: Erf 512: 7.3 / 19.4, 2048: 25.0 / 25.3,
#: 4096: 50 / 34; Gelu 512: 8.3 / 22.5, 2048: 25.7 / 37.3, 4096: 55 / 38; Sigmoid 512: 4.0 / 7.8,
#: 2048: 13.7 / 10.0
SMALL = {"erf": 2048, "gelu": 2048, "sigmoid": 1024, "silu": 1024}
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)


@njit(cache=True, nogil=True)
def erf_loop(x, out):  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        out[i] = math.erf(np.float64(x[i]))


@njit(cache=True, nogil=True)
def gelu_loop(x, out):  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        v = np.float64(x[i])
        out[i] = 0.5 * v * (1.0 + math.erf(v * _INV_SQRT_2))


@njit(inline="always", cache=True, nogil=True)
def sigmoid64(v):  # pragma: no cover - compiled
    """The logistic function of a float64 without overflow: ``exp`` of ``-|v|`` only; NaN
    stays NaN (shared with ``kernels_squeeze_excite``)."""
    if v >= 0.0:
        return 1.0 / (1.0 + math.exp(-v))
    e = math.exp(v)  # NaN falls through to this branch and stays NaN
    return e / (1.0 + e)


@njit(cache=True, nogil=True)
def sigmoid_loop(x, out):  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        out[i] = sigmoid64(np.float64(x[i]))


@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy", boundscheck=False)
def sigmoid_f32_loop(x, out):  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        out[i] = 1.0 / (1.0 + fast_exp(-np.float64(x[i])))  # -inf: 1 / (1 + 2**1000) rounds to 0


@njit(cache=True, nogil=True)
def silu_loop(x, out):  # pragma: no cover - compiled
    """``x * sigmoid(x)`` (SiLU, fused after a convolution or product: ``ops/fused.py``), the
    product of the Sigmoid loop's value and ``x``: the same bits as the two ops run apart."""
    for i in range(x.shape[0]):  # -inf: -inf * 0 = NaN, as Sigmoid then Mul give
        out[i] = x[i] * x.dtype.type(sigmoid64(np.float64(x[i])))


@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy", boundscheck=False)
def silu_f32_loop(x, out):  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        s = np.float32(1.0 / (1.0 + fast_exp(-np.float64(x[i]))))  # sigmoid_f32_loop's value
        out[i] = x[i] * s


@njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def hard_sigmoid_loop(x, out, alpha, beta):  # pragma: no cover - compiled
    """``clip(x * alpha + beta, 0, 1)`` in ``x``'s dtype (``alpha``, ``beta`` of it), rounded
    as the numpy passes round it (no contraction): the same bits; NaN stays NaN."""
    for i in range(x.shape[0]):
        out[i] = unit(x[i] * alpha + beta)


@njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def hard_swish_loop(x, out, six, half):  # pragma: no cover - compiled
    """``x * clip(x / 6 + 0.5, 0, 1)`` in ``x``'s dtype, as the numpy passes compute it."""
    for i in range(x.shape[0]):
        out[i] = x[i] * unit(x[i] / six + half)


#: the most elements the hard activations' loops take (one pass against the numpy path's four:
#: 2-3 us of calls on a mobile network's small tensors)
SMALL_HARD = 1 << 16


def hard(name: str) -> Callable[[np.ndarray, float, float], np.ndarray | None]:
    """``f(x, a, b)``: HardSigmoid (``a``, ``b``: alpha, beta) or HardSwish (6, 0.5) of a small
    contiguous float32/float64 array in one pass, or None for the numpy path."""
    loop = {"hard_sigmoid": hard_sigmoid_loop, "hard_swish": hard_swish_loop}[name]

    def run(x: np.ndarray, a: float, b: float) -> np.ndarray | None:
        if type(x) is not np.ndarray or x.dtype not in _FLOATS or not x.flags.c_contiguous or x.size > SMALL_HARD:
            return None
        out = np.empty(x.shape, x.dtype)
        loop(x.reshape(-1), out.reshape(-1), x.dtype.type(a), x.dtype.type(b))
        return out

    return run


LOOPS = {"erf": erf_loop, "gelu": gelu_loop, "sigmoid": sigmoid_loop, "silu": silu_loop}
@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy", boundscheck=False)
def erf_f32_loop(x, out):  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        out[i] = fast_erf(np.float64(x[i]))


@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy", boundscheck=False)
def gelu_f32_loop(x, out):  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        out[i] = gelu_f32(x[i])  # in float32 lanes: within 5 ulp (gelu_f32's docstring)


#: float32 loops on ``fast_math`` and the most elements they take (serial; timed at 1 thread,
#: float32 us jit / numpy: Sigmoid 512: 0.9 / 3.3, 2048: 3.1 / 7.4, 8192: 8.8 / 12.1, larger
#: alike; Gelu 2048: 9 / 37 (the libm loop 31), 32768: 143 / ~600 (libm 750); since Gelu
#: runs in float32 lanes (``gelu_f32``), 393,216 elements 0.40 ms against the float64 loop's 0.80)
F32_LOOPS = {"erf": erf_f32_loop, "gelu": gelu_f32_loop, "sigmoid": sigmoid_f32_loop, "silu": silu_f32_loop}
SMALL_F32 = {"erf": 1 << 22, "gelu": 1 << 22, "sigmoid": 1 << 16, "silu": 1 << 16}
_F32 = np.dtype(np.float32)


def small(name: str) -> Callable[[np.ndarray], np.ndarray | None]:
    """``f(x)``: the function ``name`` of a small float32/float64 array, or None when the
    numpy path should run (another dtype, a strided array, more than :data:`SMALL` elements)."""
    loop, limit = LOOPS[name], SMALL[name]
    loop32, limit32 = F32_LOOPS.get(name, loop), SMALL_F32.get(name, limit)

    def run(x: np.ndarray) -> np.ndarray | None:
        if type(x) is not np.ndarray or x.dtype not in _FLOATS or not x.flags.c_contiguous:
            return None
        f32 = x.dtype == _F32
        if x.size > (limit32 if f32 else limit):
            return None
        out = np.empty(x.shape, x.dtype)
        (loop32 if f32 else loop)(x.reshape(-1), out.reshape(-1))
        return out

    return run


@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy", boundscheck=False)
def gelu_f32_in_place(x):  # pragma: no cover - compiled
    """``gelu_f32_loop`` writing over its input: one array, so LLVM vectorizes it (the
    two-array loop given the same array twice takes its scalar path, ~9x slower)."""
    for i in range(x.shape[0]):
        x[i] = gelu_f32(x[i])


@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy", boundscheck=False)
def gelu_f32_bias_in_place(x, bias):  # pragma: no cover - compiled
    """``x = gelu(x + bias)``, ``bias`` repeated along rows of its length: a dense layer's bias
    add and activation in one pass. The sum is rounded to float32 first, as the separate add
    did (no product feeds it, so nothing contracts): the same bits as the two passes."""
    cols = bias.shape[0]
    for r in range(x.shape[0] // cols):
        base = r * cols
        for j in range(cols):
            x[base + j] = gelu_f32(x[base + j] + bias[j])


#: float32 loops that overwrite their input, and those that add a bias row first
F32_IN_PLACE = {"gelu": gelu_f32_in_place}
F32_BIAS_IN_PLACE = {"gelu": gelu_f32_bias_in_place}


def in_place(name: str) -> Callable[[np.ndarray], np.ndarray | None]:
    """``f(y)``: the function ``name`` written over ``y``, a fused node's fresh float32 product
    that nothing else sees (a new output's pages cost ~1 us each to fault in on this VM: up to
    0.2 ms of a [128, 3072] GELU's 0.4), or None when the caller should run the op's kernel
    (another dtype, a strided or read-only array, more than :data:`SMALL_F32` elements)."""
    loop, limit = F32_IN_PLACE[name], SMALL_F32[name]

    def run(y: np.ndarray) -> np.ndarray | None:
        if (type(y) is not np.ndarray or y.dtype != _F32 or not y.flags.c_contiguous or not y.flags.writeable
                or y.size > limit):
            return None
        loop(y.reshape(-1))
        return y

    return run


def bias_in_place(name: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray | None]:
    """``f(y, bias)``: the function ``name`` of ``y + bias`` written over ``y`` (as
    :func:`in_place`; ``bias`` a float32 vector of ``y``'s last dimension), or None when the
    caller should add and activate in two passes. Why: a dense layer's separate bias add was
    one more pass over its output ([128, 3072]: ~60 us before a 0.4 ms GELU)."""
    loop, limit = F32_BIAS_IN_PLACE[name], SMALL_F32[name]

    def run(y: np.ndarray, bias: np.ndarray) -> np.ndarray | None:
        if (type(y) is not np.ndarray or y.dtype != _F32 or not y.flags.c_contiguous or not y.flags.writeable
                or y.size > limit or y.ndim == 0 or type(bias) is not np.ndarray or bias.dtype != _F32
                or bias.ndim != 1 or bias.shape[0] != y.shape[-1] or bias.shape[0] == 0 or not bias.flags.c_contiguous):
            return None
        loop(y.reshape(-1), bias)
        return y

    return run
