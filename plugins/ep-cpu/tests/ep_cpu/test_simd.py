"""The vector intrinsics of the jit tier (jit/simd.py) against numpy slicing, per dtype."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from numba import njit  # noqa: E402

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
