"""Helpers shared by the attention-style kernels (softmax with masked rows, head layout, dtypes)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import helper

from epoxy.kit import Unsupported

_SOFTMAX_PRECISIONS = {1: np.float32, 10: np.float16, 11: np.float64, 16: ml_dtypes.bfloat16}


def compute_dtype(dt: np.dtype) -> np.dtype:
    """Accumulation dtype for a float input: double stays double, everything else float32."""
    return np.dtype(np.float64) if dt == np.float64 else np.dtype(np.float32)


def precision_dtype(code: int | None) -> np.dtype | None:
    """numpy dtype of a ``softmax_precision``-style ONNX element type attribute."""
    if code is None or int(code) == 0:
        return None
    code = int(code)
    if code in _SOFTMAX_PRECISIONS:
        return np.dtype(_SOFTMAX_PRECISIONS[code])
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(code))
    except Exception as exc:  # noqa: BLE001
        raise Unsupported(f"unsupported precision {code}") from exc


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Numerically stable logistic function (same dtype as ``x``)."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


def masked_softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; rows whose every entry is ``-inf`` become zero rows."""
    if scores.shape[-1] == 0:
        return scores.copy()
    row_max = np.max(scores, axis=-1, keepdims=True)
    dead = np.isneginf(row_max)
    shifted = scores - np.where(dead, 0, row_max)
    e = np.exp(shifted)
    total = np.sum(e, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        probs = e / np.where(total == 0, 1, total)
    return np.where(dead, 0, probs).astype(scores.dtype, copy=False)


def split_heads(x: np.ndarray, num_heads: int) -> np.ndarray:
    """[B, S, H*D] -> [B, H, S, D]."""
    b, s, hidden = x.shape
    if num_heads <= 0 or hidden % num_heads:
        raise ValueError(f"hidden size {hidden} is not a multiple of num_heads={num_heads}")
    return x.reshape(b, s, num_heads, hidden // num_heads).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """[B, H, S, D] -> [B, S, H*D]."""
    b, h, s, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def repeat_kv(x: np.ndarray, q_heads: int) -> np.ndarray:
    """Expand [B, Hkv, S, D] to [B, Hq, S, D]: query head h uses kv head h // (Hq / Hkv)."""
    kv_heads = x.shape[1]
    if kv_heads == q_heads:
        return x
    if kv_heads == 0 or q_heads % kv_heads:
        raise ValueError(f"q_num_heads={q_heads} is not a multiple of kv_num_heads={kv_heads}")
    return np.repeat(x, q_heads // kv_heads, axis=1)


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool) -> np.ndarray:
    """Rotary embedding of ``x`` [B, S, H, D] (compute dtype) with ``cos``/``sin`` [B|1, S, R/2]:
    the first R channels rotate (pairs ``(2i, 2i+1)`` when interleaved, else ``(i, i+R/2)``),
    the rest pass through. Returns a new array in ``x``'s dtype."""
    half = cos.shape[-1]
    rot = 2 * half
    c = cos.astype(x.dtype, copy=False)[:, :, None, :]
    s = sin.astype(x.dtype, copy=False)[:, :, None, :]
    xr = x[..., :rot]
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
    else:
        x1, x2 = xr[..., :half], xr[..., half:]
    real = c * x1 - s * x2
    imag = s * x1 + c * x2
    if interleaved:
        rotated = np.stack([real, imag], axis=-1).reshape(xr.shape)
    else:
        rotated = np.concatenate([real, imag], axis=-1)
    if rot == x.shape[-1]:
        return rotated
    return np.concatenate([rotated, x[..., rot:]], axis=-1)
