"""``epoxy.kit.aligned``: buffers on cache lines for kernels that load whole vector registers,
and the planned arena's views on them."""

from __future__ import annotations

import numpy as np
import pytest

from epoxy.kit import CACHE_LINE, aligned_empty, aligned_zeros, is_aligned
from epoxy.kit.aligned import ALIGNED_OUTPUT_BYTES, output_empty
from epoxy.plan.arena import ArenaLayout, ArenaPool


@pytest.mark.parametrize("shape", [0, 1, 7, (3, 5), (2, 3, 17), 1 << 20])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int64])
def test_arrays_start_on_a_cache_line_with_the_asked_shape(shape, dtype):
    for _ in range(4):  # malloc hands out several offsets: each is shifted to a line
        a = aligned_empty(shape, dtype)
        assert is_aligned(a) and a.dtype == np.dtype(dtype) and a.flags.c_contiguous and a.flags.writeable
        assert a.shape == ((shape,) if isinstance(shape, int) else shape)
        a[...] = 3
        assert np.all(a == 3)


def test_zeros_are_zero_and_other_alignments_are_honoured():
    z = aligned_zeros((33, 3), np.float32)
    assert is_aligned(z) and not z.any()
    assert all(aligned_empty(100, np.uint8, 4096).ctypes.data % 4096 == 0 for _ in range(3))
    assert CACHE_LINE == 64


def test_outputs_are_aligned_from_the_threshold_only():
    small = output_empty((4,), np.float32)
    assert small.base is None  # a small fresh output owns its memory (no ~2 us of alignment)
    big = output_empty((ALIGNED_OUTPUT_BYTES // 4,), np.float32)
    assert is_aligned(big) and big.shape == (ALIGNED_OUTPUT_BYTES // 4,)


def test_arena_views_start_on_cache_lines():
    views_wanted = ((0, 0, np.dtype(np.float32), (250,)), (1, 1, np.dtype(np.float64), (50, 100)))
    layout = ArenaLayout((1000, 40_000), views_wanted)
    views = ArenaPool(layout, 2).acquire()
    assert all(v is not None and is_aligned(v) for v in views)
