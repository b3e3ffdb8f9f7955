"""``com.epoxy.cpu::QuantizedLookup(codes, table)``: an op of a QDQ model run on its 8-bit codes
by table (written by the core's ``QDQLookupPass`` / ``QDQConcatRequantizePass``,
``epoxy/optimize/passes/qdq_lookup.py``, which says why the values are the QDQ graph's).

``table`` holds 256 codes in bit-pattern order: the output element is ``table[byte of the code]``.
The jit tier runs it as one compiled byte pass that keeps the input's layout (the channels-last
codes QLinearConv hands on); small tensors and the numpy path index the table with the codes'
bytes (``np.take``), channels last where the codes are. A table of shape ``(1, C, 1.., 256)``
(the data's rank, C its channels) holds one table per channel (axis 1): entry ``[c, byte]``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from epoxy.contract import NodeSpec

from .. import jit
from ..registry import KERNELS
from ._layout import as_nchw, channels_last
from .fused import DOMAIN

_CODES = (np.dtype(np.uint8), np.dtype(np.int8))
#: elements from which the compiled pass beats ``np.take`` (its call costs ~8 us; measured:
#: 8192 codes 7.6 us with np.take against 11.0, 32768 codes 25.9 against 18.7)
COMPILED_FROM = 16384


class QuantizedLookupError(TypeError):
    """An input of a QuantizedLookup node has a type or size the op does not take."""


def _check(node: NodeSpec, codes: np.ndarray, table: np.ndarray) -> None:
    if codes.dtype not in _CODES:
        raise QuantizedLookupError(f"node {node.name!r} ({node.qualified_op}): input codes must hold 8-bit codes, "
                                   f"got {codes.dtype}")
    if table.dtype not in _CODES or table.shape != (256,) and not _per_channel(codes, table):
        raise QuantizedLookupError(f"node {node.name!r} ({node.qualified_op}): input table must be 256 8-bit codes, "
                                   f"or 256 per channel shaped (1, C, 1.., 256) for codes of C channels and its "
                                   f"rank; got {table.dtype} of shape {list(table.shape)} for codes of shape "
                                   f"{list(codes.shape)}")


def _per_channel(codes: np.ndarray, table: np.ndarray) -> bool:
    """Whether ``table`` holds one table per channel of ``codes`` (``(1, C, 1.., 256)``)."""
    return (codes.ndim >= 3 and table.ndim == codes.ndim
            and table.shape == (1, codes.shape[1]) + (1,) * (codes.ndim - 3) + (256,))


@KERNELS.register("QuantizedLookup", 1, domain=DOMAIN)
def quantized_lookup(node: NodeSpec) -> Callable[..., np.ndarray]:
    compiled = jit.kernels("quantize")
    nthreads = jit.thread_count() if compiled is not None else 0

    def run(codes: np.ndarray, table: np.ndarray) -> np.ndarray:
        _check(node, codes, table)
        if table.ndim > 1:
            return _channel_lookup(codes, table.reshape(codes.shape[1], 256))
        if compiled is not None and codes.size >= COMPILED_FROM:
            return compiled.run_lookup(codes, np.ascontiguousarray(table), nthreads)
        nhwc = channels_last(codes)
        if nhwc is not None:  # keep the channels-last layout for the next convolution
            return as_nchw(np.take(table, nhwc.view(np.uint8)))
        return np.take(table, codes.view(np.uint8))

    def _channel_lookup(codes: np.ndarray, tables: np.ndarray) -> np.ndarray:
        if compiled is not None:
            return compiled.run_channel_lookup(codes, tables, nthreads)
        rows = np.arange(codes.shape[1]) * 256
        nhwc = channels_last(codes)
        if nhwc is not None:  # keep the channels-last layout for the next convolution
            return as_nchw(np.take(tables.reshape(-1), nhwc.view(np.uint8) + rows))
        shaped = rows.reshape((1, -1) + (1,) * (codes.ndim - 2))
        return np.take(tables.reshape(-1), codes.view(np.uint8) + shaped)

    return run
