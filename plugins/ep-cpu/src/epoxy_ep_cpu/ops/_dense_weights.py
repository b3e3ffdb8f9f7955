"""A constant weight matrix and its products with rows: the jit tier's few-rows GEMM
(``jit/kernels_sgemm.py``) for the products it gains on, numpy's BLAS for the rest.

Why one helper: MatMul, Gemm and FusedMatMul all multiply rows by a constant weight, and all
three met OpenBLAS's per-call packing at a batch of 2-32 rows (a classifier head at a small
batch: 2-4x onnxruntime's time). The weights are packed at the first product that takes the
kernel, not at session creation: a model that never runs a few-rows product (a CNN at batch
1, a transformer on long sequences) holds no second copy of its weights.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .. import jit


class DenseWeights:
    """``rows (M, K) @ w (K, N)`` for one constant ``w`` (any strides: a transposed view is fine)."""

    __slots__ = ("_kernels", "_lock", "_packed", "_threads", "w")

    def __init__(self, w: np.ndarray) -> None:
        self.w = w
        module = jit.kernels("sgemm")
        usable = module is not None and module.support() is None and module.fits(w)
        self._kernels: Any = module if usable else None
        self._threads = jit.thread_count() if usable else 1  # the building provider's, read now
        self._packed: Any = None
        self._lock = threading.Lock()

    def product(self, rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``rows @ w`` (into ``out`` when given: a C-contiguous array of the product's shape
        and dtype). ``rows`` is 2-D with ``w``'s dtype."""
        kernels = self._kernels
        if kernels is not None and kernels.gains(rows.shape[0], self.w.shape[0], self.w.shape[1]):
            packed = self._packed or self._pack()
            if packed.takes(rows):
                y = packed.matmul(rows, out)
                if out is not None and y is not out:
                    out[...] = y
                    return out
                return y
        return np.matmul(rows, self.w, out=out)

    def _pack(self) -> Any:
        with self._lock:
            if self._packed is None:
                self._packed = self._kernels.PackedFloatWeights(self.w, self._threads)
            return self._packed
