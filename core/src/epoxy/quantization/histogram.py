"""One histogram per tensor, collected once and read by every calibration method.

The range is ``[-neg * width, (bins - neg) * width]``: zero is always a bin edge, so the
histogram of ``|x|`` (what the symmetric methods read) folds out of it exactly, and a
one-sided tensor (after a Relu) spends every bin on its own side. When a batch falls outside
the range, the width grows by the least whole factor that fits it and old bins are merged
whole into new ones: no re-binning error, the counts stay those of a single histogram over the final range,
and memory stays ``bins`` integers per tensor however many batches are seen.
"""

from __future__ import annotations

import math

import numpy as np

DEFAULT_BINS = 2048


class Histogram:
    """Running min/max and a growing histogram of one tensor's finite values.

    ``bins`` (default 2048, even) is fixed for the life of the histogram; non-finite values
    are counted in ``nonfinite`` and left out of everything else.
    """

    def __init__(self, bins: int = DEFAULT_BINS) -> None:
        if bins < 2 or bins % 2:
            raise ValueError(f"bins must be an even number >= 2, got {bins}")
        self.bins = bins
        self.counts = np.zeros(bins, np.int64)
        self.width = 0.0  # 0 until a non-zero value is seen: zeros wait in _pending_zeros
        self.neg = 0  # bins below zero
        self.min = math.inf
        self.max = -math.inf
        self.nonfinite = 0
        self.zeros = 0  # exact zeros (Relu outputs, padding): they quantize without error
        self._pending_zeros = 0

    # -- reading ---------------------------------------------------------------------------
    @property
    def total(self) -> int:
        """Finite values seen."""
        return int(self.counts.sum()) + self._pending_zeros

    @property
    def lo(self) -> float:
        """Left edge of the range."""
        return -self.neg * self.width

    @property
    def hi(self) -> float:
        """Right edge of the range."""
        return (self.bins - self.neg) * self.width

    def edges(self) -> np.ndarray:
        """The ``bins + 1`` bin edges (float64)."""
        return (np.arange(self.bins + 1, dtype=np.float64) - self.neg) * self.width

    def folded(self) -> np.ndarray:
        """Counts of ``|x|`` over ``[0, max(neg, bins - neg) * width]``, same bin width."""
        pos = self.counts[self.neg:]
        neg = self.counts[:self.neg][::-1]
        out = np.zeros(max(len(pos), len(neg)), np.int64)
        out[:len(pos)] += pos
        out[:len(neg)] += neg
        if len(out):
            out[0] += self._pending_zeros
        return out

    # -- updating --------------------------------------------------------------------------
    def update(self, values: np.ndarray) -> None:
        """Add one batch of values (any shape, any float dtype)."""
        x = np.asarray(values, dtype=np.float64).ravel()
        finite = np.isfinite(x)
        if not finite.all():
            self.nonfinite += int(x.size - finite.sum())
            x = x[finite]
        if x.size == 0:
            return
        lo, hi = float(x.min()), float(x.max())
        self.min, self.max = min(self.min, lo), max(self.max, hi)
        self.zeros += int(x.size - np.count_nonzero(x))
        if self.width == 0.0:
            if lo == 0.0 and hi == 0.0:
                self._pending_zeros += x.size
                return
            self._start(lo, hi)
        self._grow(lo, hi)
        index = np.floor(x / self.width).astype(np.int64) + self.neg
        np.clip(index, 0, self.bins - 1, out=index)  # only x == hi lands on bins: last bin
        self.counts += np.bincount(index, minlength=self.bins)

    def _start(self, lo: float, hi: float) -> None:
        """First range: just covers [min(lo, 0), max(hi, 0)], zero on an edge."""
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        # bins - 1 wide so rounding the negative side up to whole bins still leaves hi inside
        self.width = (hi - lo) / (self.bins - 1)
        self.neg = min(math.ceil(-lo / self.width), self.bins - 1)
        self.counts[self.neg] += self._pending_zeros
        self._pending_zeros = 0

    def _grow(self, lo: float, hi: float) -> None:
        """Widen the bins by the least whole factor that fits [lo, hi], merging old bins whole
        into new ones (with a whole factor every old bin edge is a multiple of the old width,
        so each old bin lies inside one new bin)."""
        if self.lo <= lo and hi <= self.hi:
            return
        lo, hi = min(lo, self.lo), max(hi, self.hi)  # keep the old range inside the new one
        factor = max(2, math.floor((hi - lo) / (self.bins * self.width)))
        while True:
            width = self.width * factor
            need_neg, need_pos = math.ceil(-lo / width), math.ceil(hi / width)
            if need_neg + need_pos <= self.bins:
                break
            factor += 1
        # spare bins go to each side in proportion to its extent: a one-sided tensor stays one-sided
        spare = self.bins - need_neg - need_pos
        neg = need_neg + (math.floor(spare * -lo / (hi - lo)) if lo < 0 < hi else (spare if hi <= 0 else 0))
        target = (np.arange(self.bins) - self.neg) // factor + neg
        merged = np.zeros(self.bins, np.int64)
        np.add.at(merged, target, self.counts)
        self.counts, self.width, self.neg = merged, width, neg

    def __repr__(self) -> str:
        return (f"Histogram(bins={self.bins}, range=[{self.lo:.6g}, {self.hi:.6g}], min={self.min:.6g}, "
                f"max={self.max:.6g}, total={self.total})")
