"""Channels-last 8-bit codes: the int8 convolutions (``jit/kernels_int8_conv.py``) write their
codes channels last and hand them on as NCHW views, so that the next convolution reads them
without a transpose. The ops between two such convolutions (MaxPool, Concat, lookups) keep
that layout where they can: one C-ordered NCHW copy in the middle of the chain costs a
transpose there and another one at the next convolution."""

from __future__ import annotations

import numpy as np

#: the dtypes of codes (other tensors are never handed on channels last)
CODES = (np.dtype(np.uint8), np.dtype(np.int8))


def channels_last(x: np.ndarray) -> np.ndarray | None:
    """``x``'s channels-last ``(N, H, W, C)`` array when ``x`` is a 4-D NCHW view of codes laid
    out channels last (and not C-ordered itself), else None."""
    if x.ndim != 4 or x.dtype not in CODES or x.flags.c_contiguous:
        return None
    nhwc = x.transpose(0, 2, 3, 1)
    return nhwc if nhwc.flags.c_contiguous else None


def as_nchw(nhwc: np.ndarray) -> np.ndarray:
    """The NCHW view of channels-last ``(N, H, W, C)`` codes, as the convolutions hand them on."""
    return nhwc.transpose(0, 3, 1, 2)
