"""Calibration methods: a float range per tensor, read from its :class:`Histogram`.

Each returns a :class:`Range`. ``minmax`` is the observed range. The others pick a clipping
threshold ``t`` on ``|x|`` (percentile also has a two-sided form) and return the window
``[-t, t]`` cut to the data's own side(s): ``(0, t)`` for a tensor with no negative values,
so an asymmetric (uint8) scheme does not waste half its levels. :func:`quant_params` turns a
range into scale and zero point.
"""

from __future__ import annotations

import math

import numpy as np

from epoxy.quantization.histogram import Histogram
from epoxy.quantization.params import QuantDtype, QuantParams, Range, qrange, quant_params

__all__ = ["Range", "QuantParams", "minmax", "percentile", "entropy", "mse", "quant_params", "METHODS"]


def _window(h: Histogram, t: float) -> Range:
    """[-t, t] cut to the data's range (widened to include 0)."""
    return Range(max(-t, min(h.min, 0.0)), min(t, max(h.max, 0.0)))


def _empty(h: Histogram) -> bool:
    return h.total == 0 or h.width == 0.0


def minmax(h: Histogram) -> Range:
    """The observed min and max: nothing clipped, every outlier stretches the scale."""
    if h.total == 0:
        return Range(0.0, 0.0)
    return Range(h.min, h.max)


def _quantile(counts: np.ndarray, first_edge: float, width: float, q: float) -> float:
    """The value below which a fraction ``q`` of the counts lie, linear inside a bin."""
    cum = np.cumsum(counts)
    target = q * cum[-1]
    k = int(np.searchsorted(cum, target, side="left"))
    k = min(k, len(counts) - 1)
    before = cum[k - 1] if k else 0
    inside = (target - before) / counts[k] if counts[k] else 0.0
    return float(first_edge + (k + min(max(inside, 0.0), 1.0)) * width)


def percentile(h: Histogram, p: float = 99.999, *, symmetric: bool = True) -> Range:
    """Clip the rarest ``100 - p`` percent.

    Symmetric: ``t`` is the ``p``-th percentile of ``|x|``. Two-sided (``symmetric=False``):
    the ``100 - p``-th and ``p``-th percentiles of ``x``, each tail clipped on its own.
    """
    if not 0.0 < p <= 100.0:
        raise ValueError(f"percentile must be in (0, 100], got {p}")
    if _empty(h):
        return minmax(h)
    if symmetric:
        t = _quantile(h.folded(), 0.0, h.width, p / 100.0)
        return _window(h, min(t, max(-h.min, h.max)))
    lo = _quantile(h.counts, h.lo, h.width, 1.0 - p / 100.0)
    hi = _quantile(h.counts, h.lo, h.width, p / 100.0)
    return Range(max(lo, h.min), min(hi, h.max))


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p || q) of two unnormalized distributions; inf where p has mass q lacks."""
    p = p / p.sum()
    q = q / q.sum()
    mass = p > 0
    if np.any(q[mass] == 0):
        return math.inf
    return float(np.sum(p[mass] * np.log(p[mass] / q[mass])))


def entropy(h: Histogram, *, num_quantized_bins: int = 128) -> Range:
    """TensorRT's entropy calibration: the ``t`` whose quantized distribution loses least.

    For each candidate ``t`` (a bin edge of the ``|x|`` histogram, at least
    ``num_quantized_bins`` bins out), the reference ``P`` is the histogram below ``t`` with
    every value above ``t`` clipped into its last bin; ``Q`` is the same bins merged into
    ``num_quantized_bins`` levels and spread back evenly over the source bins that held data.
    The ``t`` of least KL(P || Q) wins. 128 levels match int8's positive half; a one-sided
    tensor headed for uint8 may use 256.
    """
    if _empty(h):
        return minmax(h)
    counts = h.folded().astype(np.float64)
    last = int(np.flatnonzero(counts)[-1]) + 1
    if last <= num_quantized_bins:
        return _window(h, last * h.width)
    best_t, best_kl = last * h.width, math.inf
    for i in range(num_quantized_bins, last + 1):
        src = counts[:i]
        ref = src.copy()
        ref[-1] += counts[i:].sum()
        group = (np.arange(i) * num_quantized_bins) // i  # which level each source bin falls in
        used = src > 0
        level_mass = np.bincount(group, weights=src, minlength=num_quantized_bins)
        level_bins = np.bincount(group, weights=used, minlength=num_quantized_bins)
        spread = np.divide(level_mass, level_bins, out=np.zeros_like(level_mass), where=level_bins > 0)
        kl = _kl(ref, np.where(used, spread[group], 0.0))
        if kl < best_kl:
            best_kl, best_t = kl, i * h.width
    return _window(h, best_t)


def _after(v: np.ndarray) -> np.ndarray:
    """For each bin, the sum of ``v`` over the bins after it."""
    return np.append(np.cumsum(v[::-1])[::-1], 0.0)[1:]


def _rounding_integral(u: np.ndarray) -> np.ndarray:
    """``H(u) = integral from -1/2 to u of (v - round(v))**2 dv``: each whole step adds 1/12."""
    v = u + 0.5
    whole = np.floor(v)
    r = v - whole - 0.5
    return whole / 12 + (r**3 + 0.125) / 3


def mse(h: Histogram, *, dtype: QuantDtype = "int8", symmetric: bool = True, reduce_range: bool = False) -> Range:
    """The ``t`` of least expected squared error after quantize-dequantize.

    For each candidate ``t`` (a bin edge of the ``|x|`` histogram) the scale is what
    :func:`quant_params` gives the window; the values of a bin inside it, taken as spread
    evenly over the bin, cost their exact mean rounding error on that grid (exact zeros cost
    nothing); values outside cost their clipping distance (from their bin's centre, plus the
    bin's own spread). One threshold on ``|x|``, not a search over every ``(lo, hi)`` pair.
    """
    if _empty(h):
        return minmax(h)
    counts = h.folded().astype(np.float64)
    last = int(np.flatnonzero(counts)[-1]) + 1
    counts = counts[:last]
    w = h.width
    centres = (np.arange(last) + 0.5) * w
    t = np.arange(1, last + 1) * w  # candidate m keeps bins 0..m and clips the rest
    qmin, qmax = qrange(dtype, symmetric=symmetric, reduce_range=reduce_range)
    lo = np.maximum(-t, min(h.min, 0.0))
    hi = np.minimum(t, max(h.max, 0.0))
    scale = (2 * np.maximum(-lo, hi) if symmetric else hi - lo) / (qmax - qmin)
    spread = counts.copy()
    spread[0] -= min(h.zeros, counts[0])
    edges = np.arange(last + 1) * w
    # the grid is the multiples of scale (the zero point is an integer), the same on both sides of 0
    rounding = np.empty(last)
    for m in range(last):
        s = scale[m]
        per_value = s**3 * np.diff(_rounding_integral(edges[: m + 2] / s)) / w
        rounding[m] = float(spread[: m + 1] @ per_value)
    n_out, c_out, cc_out = _after(counts), _after(counts * centres), _after(counts * centres**2)
    clipped = cc_out - 2 * t * c_out + t**2 * n_out + n_out * w * w / 12
    return _window(h, float(t[int(np.argmin(rounding + clipped))]))


METHODS = {"minmax": minmax, "percentile": percentile, "entropy": entropy, "mse": mse}
"""The methods by name, as ``CalibrationStats.ranges`` and the CLI take them."""
