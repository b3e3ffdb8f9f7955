"""DFT, STFT, window functions, MelWeightMatrix on the cpu provider (oracle: numpy.fft / onnx.reference)."""

from __future__ import annotations

import numpy as np
import pytest
from _reduction_oracle import _check, _elem, _model, _reference, _run  # noqa: E402,F401
from onnx import TensorProto

RNG = np.random.default_rng(2)


def _complex(x: np.ndarray) -> np.ndarray:
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0].astype(np.complex128)


def _dft(opset, x, dft_length=None, axis=None, **attrs):  # type: ignore[no-untyped-def]
    inputs = [("x", x)]
    if opset >= 20:
        inputs += [("n", dft_length), ("axis", axis)]
    elif dft_length is not None:
        inputs += [("n", dft_length)]
    if opset < 20 and axis is not None:
        attrs["axis"] = int(axis)
    model = _model("DFT", opset, inputs, **attrs)
    return _run(model, inputs)[0]


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("inverse", [0, 1])
@pytest.mark.parametrize("axis", [1, 2, -2])
@pytest.mark.parametrize("n", [None, 3, 8])
def test_dft_complex_full(opset: int, inverse: int, axis: int, n) -> None:  # type: ignore[no-untyped-def]
    x = RNG.standard_normal((2, 5, 6, 2)).astype(np.float32)
    nn = None if n is None else np.array(n, dtype=np.int64)
    ax = np.array(axis, dtype=np.int64)
    got = _dft(opset, x, nn, ax, inverse=inverse)
    fn = np.fft.ifft if inverse else np.fft.fft
    ref_axis = axis if axis >= 0 else axis + 4
    want = fn(_complex(x.astype(np.float64)), n=n, axis=ref_axis)
    assert got.dtype == np.float32 and got.shape[-1] == 2
    np.testing.assert_allclose(_complex(got.astype(np.float64)), want, rtol=1e-4, atol=1e-5)


def test_dft_default_axes() -> None:
    x = RNG.standard_normal((2, 5, 6, 1)).astype(np.float64)
    got17 = _dft(17, x)  # opset 17: axis attribute defaults to 1
    np.testing.assert_allclose(_complex(got17), np.fft.fft(x[..., 0], axis=1), atol=1e-10)
    got20 = _dft(20, x)  # opset 20: axis input defaults to -2 (last signal axis)
    np.testing.assert_allclose(_complex(got20), np.fft.fft(x[..., 0], axis=2), atol=1e-10)
    assert got20.dtype == np.float64


@pytest.mark.parametrize("n", [None, 7, 10])
def test_rfft_and_irfft(n) -> None:  # type: ignore[no-untyped-def]
    x = RNG.standard_normal((3, 8, 1)).astype(np.float32)
    nn = None if n is None else np.array(n, dtype=np.int64)
    got = _dft(20, x, nn, np.array(1, dtype=np.int64), onesided=1)
    want = np.fft.rfft(x[..., 0].astype(np.float64), n=n, axis=1)
    assert got.shape == (3, (n or 8) // 2 + 1, 2)
    np.testing.assert_allclose(_complex(got.astype(np.float64)), want, rtol=1e-4, atol=1e-5)
    back = _dft(20, got, nn, np.array(1, dtype=np.int64), onesided=1, inverse=1)
    m = got.shape[1]
    assert back.shape == (3, n or 2 * (m - 1), 1)
    np.testing.assert_allclose(back[..., 0], np.fft.irfft(want, n=n, axis=1), rtol=1e-4, atol=1e-5)


def test_dft_matches_reference_opset19() -> None:
    x = RNG.standard_normal((1, 10, 10, 1)).astype(np.float32)
    _check("DFT", 19, [("x", x)], rtol=1e-4, atol=1e-4, axis=2, onesided=1)


@pytest.mark.parametrize("with_window", [False, True])
@pytest.mark.parametrize("onesided", [0, 1])
def test_stft(with_window: bool, onesided: int) -> None:
    signal = RNG.standard_normal((2, 64, 1)).astype(np.float32)
    step = np.array(8, dtype=np.int64)
    window = np.hanning(16).astype(np.float32) if with_window else None
    length = None if with_window else np.array(16, dtype=np.int64)
    inputs = [("s", signal), ("step", step), ("w", window), ("len", length)]
    got = _check("STFT", 17, inputs, rtol=1e-4, atol=1e-4, onesided=onesided)[0]
    assert got.shape == (2, (64 - 16) // 8 + 1, 9 if onesided else 16, 2)


def test_stft_complex_signal() -> None:
    signal = RNG.standard_normal((1, 20, 2)).astype(np.float64)
    inputs = [("s", signal), ("step", np.array(5, dtype=np.int64)), ("w", None), ("len", np.array(10, dtype=np.int64))]
    got = _run(_model("STFT", 17, inputs, onesided=0), inputs)[0]
    c = _complex(signal)[0]
    frames = np.stack([c[i : i + 10] for i in range(0, 11, 5)])
    np.testing.assert_allclose(_complex(got)[0], np.fft.fft(frames, axis=-1), atol=1e-10)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size", [1, 2, 10])
def test_windows(op: str, periodic: int, size: int) -> None:
    inputs = [("n", np.array(size, dtype=np.int32))]
    if size == 1 and not periodic:
        # symmetric length-1 window: 0/0 in the formula; we return [1] like numpy/scipy do
        got = _run(_model(op, 17, inputs, out_elem=TensorProto.FLOAT, periodic=0), inputs)[0]
        np.testing.assert_array_equal(got, np.ones(1, dtype=np.float32))
        return
    _check(op, 17, inputs, out_elem=TensorProto.FLOAT, periodic=periodic)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
def test_window_output_datatype(op: str) -> None:
    inputs = [("n", np.array(8, dtype=np.int64))]
    model = _model(op, 17, inputs, out_elem=TensorProto.DOUBLE, output_datatype=TensorProto.DOUBLE)
    got = _run(model, inputs)[0]
    assert got.dtype == np.float64 and got.shape == (8,)
    assert _run(_model(op, 17, [("n", np.array(0, dtype=np.int64))]), [("n", np.array(0, dtype=np.int64))])[
        0
    ].shape == (0,)


@pytest.mark.parametrize(
    ("n_mel", "n_dft", "rate", "lo", "hi"),
    [(8, 16, 8192, 0.0, 4096.0), (20, 512, 16000, 50.0, 7600.0), (4, 64, 8000, 100.0, 3000.0)],
)
def test_mel_weight_matrix(n_mel: int, n_dft: int, rate: int, lo: float, hi: float) -> None:
    inputs = [
        ("m", np.array(n_mel, dtype=np.int64)),
        ("d", np.array(n_dft, dtype=np.int64)),
        ("r", np.array(rate, dtype=np.int64)),
        ("lo", np.array(lo, dtype=np.float32)),
        ("hi", np.array(hi, dtype=np.float32)),
    ]
    got = _check("MelWeightMatrix", 17, inputs, out_elem=TensorProto.FLOAT)[0]
    assert got.shape == (n_dft // 2 + 1, n_mel)
