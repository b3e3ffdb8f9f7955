"""The element folds the compiled pools share: fmax (NaN-aware, the numpy path's
``np.fmax``), the plain max a plane without NaN may take, and the NaN scan that decides."""

from __future__ import annotations

from numba import njit, uint64

from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def max2(v, a):  # pragma: no cover - compiled
    return v if (v > a) | (a != a) else a


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def max2_finite(v, a):  # pragma: no cover - compiled
    """:func:`max2` for planes without NaN (``MAX_NO_NAN``): one compare-and-select, which
    LLVM turns into a vector max (the NaN test made the stride-2 column loop 2x slower)."""
    return v if v > a else a


#: how a plane folds its windows: sums, fmax (NaN-aware), or max over a plane with no NaN
SUM, MAX, MAX_NO_NAN = 0, 1, 2


@njit(cache=True, nogil=True, boundscheck=False, fastmath={"reassoc"})
def has_nan(x, base, n):  # pragma: no cover - compiled
    """Whether ``x[base:base + n]`` may hold a NaN: a plane without one takes the cheaper
    max (the same bits, since both keep the earlier of equal values). ``v - v`` is 0 for
    every finite ``v`` and NaN for NaN and infinities, so their sum is a vectorized test
    (reassociated: the order of zeros does not matter); an infinity only sends its plane to
    the NaN-aware loops. (An OR of comparisons cost twice as much.)"""
    acc = x[0] - x[0]
    b = uint64(base)
    for i in range(uint64(n)):
        acc += x[b + i] - x[b + i]
    return acc != 0
