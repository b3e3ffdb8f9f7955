"""A block transpose in vector registers, as a numba intrinsic: channel rows to position
vectors and back (:mod:`kernels_depthwise_channels` moves each image into channels-last
order and each output row back to NCHW through it).

Why: those moves were element loops with one side strided (a plane apart per channel), ~0.6 ns
an element each way: on a 64-channel 8x8 map under a 3x3 kernel they were 5 of the layer's 6
us. Here a block of up to ``L x L`` elements (``L``: the vector's lanes) is ``L`` masked
vector loads, ``log2(L)`` rounds of interleaving shuffles, and ``L`` masked vector stores.
"""

from __future__ import annotations

import math
from typing import Any

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .depthwise_taps import lanes_of
from .simd import first_lanes, masked_load, masked_store


def _interleave(builder: Any, a: Any, b: Any, high: bool) -> Any:
    """Lanes ``a0 b0 a1 b1 ...`` of the low (or high) halves of ``a`` and ``b``."""
    lanes = a.type.count
    start = lanes // 2 if high else 0
    order = [k for i in range(start, start + lanes // 2) for k in (i, lanes + i)]
    return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(ir.IntType(32), lanes), order))


def transpose_registers(builder: Any, rows: list[Any]) -> list[Any]:
    """The transpose of the square matrix whose rows are ``rows`` (``L`` vectors of ``L``
    lanes, ``L`` a power of two): ``log2(L)`` rounds, each pairing row ``i`` with row ``i +
    L/2`` into their interleaved low and high halves."""
    lanes = len(rows)
    for _ in range(int(math.log2(lanes))):
        half = lanes // 2
        rows = [_interleave(builder, rows[i], rows[i + half], high) for i in range(half) for high in (False, True)]
    return rows


@intrinsic
def transpose_block(typingctx: Any, src: Any, src_at: Any, src_step: Any, rows: Any, dst: Any, dst_at: Any,
                    dst_step: Any, cols: Any) -> Any:
    """``dst[dst_at + j * dst_step + r] = src[src_at + r * src_step + j]`` for ``r < rows`` and
    ``j < cols``, both at most the vector's lanes for the dtype (:func:`depthwise_taps.lanes_of`);
    nothing else is read or written. ``src`` and ``dst``: 1-D arrays of one float dtype."""
    if not (isinstance(src, types.Array) and isinstance(dst, types.Array) and src.dtype == dst.dtype
            and isinstance(src.dtype, types.Float)):
        return None
    sig = types.void(src, src_at, src_step, rows, dst, dst_at, dst_step, cols)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        dtype = signature.args[0].dtype
        lanes = lanes_of(dtype.bitwidth // 8)
        vector = ir.VectorType(context.get_value_type(dtype), lanes)
        i64 = ir.IntType(64)
        src_at, src_step, n_rows, dst_at, dst_step, n_cols = (
            context.cast(builder, args[k], signature.args[k], types.int64) for k in (1, 2, 3, 5, 6, 7))
        source = context.make_array(signature.args[0])(context, builder, args[0]).data
        target = context.make_array(signature.args[4])(context, builder, args[4]).data
        col_mask, row_mask = first_lanes(builder, n_cols, lanes), first_lanes(builder, n_rows, lanes)
        none = ir.Constant(col_mask.type, [0] * lanes)
        zero = ir.Constant(vector, [0.0] * lanes)
        loaded = []
        for r in range(lanes):  # row r is read only when r < rows (an empty mask reads nothing)
            live = builder.icmp_signed("<", ir.Constant(i64, r), n_rows)
            at = builder.add(src_at, builder.mul(src_step, ir.Constant(i64, r)))
            loaded.append(masked_load(builder, vector, builder.gep(source, [at]), builder.select(live, col_mask, none),
                                      zero))
        for j, column in enumerate(transpose_registers(builder, loaded)):
            live = builder.icmp_signed("<", ir.Constant(i64, j), n_cols)
            at = builder.add(dst_at, builder.mul(dst_step, ir.Constant(i64, j)))
            masked_store(builder, column, builder.gep(target, [at]), builder.select(live, row_mask, none))
        return context.get_dummy_value()

    return sig, codegen
