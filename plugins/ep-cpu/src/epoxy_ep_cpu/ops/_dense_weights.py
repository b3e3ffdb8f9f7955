"""A constant weight matrix and its products with rows: the jit tier's few-rows GEMM
(``jit/kernels_sgemm.py``) for the products it gains on, numpy's BLAS for the rest; for a
large float32 layer, every product (it *owns* its packed weights).

Why one helper: MatMul, Gemm and FusedMatMul all multiply rows by a constant weight, and all
three met OpenBLAS's per-call packing at a batch of 2-32 rows (a classifier head at a small
batch: 2-4x onnxruntime's time). The weights are packed at the first product that takes the
kernel, not at session creation: a model that never runs a few-rows product (a CNN at batch
1, a transformer on long sequences) holds no second copy of its weights, and neither does a
layer another provider runs.

Owned weights (float32, at least ``kernels_sgemm.MIN_OWNED_WEIGHTS``; on several threads where
OpenBLAS's idle workers can be parked, ``jit/blas_spin.py``): the kernel also beats OpenBLAS's
blocked GEMM at 33-1024 rows (BERT's [128, 768] layers, its run at 1 thread 90 -> 79 ms, at
2 threads 49.8 -> 44.5), so every product of the layer takes it. The layer then never reads the
original weights after packing them, and its kernel says so (``released_inputs``): the session
drops its own reference, so the model holds one copy of those weights, not two.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import jit


class DenseWeights:
    """``rows (M, K) @ w (K, N)`` for one constant ``w`` (any strides: a transposed view is fine)."""

    __slots__ = ("_kernels", "_lock", "_packed", "_splits", "_threads", "dtype", "owned", "shape", "w")

    def __init__(self, w: np.ndarray) -> None:
        self.w: np.ndarray | None = w
        self.shape: tuple[int, int] = (int(w.shape[0]), int(w.shape[1])) if w.ndim == 2 else w.shape
        self.dtype = w.dtype
        module = jit.kernels("sgemm")
        able = module is not None and module.support() is None
        usable = able and module.fits(w)
        self._threads = jit.thread_count() if able else 1  # the building provider's, read now
        #: every product on the packed copy; the original is dropped once packed
        self.owned = bool(able and module.owns(w, self._threads))
        self._kernels: Any = module if usable or self.owned else None
        self._packed: Any = None
        self._lock = threading.Lock()
        self._splits: dict[tuple[int, ...], Any] = {}  # split products by rows' shape (jit.threads.SplitMatmul)

    def product(self, rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``rows @ w`` (into ``out`` when given: a C-contiguous array of the product's shape
        and dtype). ``rows`` is 2-D with ``w``'s dtype."""
        if self.owned:
            packed = self._packed or self._pack()
            y = packed.matmul_any(rows, out)
            if out is not None and y is not out:
                out[...] = y
                return out
            return y  # type: ignore[no-any-return]
        kernels = self._kernels
        if kernels is not None and kernels.gains(rows.shape[0], self.shape[0], self.shape[1]):
            packed = self._packed or self._pack()
            if packed.takes(rows):
                y = packed.matmul(rows, out)
                if out is not None and y is not out:
                    out[...] = y
                    return out
                return y  # type: ignore[no-any-return]
        if self._threads > 1 and self.w is not None:
            return self._split_product(rows, out)
        return np.matmul(rows, self.w, out=out)

    def _split_product(self, rows: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        """``rows @ w`` on the session's threads when the jit tier splits products itself
        (``jit.threads.SplitMatmul``: numpy's OpenBLAS is then on one thread), else numpy's.
        Decided once per rows' shape: a product too small to split (a classifier head at batch
        1) goes straight to numpy (its split wrapper cost ~13 us a call on an AVX2 guest)."""
        split = self._splits.get(rows.shape)
        if split is None:
            split = self._splits.setdefault(rows.shape, self._splitter(rows))
        if split is False:
            return np.matmul(rows, self.w, out=out)
        if out is None:
            out = np.empty((rows.shape[0], self.shape[1]), dtype=np.result_type(rows, self.w))
        return split(rows, self.w, out)  # type: ignore[no-any-return]

    def _splitter(self, rows: np.ndarray) -> Any:
        """The split product for rows of this shape, or False where it would not split."""
        from ..jit.threads import SplitMatmul, gemm_count

        count = gemm_count(self._threads, rows.shape[0] * self.shape[0] * self.shape[1])
        if count < 2:
            return False
        sample = np.empty((rows.shape[0], self.shape[1]), dtype=np.result_type(rows, self.w))
        return SplitMatmul(rows, self.w, sample, count)

    def _pack(self) -> Any:
        with self._lock:
            if self._packed is None:
                self._packed = self._kernels.PackedFloatWeights(self.w, self._threads)
                if self.owned:
                    self.w = None  # the packed copy serves every product: let the original go
            return self._packed


def released_when_owned(kernel: Callable[..., Any], dense: DenseWeights | None, position: int) -> Callable[..., Any]:
    """``kernel``, marked as never reading its input ``position`` (the constant weight) when
    ``dense`` owns its packed copy: the core may then drop the original (the plan passes
    None there; ``epoxy.contract.RELEASED_INPUTS``)."""
    if dense is not None and dense.owned:
        kernel.released_inputs = frozenset({position})  # type: ignore[attr-defined]
    return kernel
