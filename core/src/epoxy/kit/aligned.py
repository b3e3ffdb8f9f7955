"""Arrays whose data starts on a cache line, for buffers that vector kernels read or write
in whole registers.

Why: numpy's allocator returns what ``malloc`` does, 16 bytes past a 64-byte boundary for
most sizes on glibc, so every 64-byte AVX-512 load or store of such a buffer spans two cache
lines. ep-cpu's packed float32 GEMM ran 8-10 % faster on the same products with its packed
weights and output on cache lines (bench/README.md, session 36). Used where a buffer is made
once and reused (packed weights, scratch, the planned arena): the alignment costs ~2 us an
allocation, more than a small layer's fresh output is worth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: bytes of a cache line, and of one AVX-512 register
CACHE_LINE = 64


def aligned_empty(shape: int | Sequence[int], dtype: np.dtype | type = np.float32,
                  alignment: int = CACHE_LINE) -> np.ndarray:
    """An uninitialized C-contiguous array of ``shape`` and ``dtype`` whose first element lies
    on an ``alignment``-byte boundary (the array is a view of a slightly larger byte buffer)."""
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    kind = np.dtype(dtype)
    nbytes = math.prod(dims) * kind.itemsize
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    skip = -raw.ctypes.data % alignment
    return raw[skip:skip + nbytes].view(kind).reshape(dims)


def aligned_zeros(shape: int | Sequence[int], dtype: np.dtype | type = np.float32,
                  alignment: int = CACHE_LINE) -> np.ndarray:
    """:func:`aligned_empty`, zero-filled."""
    out = aligned_empty(shape, dtype, alignment)
    out.fill(0)
    return out


def is_aligned(array: np.ndarray, alignment: int = CACHE_LINE) -> bool:
    """Whether ``array``'s first element lies on an ``alignment``-byte boundary (an empty array
    has none: True)."""
    return array.size == 0 or array.ctypes.data % alignment == 0


#: outputs from this many bytes are aligned (below it, a fresh small array's ~2 us of alignment
#: would be a measurable part of the layer that fills it)
ALIGNED_OUTPUT_BYTES = 1 << 15


def output_empty(shape: Sequence[int], dtype: np.dtype | type) -> np.ndarray:
    """A kernel's fresh output: :func:`aligned_empty` from ALIGNED_OUTPUT_BYTES up, else
    ``np.empty``."""
    kind = np.dtype(dtype)
    if math.prod(shape) * kind.itemsize < ALIGNED_OUTPUT_BYTES:
        return np.empty(shape, dtype=kind)
    return aligned_empty(shape, kind)
