"""The compiled LRN (jit/kernels_lrn.py): the numpy path's window sums, split over threads in
blocks of positions, against the numpy path, the spec's formula in float64 and onnxruntime
(not the ONNX reference evaluator: its LRN windows over the batch axis, see
test_hostile_kernels.py)."""

from __future__ import annotations

import numpy as np
import pytest
from _hostile import one_node, run_onnxruntime
from _jit_cases import close, run_cpu

pytest.importorskip("numba")

#: (x shape, attributes): inception_v1's and alexnet's LRNs, windows cut by the channel edges,
#: an even size, a size past the channel count, a plane not a multiple of the block, 3-D and 5-D
CASES = [
    ((1, 64, 28, 28), {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}),
    ((2, 16, 9, 11), {"size": 3, "alpha": 0.5, "beta": 0.6, "bias": 2.0}),
    ((1, 7, 5, 5), {"size": 4}),
    ((1, 5, 17, 3), {"size": 13, "alpha": 0.1}),
    ((3, 6, 300), {"size": 5}),
    ((1, 4, 3, 5, 6), {"size": 3, "beta": 1.5}),
]


def _x(seed: int, shape: tuple[int, ...], dtype) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 3).astype(dtype)


def _spec(x: np.ndarray, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> np.ndarray:
    """The ONNX spec's LRN in float64: channels c - floor((size-1)/2) .. c + ceil((size-1)/2);
    the attributes as the model holds them (float32)."""
    alpha, beta, bias = (float(np.float32(v)) for v in (alpha, beta, bias))
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    c = x.shape[1]
    x64 = x.astype(np.float64)
    sq = np.stack([np.sum(x64[:, max(0, ch - lo): min(c, ch + hi + 1)] ** 2, axis=1) for ch in range(c)], axis=1)
    return (x64 / (bias + alpha / size * sq) ** beta).astype(x.dtype)


def _spy(monkeypatch) -> list[tuple[int, ...]]:
    from epoxy_ep_cpu.jit import kernels_lrn

    calls: list[tuple[int, ...]] = []
    real = kernels_lrn.LRNCall.__call__
    monkeypatch.setattr(kernels_lrn.LRNCall, "__call__", lambda self, x: calls.append(x.shape) or real(self, x))
    return calls


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "attrs"), CASES, ids=[f"{s}-{a['size']}" for s, a in CASES])
def test_compiled_lrn_matches_the_numpy_path_reference_and_onnxruntime(monkeypatch, shape, attrs, dtype):
    calls = _spy(monkeypatch)
    x = _x(sum(shape), shape, dtype)
    case = one_node("LRN", [x], attrs, 13)
    on, off = run_cpu(case, True, runs=2), run_cpu(case, False)
    assert calls == [shape] * 2
    close(on, off, 0, 0)  # the same sums in the same order, numpy's log and exp: the same bits
    close(on, [_spec(x, **attrs)], 1e-5 if dtype == np.float32 else 1e-12, 1e-7)
    if dtype == np.float32 and attrs["size"] % 2 and len(shape) == 4:  # onnxruntime's LRN: odd sizes, 4-D
        close(on, run_onnxruntime(case), 1e-5, 1e-6)


def test_blocks_split_over_threads_give_one_threads_bits(monkeypatch):
    from epoxy_ep_cpu.jit import threads

    counts: list[int] = []
    real = threads.Split
    monkeypatch.setattr(threads, "Split", lambda k, fn, args, total, count: counts.append(count) or real(
        k, fn, args, total, count))
    case = one_node("LRN", [_x(3, (2, 32, 40, 40), np.float32)], {"size": 5}, 13)
    one = run_cpu(case, True, jit_threads=1)
    two = run_cpu(case, True, jit_threads=2)
    np.testing.assert_array_equal(two[0], one[0])
    assert counts == [2]


def test_nan_infinity_and_a_huge_size():
    """NaN and infinities flow as in the numpy path (an infinite square makes its windows'
    outputs 0 or NaN); a size of 2**40 sums the whole channel axis without looping over it."""
    x = _x(5, (1, 6, 4, 4), np.float32)
    x[0, 2, 1, 1] = np.nan
    x[0, 4, 3, 0] = np.inf
    for size in (3, 1 << 40):
        case = one_node("LRN", [x], {"size": size}, 13)
        on, off = run_cpu(case, True), run_cpu(case, False)
        close(on, off, 0, 0)
        assert np.isnan(on[0]).any()
