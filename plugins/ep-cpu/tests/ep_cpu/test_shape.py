"""Shape manipulation kernels on the cpu provider, checked against onnx.reference / numpy."""

from __future__ import annotations

import numpy as np
import pytest
from _shape_oracle import _as_f64, _build, _elem, check, run_both  # noqa: E402,F401

RNG = np.random.default_rng(0)
F = RNG.standard_normal((2, 3, 4)).astype(np.float32)


def i64(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


def test_identity_and_sequence_passthrough() -> None:
    check("Identity", [("x", F)])
    check("Identity", [("x", np.zeros((0, 3), np.int32))])


@pytest.mark.parametrize("start,end", [(None, None), (-1, None), (None, -1), (1, 2), (-10, 10), (2, 1)])
def test_shape_start_end(start, end) -> None:  # type: ignore[no-untyped-def]
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    check("Shape", [("x", F)], opset=15, **attrs)


def test_shape_size_scalar() -> None:
    check("Shape", [("x", np.array(1.0, np.float32))])
    check("Size", [("x", np.zeros((0, 5), np.float32))])
    check("Size", [("x", F)])


@pytest.mark.parametrize("shape,allowzero", [((4, -1), 0), ((0, -1), 0), ((-1,), 0), ((2, 0, 4), 0), ((3, 0), 1)])
def test_reshape(shape, allowzero) -> None:  # type: ignore[no-untyped-def]
    x = F if not (allowzero and 0 in shape) else np.zeros((0, 3), np.float32)
    check("Reshape", [("x", x), ("s", i64(*shape))], opset=14, allowzero=allowzero)


def test_reshape_opset1_attribute() -> None:
    got, _ = run_both("Reshape", [("x", F)], opset=1, expected=[F.reshape(6, 4)], shape=[6, -1])
    np.testing.assert_array_equal(got[0], F.reshape(6, 4))


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten(axis) -> None:  # type: ignore[no-untyped-def]
    check("Flatten", [("x", F)], axis=axis)


def test_squeeze_unsqueeze_versions() -> None:
    x = np.zeros((1, 3, 1, 2), np.float32)
    check("Squeeze", [("x", x)], opset=11, axes=[0, -2])
    check("Squeeze", [("x", x)], opset=11)
    check("Squeeze", [("x", x), ("a", i64(-2))], opset=13)
    check("Squeeze", [("x", x)], opset=13)
    check("Unsqueeze", [("x", F)], opset=11, axes=[0, -1])
    check("Unsqueeze", [("x", F), ("a", i64(4, 0, 2))], opset=13)
    check("Unsqueeze", [("x", np.array(3, np.int64)), ("a", i64(0))], opset=13)


def test_transpose() -> None:
    check("Transpose", [("x", F)])
    check("Transpose", [("x", F)], perm=[1, 2, 0])
    check("Transpose", [("x", np.array(2.0, np.float32))])


def test_concat() -> None:
    b = RNG.standard_normal((2, 5, 4)).astype(np.float32)
    check("Concat", [("a", F), ("b", b)], axis=-2)
    check("Concat", [("a", F), ("e", np.zeros((2, 0, 4), np.float32))], axis=1)
    s = np.array(["a", "b"], dtype=object)
    check("Concat", [("a", s), ("b", s)], axis=0)


def test_split_variants() -> None:
    x = np.arange(7, dtype=np.int32)
    check("Split", [("x", x)], n_out=3, opset=18, num_outputs=3)
    check("Split", [("x", x), ("s", i64(2, 5))], n_out=2, opset=13)
    check("Split", [("x", np.arange(6, dtype=np.float32))], n_out=3, opset=13)
    check("Split", [("x", F)], n_out=2, opset=11, axis=-1, split=[1, 3])
    check("Split", [("x", np.zeros((0,), np.float32)), ("s", i64(0, 0))], n_out=2, opset=13)


def test_expand_tile() -> None:
    check("Expand", [("x", np.arange(3, dtype=np.int64).reshape(3, 1)), ("s", i64(2, 1, 4))])
    check("Expand", [("x", F), ("s", i64(1))])
    got = check("Expand", [("x", np.array(1.5, np.float32)), ("s", i64(2, 2))])
    assert got[0].flags.writeable
    check("Tile", [("x", F), ("r", i64(1, 2, 3))])
    check("Tile", [("x", F), ("r", i64(0, 1, 1))])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes(mode) -> None:  # type: ignore[no-untyped-def]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    check("Pad", [("x", x), ("p", i64(1, 2, 2, 1))], opset=19, mode=mode)
    # negative pads crop first (the onnx reference cannot do these)
    np_mode = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode]
    expected = np.pad(x[:, 1:], ((0, 1), (0, 2)), mode=np_mode)
    check("Pad", [("x", x), ("p", i64(0, -1, 1, 2))], opset=19, expected=[expected], mode=mode)


def test_pad_constant_value_axes_and_opset2() -> None:
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    check("Pad", [("x", x), ("p", i64(1, 2, 0, 3)), ("v", np.array(7, np.int32)), ("a", i64(-1, 0))], opset=18)
    xf = np.ones((2, 2), np.float32)
    expected = np.pad(xf, ((0, 1), (2, 0)), constant_values=1.5)
    check("Pad", [("x", xf)], opset=2, expected=[expected], pads=[0, 2, 1, 0], value=1.5)


def test_depth_space_roundtrip() -> None:
    x = np.arange(2 * 8 * 2 * 3, dtype=np.float32).reshape(2, 8, 2, 3)
    for mode in ("DCR", "CRD"):
        d2s = check("DepthToSpace", [("x", x)], opset=13, blocksize=2, mode=mode)[0]
    check("SpaceToDepth", [("x", d2s)], blocksize=2)


def test_center_crop_pad() -> None:
    x = np.arange(30, dtype=np.float32).reshape(5, 6)
    check("CenterCropPad", [("x", x), ("s", i64(3, 9))], opset=18)
    check("CenterCropPad", [("x", x), ("s", i64(8))], opset=18, axes=[-2])


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumsum_cumprod(exclusive, reverse) -> None:  # type: ignore[no-untyped-def]
    x = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32)
    check("CumSum", [("x", x), ("a", np.array(-1, np.int32))], exclusive=exclusive, reverse=reverse)
    check("CumSum", [("x", F), ("a", np.array(1, np.int64))], exclusive=exclusive, reverse=reverse)
    sums = np.cumsum(np.flip(x, 0) if reverse else x, axis=0)
    prods = np.cumprod(np.flip(x, 0) if reverse else x, axis=0)
    if exclusive:
        prods = np.concatenate([np.ones((1, 3), np.int32), prods[:-1]])
    prods = np.flip(prods, 0) if reverse else prods
    got, _ = run_both("CumProd", [("x", x), ("a", np.array(0, np.int64))], opset=26, expected=[prods.astype(np.int32)],
                      exclusive=exclusive, reverse=reverse)
    np.testing.assert_array_equal(got[0], prods)
    assert got[0].dtype == np.int32
    assert sums.shape == x.shape


def test_dropout_inference_and_training() -> None:
    got, _ = run_both("Dropout", [("x", F)], n_out=2, opset=13, expected=[F, np.ones(F.shape, bool)])
    np.testing.assert_array_equal(got[0], F)
    assert got[1].dtype == np.bool_ and got[1].all()
    ratio = np.array(0.25, np.float32)
    train = np.array(True)
    got, _ = run_both("Dropout", [("x", F), ("r", ratio), ("t", train)], n_out=2, opset=13,
                      expected=[F, np.ones(F.shape, bool)], seed=3)
    y, mask = got
    np.testing.assert_allclose(y, np.where(mask, F / 0.75, 0), rtol=1e-6)
    got2, _ = run_both("Dropout", [("x", F), ("r", ratio), ("t", train)], n_out=2, opset=13,
                       expected=[F, np.ones(F.shape, bool)], seed=3)
    np.testing.assert_array_equal(got2[1], mask)
    got, _ = run_both("Dropout", [("x", F)], n_out=2, opset=7, expected=[F, np.ones(F.shape, np.float32)])
    assert got[1].dtype == np.float32


def test_pad_constant_crop_beyond_input() -> None:
    # output dim = dim + begin + end even when a negative pad eats into the padded region
    x = np.array([5.0], np.float32)
    got, _ = run_both("Pad", [("x", x), ("p", i64(1, -2))], opset=19, expected=[np.zeros((0,), np.float32)])
    assert got[0].shape == (0,)
    got, _ = run_both("Pad", [("x", x), ("p", i64(2, -2))], opset=19, expected=[np.zeros((1,), np.float32)])
    np.testing.assert_array_equal(got[0], [0.0])
    x2 = np.arange(4, dtype=np.float32).reshape(4, 1)
    expected = np.zeros((5, 1), np.float32)
    expected[2:, 0] = [0.0, 1.0, 2.0]
    got, _ = run_both("Pad", [("x", x2), ("p", i64(2, 0, -1, 0))], opset=19, expected=[expected])
    np.testing.assert_array_equal(got[0], expected)
