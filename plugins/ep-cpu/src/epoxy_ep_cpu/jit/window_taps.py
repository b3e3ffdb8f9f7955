"""Which taps of a sliding window land inside the input, for the compiled channels-last
window kernels (code pools, depthwise convolution): one place for the bounds arithmetic, so
that their loops walk only the taps inside and never test a position."""

from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True, inline="always")
def taps(position, stride, pad, dilation, kernel, size):  # pragma: no cover - compiled
    """``(first, last)``: the taps ``k`` in ``[first, last)`` of output ``position``'s window
    whose input index ``position * stride - pad + k * dilation`` lies in ``[0, size)`` (an
    empty range when none does: a window wholly in the padding)."""
    start = position * stride - pad
    first = 0 if start >= 0 else (dilation - 1 - start) // dilation
    last = 0 if start >= size else min(kernel, (size - start + dilation - 1) // dilation)
    return first, max(first, last)
