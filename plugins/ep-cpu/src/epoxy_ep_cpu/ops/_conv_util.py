"""Helpers shared by the conv / pool kernels: padding arithmetic, sliding windows, col2im."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """Dtype used for float arithmetic (float16 / bfloat16 / other exotic floats -> float32)."""
    dtype = np.dtype(dtype)
    if dtype in (np.float32, np.float64):
        return dtype
    return np.dtype(np.float32)


def resolve_pads(
    in_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    auto_pad: str,
    ceil_mode: bool = False,
) -> tuple[list[int], list[int], list[int], list[int]]:
    """Output spatial shape and paddings of a sliding-window op.

    Returns ``(out, begin, end, extra)``: ``begin``/``end`` are the pads the op defines
    (explicit or auto), ``extra`` the additional end padding ceil mode needs so that the
    last window fits (those positions are never counted as padding).
    """
    n = len(in_shape)
    out, begin, end, extra = [], [], [], []
    for i in range(n):
        size, s = int(in_shape[i]), int(strides[i])
        ek = (int(kernel[i]) - 1) * int(dilations[i]) + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-size // s)
            total = max(0, (o - 1) * s + ek - size)
            small, big = total // 2, total - total // 2
            b, e = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
        else:
            if auto_pad == "VALID":
                b = e = 0
            else:
                b, e = int(pads[i]), int(pads[i + n])
            span = size + b + e - ek
            if span < 0:
                o = 0
            elif ceil_mode:
                o = -(-span // s) + 1
                # a window starting in the end padding is dropped
                if (o - 1) * s >= size + b:
                    o -= 1
            else:
                o = span // s + 1
        o = max(o, 0)
        out.append(o)
        begin.append(b)
        end.append(e)
        extra.append(max(0, (o - 1) * s + ek - (size + b + e)) if o > 0 else 0)
    return out, begin, end, extra


def padded_shape(shape: Sequence[int], begin: Sequence[int], end: Sequence[int]) -> tuple[int, ...]:
    """Shape of ``shape`` after :func:`pad_spatial` pads its trailing axes (negative pads,
    which crop, count as 0: an upper bound to check before allocating)."""
    lead = len(shape) - len(begin)
    return tuple(int(d) for d in shape[:lead]) + tuple(
        int(shape[lead + i]) + max(0, int(b)) + max(0, int(e)) for i, (b, e) in enumerate(zip(begin, end))
    )


def pad_spatial(x: np.ndarray, begin: Sequence[int], end: Sequence[int], value=0) -> np.ndarray:
    """Pad the trailing ``len(begin)`` axes (returns ``x`` itself when nothing to pad).

    Negative pads crop.
    """
    nsp = len(begin)
    if not any(begin) and not any(end):
        return x
    if any(b < 0 for b in begin) or any(e < 0 for e in end):
        crop = (slice(None),) * (x.ndim - nsp) + tuple(
            slice(max(0, -b), x.shape[x.ndim - nsp + i] - max(0, -e)) for i, (b, e) in enumerate(zip(begin, end))
        )
        x = x[crop]
        begin = [max(0, b) for b in begin]
        end = [max(0, e) for e in end]
        if not any(begin) and not any(end):
            return x
    lead = x.ndim - nsp
    shape = x.shape[:lead] + tuple(x.shape[lead + i] + b + e for i, (b, e) in enumerate(zip(begin, end)))
    out = np.full(shape, value, dtype=x.dtype)
    inner = (slice(None),) * lead + tuple(slice(b, b + x.shape[lead + i]) for i, b in enumerate(begin))
    out[inner] = x
    return out


def windows(
    xp: np.ndarray, out_shape: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]
) -> np.ndarray:
    """Read-only view ``(..., *out_shape, *kernel)`` of the windows over the trailing axes of ``xp``."""
    nsp = len(kernel)
    lead = xp.ndim - nsp
    sp = xp.strides[lead:]
    shape = xp.shape[:lead] + tuple(out_shape) + tuple(kernel)
    st = xp.strides[:lead] + tuple(a * s for a, s in zip(sp, strides)) + tuple(a * d for a, d in zip(sp, dilations))
    return as_strided(xp, shape, st, writeable=False)


def kernel_offsets(
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out_shape: Sequence[int],
    shift: Sequence[int] | None = None,
) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """For each kernel position: its index and the spatial slices (of the padded input)
    holding the input element that position sees, for every output position.

    ``out_shape`` entries must be positive."""
    shift = shift or (0,) * len(kernel)
    for k in itertools.product(*(range(int(v)) for v in kernel)):
        sl = tuple(
            slice(ki * d + sh, ki * d + sh + (o - 1) * s + 1, s)
            for ki, d, s, o, sh in zip(k, dilations, strides, out_shape, shift)
        )
        yield k, sl


def col2im_add(
    cols: np.ndarray,
    lead_shape: tuple[int, ...],
    kernel: Sequence[int],
    in_shape: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out_shape: Sequence[int],
    pads_begin: Sequence[int],
) -> np.ndarray:
    """Scatter-add ``cols`` of shape ``(*lead, *kernel, *in_shape)`` onto an image.

    Element ``[..., k, i]`` lands at spatial position ``i * stride + k * dilation - pad_begin``;
    positions outside ``[0, out_shape)`` are dropped. Returns ``(*lead, *out_shape)``.
    """
    # full coordinate range q in [lo, hi): covers both the written span and the output
    lo = [min(0, int(b)) for b in pads_begin]
    full = [
        (int(i) - 1) * s + (int(k) - 1) * d + 1 if int(i) > 0 else 0
        for i, k, s, d in zip(in_shape, kernel, strides, dilations)
    ]
    hi = [max(f, int(b) + int(o)) for f, b, o in zip(full, pads_begin, out_shape)]
    buf = np.zeros(lead_shape + tuple(h - low for h, low in zip(hi, lo)), dtype=cols.dtype)
    if all(int(i) > 0 for i in in_shape) and cols.size:
        lead = (slice(None),) * len(lead_shape)
        for k, sl in kernel_offsets(kernel, strides, dilations, in_shape, shift=[-v for v in lo]):
            buf[lead + sl] += cols[lead + k]
    crop = (slice(None),) * len(lead_shape) + tuple(
        slice(int(b) - low, int(b) - low + int(o)) for b, low, o in zip(pads_begin, lo, out_shape)
    )
    out = buf[crop]
    return out if out.flags.c_contiguous else np.ascontiguousarray(out)
