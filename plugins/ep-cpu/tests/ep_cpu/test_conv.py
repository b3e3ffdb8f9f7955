"""Convolution kernels of the cpu provider: Conv, ConvTranspose, ConvInteger, QLinearConv,
DeformConv, Col2Im (onnx.reference is the oracle)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _nn_oracle import RNG, _model, check, f32, run_epoxy  # noqa: E402,F401
from onnx.reference import ReferenceEvaluator


@pytest.mark.parametrize(
    "xs,ws,attrs",
    [
        ((2, 3, 9), (4, 3, 3), {}),
        ((1, 3, 7, 8), (5, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
        ((1, 3, 7, 8), (5, 3, 3, 2), {"pads": [1, 0, 2, 1], "strides": [2, 1]}),
        ((1, 3, 9, 9), (4, 3, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
        ((1, 4, 8, 8), (6, 2, 3, 3), {"group": 2, "auto_pad": "SAME_UPPER"}),
        ((1, 4, 8, 8), (4, 1, 3, 3), {"group": 4, "auto_pad": "SAME_LOWER", "strides": [2, 2]}),
        ((1, 4, 8, 8), (8, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),  # depthwise x2
        ((1, 3, 7, 7), (2, 3, 2, 2), {"auto_pad": "VALID", "strides": [2, 2]}),
        ((2, 8, 5, 5), (6, 8, 1, 1), {}),  # 1x1 GEMM
        ((1, 8, 5, 5), (6, 8, 1, 1), {"strides": [2, 2]}),
        ((1, 2, 4, 5, 6), (3, 2, 2, 3, 3), {"pads": [0, 1, 1, 0, 1, 1], "strides": [1, 2, 1]}),
        ((1, 32, 130, 130), (4, 32, 3, 3), {}),  # large enough for the tiled im2col
    ],
)
def test_conv(xs, ws, attrs):
    x, w, b = f32(*xs), f32(*ws), f32(ws[0])
    # an absolute error bound that grows with the sums: F(4x4, 3x3) Winograd (the large case's
    # path) is off by ~3e-6 of the largest output everywhere, near-zero outputs included
    # (32 -> 4 channels: outputs up to ~55, errors up to 1.6e-4 on random draws)
    atol = 1e-4 * max(1.0, math.prod(ws[1:]) / 32)
    check("Conv", [x, w, b], attrs, rtol=1e-4, atol=atol)
    check("Conv", [x, w], attrs, rtol=1e-4, atol=atol, opset=1)


def test_conv_dtypes_and_empty():
    x, w = f32(1, 2, 5, 5), f32(3, 2, 3, 3)
    check("Conv", [x.astype(np.float64), w.astype(np.float64)], {"pads": [1, 1, 1, 1]})
    got = check("Conv", [x.astype(np.float16), w.astype(np.float16)], {"pads": [1, 1, 1, 1]}, rtol=1e-2, atol=1e-2)
    assert got[0].dtype == np.float16
    got = run_epoxy(_model("Conv", [f32(0, 2, 5, 5), w]), [f32(0, 2, 5, 5), w])
    assert got[0].shape == (0, 3, 3, 3)


def test_conv_does_not_modify_inputs():
    x, w, b = f32(1, 2, 5, 5), f32(3, 2, 3, 3), f32(3)
    copies = [x.copy(), w.copy(), b.copy()]
    run_epoxy(_model("Conv", [x, w, b]), [x, w, b])
    for a, c in zip([x, w, b], copies):
        np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize(
    "xs,ws,attrs",
    [
        ((1, 2, 3, 3), (2, 3, 3, 3), {}),
        ((1, 1, 5), (1, 2, 3), {"strides": [2]}),
        ((1, 2, 3, 3), (2, 3, 3, 3), {"strides": [3, 2], "output_padding": [1, 1]}),
        ((1, 2, 3, 3), (2, 3, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
        ((1, 2, 3, 3), (2, 3, 3, 3), {"pads": [1, 2, 1, 0], "strides": [2, 2]}),
        ((1, 2, 3, 3), (2, 3, 2, 2), {"dilations": [2, 2]}),
        ((1, 2, 3, 3), (2, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
        ((1, 1, 3, 4, 5), (1, 2, 3, 3, 3), {"strides": [1, 2, 2]}),
    ],
)
def test_conv_transpose(xs, ws, attrs):
    x, w, b = f32(*xs), f32(*ws), f32(ws[1] * attrs.get("group", 1))
    check("ConvTranspose", [x, w, b], attrs, rtol=1e-4, atol=1e-4)


def test_conv_transpose_groups():
    # onnx.reference mishandles groups: compare with per-group ungrouped results
    x, w, b = f32(1, 4, 3, 3), f32(4, 2, 3, 3), f32(4)
    attrs = {"strides": [2, 2], "pads": [1, 0, 0, 1]}
    parts = []
    for g in range(2):
        m = _model("ConvTranspose", [x[:, 2 * g : 2 * g + 2], w[2 * g : 2 * g + 2], b[2 * g : 2 * g + 2]], attrs)
        feeds = {"x0": x[:, 2 * g : 2 * g + 2], "x1": w[2 * g : 2 * g + 2], "x2": b[2 * g : 2 * g + 2]}
        parts.append(ReferenceEvaluator(m).run(None, feeds)[0])
    expected = [np.concatenate(parts, axis=1)]
    check("ConvTranspose", [x, w, b], dict(attrs, group=2), expected=expected, rtol=1e-4, atol=1e-4)


def test_conv_integer_and_qlinear():
    x = RNG.integers(0, 255, (1, 3, 6, 6)).astype(np.uint8)
    w = RNG.integers(-100, 100, (4, 3, 3, 3)).astype(np.int8)
    xzp, wzp = np.array(7, np.uint8), np.array(3, np.int8)
    check("ConvInteger", [x, w, xzp, wzp], {"pads": [1, 1, 1, 1]}, out_dtypes=[np.int32], atol=0)
    check("ConvInteger", [x, w], {}, out_dtypes=[np.int32], atol=0)
    wu = RNG.integers(0, 255, (4, 3, 3, 3)).astype(np.uint8)
    args = [x, np.array(0.02, np.float32), np.array(5, np.uint8), wu, np.array([0.01, 0.02, 0.005, 0.01], np.float32),
            np.array([128, 120, 130, 125], np.uint8), np.array(0.9, np.float32), np.array(10, np.uint8),
            RNG.integers(-500, 500, 4).astype(np.int32)]
    got = check("QLinearConv", args, {"pads": [1, 1, 1, 1]}, out_dtypes=[np.uint8], atol=1)
    assert got[0].dtype == np.uint8


def test_deform_conv_zero_offset_is_conv():
    x, w = f32(1, 4, 6, 6), f32(2, 2, 3, 3)
    off = np.zeros((1, 2 * 9, 4, 4), np.float32)
    got = run_epoxy(_model("DeformConv", [x, w, off], {"group": 2}, opset=19), [x, w, off])[0]
    ref = run_epoxy(_model("Conv", [x, w], {"group": 2}), [x, w])[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_deform_conv_offsets_mask_groups():
    x, w, b = f32(2, 4, 5, 6), f32(3, 4, 2, 2), f32(3)
    off = (RNG.standard_normal((2, 2 * 2 * 4, 5, 3)) * 1.5).astype(np.float32)
    mask = RNG.random((2, 2 * 4, 5, 3)).astype(np.float32)
    attrs = {"offset_group": 2, "pads": [1, 0, 0, 1], "strides": [1, 2]}
    check("DeformConv", [x, w, off, b, mask], attrs, opset=19, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attrs", [{}, {"strides": [2, 2]}, {"pads": [1, 0, 1, 2], "dilations": [2, 1]}])
def test_col2im(attrs):
    image, block = np.array([6, 7], np.int64), np.array([2, 3], np.int64)
    # number of blocks from the conv formula
    pads = attrs.get("pads", [0, 0, 0, 0])
    s, d = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    L = 1
    for i in range(2):
        L *= (image[i] + pads[i] + pads[i + 2] - (d[i] * (block[i] - 1) + 1)) // s[i] + 1
    x = f32(2, 3 * 6, int(L))
    check("Col2Im", [x, image, block], attrs, opset=18)


@pytest.mark.parametrize(
    "xs,ws,attrs",
    [
        ((2, 3, 9, 8), (4, 3, 3, 3), {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 2, 0, 1]}),
        ((2, 2, 5, 6, 4), (3, 2, 2, 3, 1), {"pads": [1, 0, 0, 0, 1, 0]}),
        ((1, 2, 17), (3, 2, 4), {"strides": [3]}),
    ],
)
def test_conv_tiled_path(monkeypatch, xs, ws, attrs):
    from epoxy_ep_cpu.ops import conv as conv_module

    monkeypatch.setattr(conv_module, "_TILE_ABOVE", 16)
    monkeypatch.setattr(conv_module, "_TILE", 40)
    x, w, b = f32(*xs), f32(*ws), f32(ws[0])
    check("Conv", [x, w, b], attrs, rtol=1e-4, atol=1e-4)
