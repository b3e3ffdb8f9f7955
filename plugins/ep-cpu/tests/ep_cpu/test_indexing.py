"""Indexing kernels (Slice, Gather*, Scatter*, Unique, TopK...) on the cpu provider vs onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest
from _shape_oracle import _as_f64, _build, _elem, check, run_both  # noqa: E402,F401

RNG = np.random.default_rng(1)
X = RNG.standard_normal((3, 4, 5)).astype(np.float32)


def i64(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


@pytest.mark.parametrize(
    "starts,ends,axes,steps",
    [
        ((0, 1), (2, 3), (0, 1), (1, 1)),
        ((-1,), (-1000,), (2,), (-1,)),
        ((10,), (-10,), (1,), (-2,)),
        ((-100, 2), (100, 1000), (-3, -1), (1, 2)),
        ((3,), (1,), (0,), (1,)),
        ((1,), (0,), (1,), (-1,)),
    ],
)
def test_slice(starts, ends, axes, steps) -> None:  # type: ignore[no-untyped-def]
    check("Slice", [("x", X), ("s", i64(*starts)), ("e", i64(*ends)), ("a", i64(*axes)), ("t", i64(*steps))])


def test_slice_optional_inputs_and_opset1() -> None:
    check("Slice", [("x", X), ("s", i64(1)), ("e", i64(3))], opset=13)
    check("Slice", [("x", X), ("s", np.array([0, -2], np.int32)), ("e", np.array([2, 100], np.int32))])
    check("Slice", [("x", np.zeros((0, 3), np.float32)), ("s", i64(0)), ("e", i64(2)), ("a", i64(1))])
    got, _ = run_both("Slice", [("x", X)], opset=1, expected=[X[:, 1:-1]], starts=[1], ends=[-1], axes=[1])
    np.testing.assert_array_equal(got[0], X[:, 1:-1])


def test_gather() -> None:
    check("Gather", [("x", X), ("i", i64(0, -1, 2))], axis=1)
    check("Gather", [("x", X), ("i", np.array([[0, 2], [-3, 1]], np.int32))], axis=-1)
    check("Gather", [("x", X), ("i", np.array(1, np.int64))], axis=0)
    check("Gather", [("x", X), ("i", np.zeros((0,), np.int64))])


def test_gather_elements() -> None:
    idx = RNG.integers(-4, 4, size=(3, 2, 5))
    check("GatherElements", [("x", X), ("i", idx)], axis=1)
    small = np.array([[[2], [0]], [[1], [1]]], np.int64)  # smaller than data on the other axes
    expected = np.take_along_axis(X[:, :2, :1], small, axis=0)
    check("GatherElements", [("x", X), ("i", small)], expected=[expected], axis=0)


def test_gather_nd() -> None:
    check("GatherND", [("x", X), ("i", np.array([[0, 1], [2, -1]], np.int64))])
    check("GatherND", [("x", X), ("i", np.array([[[1], [0]], [[2], [1]], [[0], [0]]], np.int64))], batch_dims=1)
    check("GatherND", [("x", X), ("i", np.array([[[1, 2]], [[0, 4]], [[3, 3]]], np.int64))], batch_dims=1)
    check("GatherND", [("x", X), ("i", np.array([[0, 1, 2]], np.int64))])


def test_gather_nd_flat_rows() -> None:
    """The flat-row gather against the reference: several batch dims, whole slices (a last
    index dim of 0), no index at all, and a bool mask as Llama's exports gather it."""
    x4 = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    idx = np.stack([RNG.integers(-4, 4, (2, 3, 6)), RNG.integers(-5, 5, (2, 3, 6))], axis=-1)
    check("GatherND", [("x", x4), ("i", idx)], batch_dims=2)
    # onnx.reference cannot reshape these (onnxruntime agrees with both)
    check("GatherND", [("x", X), ("i", np.zeros((2, 0), np.int64))], expected=[np.stack([X, X])])
    check("GatherND", [("x", X), ("i", np.zeros((3, 0, 2), np.int64))], batch_dims=1,
          expected=[np.zeros((3, 0), np.float32)])
    mask = RNG.random((1, 16)) > 0.5
    pairs = np.stack([np.zeros(16, np.int64), np.arange(16)], axis=-1).reshape(1, 1, 1, 16, 2)
    check("GatherND", [("x", mask), ("i", pairs)])


@pytest.mark.parametrize("bad,size", [([[0, 4]], 4), ([[3, 0]], 3), ([[-4, 0]], 3), ([[0, -5]], 4)])
def test_gather_nd_out_of_range_names_the_dimension(bad, size) -> None:  # type: ignore[no-untyped-def]
    from epoxy.errors import KernelError

    with pytest.raises(KernelError, match=f"GatherND: index out of range for dimension of size {size}"):
        run_both("GatherND", [("x", X), ("i", np.array(bad, np.int64))], expected=[X[0, 0]])


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(reduction) -> None:  # type: ignore[no-untyped-def]
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[1, -1], [0, 2]], np.int64) if reduction == "none" else np.array([[1, 1], [0, 0]], np.int64)
    upd = np.array([[10, 20], [30, 40]], np.float32)
    check("ScatterElements", [("x", data), ("i", idx), ("u", upd)], opset=18, axis=1, reduction=reduction)


def test_scatter_deprecated() -> None:
    data = np.zeros((3, 3), np.float32)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int64)
    upd = np.array([[1.0, 1.1, 1.2], [2.0, 2.1, 2.2]], np.float32)
    expected = np.array([[2.0, 1.1, 0.0], [1.0, 0.0, 2.2], [0.0, 2.1, 1.2]], np.float32)
    check("Scatter", [("x", data), ("i", idx), ("u", upd)], opset=9, expected=[expected])
    check("Scatter", [("x", data), ("i", idx[:, :2]), ("u", upd[:, :2])], opset=10, axis=-1,
          expected=[np.array([[1.1, 1.0, 0.0], [2.0, 0.0, 2.1], [0.0, 0.0, 0.0]], np.float32)])


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction) -> None:  # type: ignore[no-untyped-def]
    data = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    if reduction == "none":
        idx = np.array([[0, 1], [1, -1]], np.int64)
    else:
        idx = np.array([[0, 1], [0, 1], [1, 2]], np.int64)
    upd = RNG.integers(-5, 5, size=idx.shape[:1] + (4,)).astype(np.int32)
    check("ScatterND", [("x", data), ("i", idx), ("u", upd)], opset=18, reduction=reduction)


def test_compress_nonzero() -> None:
    check("Compress", [("x", X), ("c", np.array([True, False, True]))], axis=0)
    check("Compress", [("x", X), ("c", np.array([False, True]))], axis=-1)
    check("Compress", [("x", X), ("c", np.array([True, False, True, True]))])
    check("NonZero", [("x", np.array([[1, 0], [0, 3]], np.int32))])
    check("NonZero", [("x", np.zeros((2, 0), np.float32))])
    check("NonZero", [("x", np.array([[True, False, True]]))])


@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique(sorted_) -> None:  # type: ignore[no-untyped-def]
    x = np.array([2.0, 1.0, 1.0, 3.0, 4.0, 3.0], np.float32)
    check("Unique", [("x", x)], n_out=4, sorted=sorted_)
    x2 = np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4], [0, 1, 1]], np.int64)
    check("Unique", [("x", x2)], n_out=4, sorted=sorted_, axis=0)
    # unique columns (the onnx reference mishandles axis != 0 when unsorted: expected by hand)
    x3 = np.array([[1, 0, 1, 2], [3, 4, 3, 5]], np.int64)
    if sorted_:
        exp = [np.array([[0, 1, 2], [4, 3, 5]]), i64(1, 0, 3), i64(1, 0, 1, 2), i64(1, 2, 1)]
    else:
        exp = [np.array([[1, 0, 2], [3, 4, 5]]), i64(0, 1, 3), i64(0, 1, 0, 2), i64(2, 1, 1)]
    check("Unique", [("x", x3)], n_out=4, expected=exp, sorted=sorted_, axis=-1)
    # a lone Y output: values in first-occurrence order when unsorted
    exp_y = i64(0, 1, 2, 3, 4) if sorted_ else i64(1, 0, 2, 3, 4)
    check("Unique", [("x", x2)], n_out=1, expected=[exp_y], sorted=sorted_)


def test_topk_ties_and_modes() -> None:
    x = np.array([[3, 1, 3, 2, 1, 3], [0, 0, 0, 0, 0, 0]], np.int32)
    got = check("TopK", [("x", x), ("k", i64(4))], n_out=2)
    np.testing.assert_array_equal(got[1], [[0, 2, 5, 3], [0, 1, 2, 3]])
    got = check("TopK", [("x", x), ("k", i64(3))], n_out=2, largest=0)
    np.testing.assert_array_equal(got[1], [[1, 4, 3], [0, 1, 2]])
    u = np.array([5, 250, 7, 250], np.uint8)
    check("TopK", [("x", u), ("k", i64(2))], n_out=2)
    check("TopK", [("x", X), ("k", i64(2))], n_out=2, axis=1)
    check("TopK", [("x", X), ("k", i64(0))], n_out=2, axis=0)
    got, _ = run_both("TopK", [("x", np.array([1.0, 3.0, 2.0], np.float32))], n_out=2, opset=1,
                      expected=[np.array([3.0, 2.0], np.float32), i64(1, 2)], k=2)
    np.testing.assert_array_equal(got[1], [1, 2])


def test_reverse_sequence() -> None:
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    check("ReverseSequence", [("x", x), ("l", i64(4, 3, 2, 1))], opset=10, batch_axis=1, time_axis=0)
    check("ReverseSequence", [("x", x), ("l", i64(1, 2, 3, 4))], opset=10, batch_axis=0, time_axis=1)
    x3 = np.arange(24, dtype=np.int32).reshape(3, 2, 4)
    check("ReverseSequence", [("x", x3), ("l", i64(2, 3))], opset=10, batch_axis=1, time_axis=0)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 0, 2, 10, -10])
def test_trilu(upper, k) -> None:  # type: ignore[no-untyped-def]
    inputs = [("x", X)] + ([] if k is None else [("k", np.array(k, np.int64))])
    check("Trilu", inputs, opset=14, upper=upper)
    check("Trilu", [("x", np.zeros((0, 3), np.int32))], opset=14, upper=upper)


def test_slice_negative_step_clamps_per_spec() -> None:
    # starts clamp to [0, dim-1] and ends to [-1, dim-1] for negative steps (as onnxruntime);
    # numpy-style slicing (the onnx reference) would give an empty result here
    x = np.array([1.5], np.float32)
    got, _ = run_both("Slice", [("x", x), ("s", i64(-3)), ("e", i64(-2)), ("a", i64(0)), ("t", i64(-2))],
                      expected=[x])
    np.testing.assert_array_equal(got[0], x)
    m = np.arange(9, dtype=np.float32).reshape(3, 3)
    got, _ = run_both("Slice", [("x", m), ("s", i64(-4)), ("e", i64(-5)), ("a", i64(0)), ("t", i64(-1))],
                      expected=[m[:1]])
    np.testing.assert_array_equal(got[0], m[:1])
