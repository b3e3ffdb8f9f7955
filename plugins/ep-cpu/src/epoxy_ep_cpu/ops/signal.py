"""Signal processing: DFT, STFT, window functions and MelWeightMatrix.

Complex values travel as a trailing dimension of size 2 (real, imaginary); real values as a
trailing dimension of size 1. Transforms are computed with ``numpy.fft``
in the input's precision (single for float32 and narrower floats, double for float64) and
cast back to the input dtype.
"""

from __future__ import annotations

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.graph.dtypes import onnx_to_numpy
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._flags import flag
from ._util import output_guard


def _scalar_int(value: np.ndarray | None, default: int | None = None) -> int | None:
    if value is None:
        return default
    arr = np.asarray(value).reshape(-1)
    if arr.size == 0:
        return default
    return int(arr[0])


def _fft_real_dtype(dtype: np.dtype) -> np.dtype:
    """float64 stays double; narrower floats run in single precision (like the ONNX reference)."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _unpack(x: np.ndarray) -> tuple[np.ndarray, bool]:
    """(values, is_complex) from a ``[..., 1]`` (real) or ``[..., 2]`` (complex) tensor."""
    if x.ndim == 0 or x.shape[-1] not in (1, 2):
        raise ValueError(f"last dimension must be 1 (real) or 2 (complex), got shape {x.shape}")
    xd = x.astype(_fft_real_dtype(x.dtype), copy=False)
    if x.shape[-1] == 1:
        return xd[..., 0], False
    return xd[..., 0] + 1j * xd[..., 1], True


def _pack_complex(c: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.stack([c.real, c.imag], axis=-1).astype(dtype)


def _dft(x: np.ndarray, n: int | None, axis: int, inverse: bool, onesided: bool, guard) -> np.ndarray:
    dtype = x.dtype
    rank = x.ndim
    ax = axis + rank if axis < 0 else axis
    if not 0 <= ax < rank - 1:
        raise ValueError(f"DFT axis {axis} out of range for input of rank {rank}")
    if n is not None and n <= 0:
        raise ValueError(f"dft_length must be positive, got {n}")
    if n is not None:  # the spectrum numpy computes (complex, before packing) has n points on the axis
        guard(x.shape[:ax] + (n,) + x.shape[ax + 1 : -1], np.dtype(np.complex128))
    values, is_complex = _unpack(x)
    if onesided and inverse:
        # IRFFT: one-sided complex spectrum -> full real signal
        real = np.fft.irfft(values, n=n, axis=ax)
        return real[..., None].astype(dtype)
    if onesided:
        length = values.shape[ax] if n is None else n
        if is_complex:
            spec = np.fft.fft(values, n=length, axis=ax)
            spec = np.take(spec, np.arange(length // 2 + 1), axis=ax)
        else:
            spec = np.fft.rfft(values, n=length, axis=ax)
        return _pack_complex(spec, dtype)
    fn = np.fft.ifft if inverse else np.fft.fft
    return _pack_complex(fn(values, n=n, axis=ax), dtype)


@KERNELS.register("DFT", 17)
def dft_17(node: NodeSpec):
    inverse = flag(node, "inverse", 0)
    onesided = flag(node, "onesided", 0)
    axis = int(node.attr("axis", 1))
    guard = output_guard(node)

    def run(x: np.ndarray, dft_length: np.ndarray | None = None) -> np.ndarray:
        return _dft(np.asarray(x), _scalar_int(dft_length), axis, inverse, onesided, guard)

    return run


@KERNELS.register("DFT", 20)
def dft_20(node: NodeSpec):
    inverse = flag(node, "inverse", 0)
    onesided = flag(node, "onesided", 0)
    guard = output_guard(node)

    def run(x: np.ndarray, dft_length: np.ndarray | None = None, axis: np.ndarray | None = None) -> np.ndarray:
        ax = _scalar_int(axis, -2)
        return _dft(np.asarray(x), _scalar_int(dft_length), ax, inverse, onesided, guard)  # type: ignore[arg-type]

    return run


@KERNELS.register("STFT", 17)
def stft(node: NodeSpec):
    onesided = flag(node, "onesided", 1)
    guard = output_guard(node)

    def run(
        signal: np.ndarray,
        frame_step: np.ndarray,
        window: np.ndarray | None = None,
        frame_length: np.ndarray | None = None,
    ) -> np.ndarray:
        signal = np.asarray(signal)
        if signal.ndim != 3:
            raise ValueError(f"STFT signal must have rank 3, got shape {signal.shape}")
        values, is_complex = _unpack(signal)  # [batch, length]
        length = values.shape[1]
        step = _scalar_int(frame_step)
        if step is None or step <= 0:
            raise ValueError(f"frame_step must be positive, got {step}")
        fl = _scalar_int(frame_length)
        if fl is None:
            fl = int(np.asarray(window).shape[0]) if window is not None else length
        if window is not None and np.asarray(window).shape[0] != fl:
            raise ValueError(f"window length {np.asarray(window).shape[0]} != frame_length {fl}")
        if fl <= 0 or fl > length:
            raise ValueError(f"frame_length {fl} must be in [1, signal_length={length}]")
        n_frames = (length - fl) // step + 1
        guard((values.shape[0], n_frames, fl), np.dtype(np.complex128))  # windowed frames / spectrum
        frames = np.lib.stride_tricks.sliding_window_view(values, fl, axis=1)[:, ::step][:, :n_frames]
        if window is not None:
            frames = frames * np.asarray(window).astype(frames.real.dtype)
        if onesided and not is_complex:
            spec = np.fft.rfft(frames, axis=-1)
        else:
            spec = np.fft.fft(frames, axis=-1)
            if onesided:
                spec = spec[..., : fl // 2 + 1]
        return _pack_complex(spec, signal.dtype)

    return run


def _output_dtype(node: NodeSpec) -> np.dtype:
    elem = int(node.attr("output_datatype", 1))
    try:
        return onnx_to_numpy(elem)
    except Exception as exc:  # noqa: BLE001 - an unknown enum value
        raise Unsupported(f"output_datatype {elem} is not supported") from exc


def _cosine_window(coeffs: tuple[float, ...]):
    """Factory for windows sum_k (-1)^k a_k cos(2 pi k n / D)."""

    def factory(node: NodeSpec):
        periodic = flag(node, "periodic", 1)
        dtype = _output_dtype(node)
        guard = output_guard(node)

        def run(size: np.ndarray) -> np.ndarray:
            n = _scalar_int(size)
            if n is None or n < 0:
                raise ValueError(f"window size must be non-negative, got {n}")
            guard((n,), np.dtype(np.float64))
            denom = n if periodic else n - 1
            if denom <= 0:
                return np.ones(n, dtype=np.float64).astype(dtype)
            phase = 2.0 * np.pi * np.arange(n, dtype=np.float64) / denom
            w = np.zeros(n, dtype=np.float64)
            for k, a in enumerate(coeffs):  # a handful of terms, vectorized over n
                w += ((-1.0) ** k) * a * np.cos(k * phase)
            return w.astype(dtype)

        return run

    return factory


KERNELS.register("HannWindow", 17)(_cosine_window((0.5, 0.5)))
KERNELS.register("HammingWindow", 17)(_cosine_window((25.0 / 46.0, 21.0 / 46.0)))
KERNELS.register("BlackmanWindow", 17)(_cosine_window((0.42, 0.5, 0.08)))


def _hz_to_mel(hz: np.ndarray | float) -> np.ndarray:
    return 2595.0 * np.log10(1.0 + np.asarray(hz, dtype=np.float64) / 700.0)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    return 700.0 * (np.power(10.0, np.asarray(mel, dtype=np.float64) / 2595.0) - 1.0)


@KERNELS.register("MelWeightMatrix", 17)
def mel_weight_matrix(node: NodeSpec):
    dtype = _output_dtype(node)
    guard = output_guard(node)

    def run(
        num_mel_bins: np.ndarray,
        dft_length: np.ndarray,
        sample_rate: np.ndarray,
        lower_edge_hertz: np.ndarray,
        upper_edge_hertz: np.ndarray,
    ) -> np.ndarray:
        n_mel = _scalar_int(num_mel_bins)
        n_dft = _scalar_int(dft_length)
        rate = _scalar_int(sample_rate)
        lo = float(np.asarray(lower_edge_hertz, dtype=np.float64).reshape(-1)[0])
        hi = float(np.asarray(upper_edge_hertz, dtype=np.float64).reshape(-1)[0])
        if n_mel is None or n_dft is None or rate is None or n_mel <= 0 or n_dft <= 0 or rate <= 0:
            raise ValueError("num_mel_bins, dft_length and sample_rate must be positive")
        n_bins = n_dft // 2 + 1
        guard((n_bins, n_mel), np.dtype(np.float64))
        low_mel, high_mel = _hz_to_mel(lo), _hz_to_mel(hi)
        # The ONNX definition (its reference and backend cases, and onnxruntime) spaces the
        # n_mel + 2 band edges by (high - low) / (n_mel + 2), so the last edge stays below
        # upper_edge_hertz; follow it for conformance.
        mel_step = (high_mel - low_mel) / (n_mel + 2)
        edges_hz = _mel_to_hz(low_mel + mel_step * np.arange(n_mel + 2, dtype=np.float64))
        edges = np.floor((n_dft + 1) * edges_hz / rate).astype(np.int64)
        lower, center, upper = edges[None, :-2], edges[None, 1:-1], edges[None, 2:]
        j = np.arange(n_bins, dtype=np.int64)[:, None]
        rise_width = center - lower
        fall_width = upper - center
        rise = np.where(rise_width > 0, (j - lower) / np.where(rise_width > 0, rise_width, 1), 1.0)
        fall = (upper - j) / np.where(fall_width > 0, fall_width, 1)
        out = np.zeros((n_bins, n_mel), dtype=np.float64)
        out = np.where((j >= lower) & (j <= center), rise, out)
        out = np.where((fall_width > 0) & (j >= center) & (j < upper), fall, out)
        return out.astype(dtype)

    return run
