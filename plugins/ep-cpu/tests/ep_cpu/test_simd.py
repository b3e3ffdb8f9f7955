"""The vector intrinsics of the jit tier (jit/simd.py) against numpy slicing, per dtype."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from numba import njit  # noqa: E402

from epoxy_ep_cpu.jit.depthwise_taps import lanes_of  # noqa: E402
from epoxy_ep_cpu.jit.lane_transpose import transpose_block  # noqa: E402
from epoxy_ep_cpu.jit.simd import SPAN, deinterleave32  # noqa: E402


@njit(cache=False)
def _split(src, at, dst, even_at, odd_at):  # pragma: no cover - compiled
    deinterleave32(src, at, dst, even_at, odd_at)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint8, np.int64])
@pytest.mark.parametrize(("at", "even_at", "odd_at"), [(0, 0, 16), (5, 3, 40), (37, 60, 1)])
def test_deinterleave_matches_strided_slices(dtype, at, even_at, odd_at):
    """Even and odd elements of ``src[at:at + 32]`` land at the two offsets; nothing else in
    ``dst`` is written (unaligned offsets included)."""
    rng = np.random.default_rng(at)
    src = (rng.standard_normal(80) * 50).astype(dtype)
    dst = np.full(80, 7, dtype=dtype)
    _split(src, at, dst, even_at, odd_at)
    want = np.full(80, 7, dtype=dtype)
    want[even_at:even_at + SPAN // 2] = src[at:at + SPAN:2]
    want[odd_at:odd_at + SPAN // 2] = src[at + 1:at + SPAN:2]
    np.testing.assert_array_equal(dst, want)


@njit(cache=False)
def _transpose(src, src_at, src_step, rows, dst, dst_at, dst_step, cols):  # pragma: no cover - compiled
    transpose_block(src, src_at, src_step, rows, dst, dst_at, dst_step, cols)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("rows", "cols"), [(16, 16), (8, 8), (3, 16), (16, 5), (1, 1), (7, 11)])
def test_transpose_block_moves_exactly_its_block(dtype, rows, cols):
    """``dst[dst_at + j * dst_step + r] = src[src_at + r * src_step + j]`` for the block's rows
    and columns (clipped to the dtype's lanes), strided on both sides; every other element of
    ``dst`` keeps its value and nothing past the block is read (NaN there would show)."""
    lanes = lanes_of(np.dtype(dtype).itemsize)
    rows, cols = min(rows, lanes), min(cols, lanes)
    rng = np.random.default_rng(rows * 31 + cols)
    src_step, dst_step, src_at, dst_at = 23, 19, 5, 3
    src = np.full(src_at + lanes * src_step + lanes, np.nan, dtype=dtype)
    block = rng.standard_normal((rows, cols)).astype(dtype)
    for r in range(rows):
        src[src_at + r * src_step:src_at + r * src_step + cols] = block[r]
    dst = np.full(dst_at + lanes * dst_step + lanes, 7, dtype=dtype)
    _transpose(src, src_at, src_step, rows, dst, dst_at, dst_step, cols)
    want = np.full_like(dst, 7)
    for j in range(cols):
        want[dst_at + j * dst_step:dst_at + j * dst_step + rows] = block[:, j]
    np.testing.assert_array_equal(dst, want)
