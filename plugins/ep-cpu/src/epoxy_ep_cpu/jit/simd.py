"""Vector operations numba's loop vectorizer does not find, as numba intrinsics (LLVM IR emitted
into the calling kernel, so they inline and are kept in numba's on-disk cache like the rest).

Why: splitting a row into its even and odd columns (a stride-2 convolution's phase grids, a
stride-2 pool's windows) compiled to scalar strided loads: 1 MB of float32 planes took ~110 us
against ~25 for a plain copy. A vector load and two shuffles per 32 elements run at copy
speed.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: floats one :func:`deinterleave32` call reads
SPAN = 32

_EVEN = ir.Constant(ir.VectorType(ir.IntType(32), 16), [2 * i for i in range(16)])
_ODD = ir.Constant(ir.VectorType(ir.IntType(32), 16), [2 * i + 1 for i in range(16)])


@intrinsic
def deinterleave32(typingctx: Any, src: Any, at: Any, dst: Any, even_at: Any, odd_at: Any) -> Any:
    """``dst[even_at:even_at + 16] = src[at:at + 32:2]`` and ``dst[odd_at:odd_at + 16] =
    src[at + 1:at + 32:2]`` for two arrays of one numeric dtype (no bounds checks: the
    caller's indices). One 32-element vector load, two shuffles, two 16-element stores."""
    if not (isinstance(src, types.Array) and isinstance(dst, types.Array) and src.dtype == dst.dtype
            and isinstance(src.dtype, (types.Float, types.Integer))):
        return None
    sig = types.void(src, at, dst, even_at, odd_at)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        def index(k: int) -> Any:
            return context.cast(builder, args[k], signature.args[k], types.int64)

        element = context.get_value_type(signature.args[0].dtype)
        wide, half = ir.VectorType(element, SPAN), ir.VectorType(element, SPAN // 2)
        source = context.make_array(signature.args[0])(context, builder, args[0]).data
        target = context.make_array(signature.args[2])(context, builder, args[2]).data
        row = builder.load(builder.bitcast(builder.gep(source, [index(1)]), wide.as_pointer()), align=1)
        builder.store(builder.shuffle_vector(row, ir.Constant(wide, ir.Undefined), _EVEN),
                      builder.bitcast(builder.gep(target, [index(3)]), half.as_pointer()), align=1)
        builder.store(builder.shuffle_vector(row, ir.Constant(wide, ir.Undefined), _ODD),
                      builder.bitcast(builder.gep(target, [index(4)]), half.as_pointer()), align=1)
        return context.get_dummy_value()

    return sig, codegen


#: lanes of the masked folds below (one AVX-512 register of float32)
LANES = 16
_LANE_INDEX = ir.Constant(ir.VectorType(ir.IntType(32), LANES), list(range(LANES)))


def _greater(builder: Any, dtype: Any, v: Any, a: Any) -> Any:
    """``v > a`` lane by lane: ordered for floats, signed or unsigned for integers."""
    if isinstance(dtype, types.Float):
        return builder.fcmp_ordered(">", v, a)
    return builder.icmp_signed(">", v, a) if dtype.signed else builder.icmp_unsigned(">", v, a)


def _max2(builder: Any, dtype: Any, v: Any, a: Any) -> Any:
    """``pool_folds.max2_finite`` on vectors: ``v if v > a else a``, lane by lane."""
    return builder.select(_greater(builder, dtype, v, a), v, a)


def _splat(builder: Any, value: Any, lanes: int) -> Any:
    """``value`` in every one of ``lanes`` lanes."""
    vector = ir.VectorType(value.type, lanes)
    one = builder.insert_element(ir.Constant(vector, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(one, one, ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


def _lanes_between(builder: Any, lanes: int, shift: int, low: Any, high: Any) -> Any:
    """The mask of lanes ``k`` with ``low <= k + shift < high`` (``low``, ``high``: i64)."""
    index = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [k + shift for k in range(lanes)])
    low_, high_ = (_splat(builder, builder.trunc(v, ir.IntType(32)), lanes) for v in (low, high))
    return builder.and_(builder.icmp_signed(">=", index, low_), builder.icmp_signed("<", index, high_))


def first_lanes(builder: Any, count: Any, lanes: int = LANES) -> Any:
    """The mask of lanes ``[0, count)`` of a ``lanes``-wide vector (``count``: an integer)."""
    index = _LANE_INDEX if lanes == LANES else ir.Constant(ir.VectorType(ir.IntType(32), lanes), list(range(lanes)))
    return builder.icmp_unsigned("<", index, _splat(builder, builder.trunc(count, ir.IntType(32)), lanes))


def masked(builder: Any, kind: str, vector: Any) -> Any:
    """``llvm.masked.load`` / ``llvm.masked.store`` for ``vector`` (declared once a module)."""
    pointer = vector.as_pointer()
    element = vector.element
    kind_of = "f32" if element == ir.FloatType() else "f64" if element == ir.DoubleType() else f"i{element.width}"
    suffix = f"v{vector.count}{kind_of}"
    mask = ir.VectorType(ir.IntType(1), vector.count)
    if kind == "load":
        fnty = ir.FunctionType(vector, [pointer, ir.IntType(32), mask, vector])
    else:
        fnty = ir.FunctionType(ir.VoidType(), [vector, pointer, ir.IntType(32), mask])
    return cgutils.get_or_insert_function(builder.module, fnty, f"llvm.masked.{kind}.{suffix}.p0")


def masked_load(builder: Any, vector: Any, pointer: Any, mask: Any, passthru: Any = None) -> Any:
    fn = masked(builder, "load", vector)
    fill = ir.Constant(vector, ir.Undefined) if passthru is None else passthru
    return builder.call(fn, [builder.bitcast(pointer, vector.as_pointer()), ir.Constant(ir.IntType(32), 1), mask,
                             fill])


def masked_store(builder: Any, value: Any, pointer: Any, mask: Any) -> None:
    fn = masked(builder, "store", value.type)
    builder.call(fn, [value, builder.bitcast(pointer, value.type.as_pointer()), ir.Constant(ir.IntType(32), 1), mask])


def _stride2_windows(builder: Any, dtype: Any, first: Any, second: Any, three: Any) -> Any:
    """16 stride-2 window maxima of a folded row: ``first`` holds its entries [0, 32), ``second``
    its entries [2, 34); output ``i`` folds entries ``2i, 2i + 1`` (and ``2i + 2`` when ``three``)
    in :func:`max2`'s order."""
    undefined = ir.Constant(first.type, ir.Undefined)
    pair = _max2(builder, dtype, builder.shuffle_vector(first, undefined, _ODD),
                 builder.shuffle_vector(first, undefined, _EVEN))
    triple = _max2(builder, dtype, builder.shuffle_vector(second, undefined, _EVEN), pair)
    return builder.select(three, triple, pair)


def _pooled_dtype(src: Any, dst: Any) -> bool:
    return (isinstance(src, types.Array) and isinstance(dst, types.Array) and src.dtype == dst.dtype
            and isinstance(src.dtype, (types.Float, types.Integer)))


@intrinsic
def max3_rows(typingctx: Any, src: Any, a0: Any, a1: Any, a2: Any, dst: Any, at: Any, count: Any) -> Any:
    """``dst[at + i] = max2_finite(src[a2 + i], max2_finite(src[a1 + i], src[a0 + i]))`` for
    ``i < count <= 16``, as one masked 16-lane step: nothing outside those lanes is read or
    written. Why: a small map's rows (13-28 columns) are shorter than one unrolled vector
    iteration of numba's loops, which then ran scalar. Pass a row twice to fold two (or
    thrice for a copy): ``max2_finite(v, max2_finite(v, a))`` is ``max2_finite(v, a)``'s bits."""
    if not _pooled_dtype(src, dst):
        return None
    sig = types.void(src, a0, a1, a2, dst, at, count)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        def pointer(array: int, index: int) -> Any:
            data = context.make_array(signature.args[array])(context, builder, args[array]).data
            return builder.gep(data, [context.cast(builder, args[index], signature.args[index], types.int64)])

        dtype = signature.args[0].dtype
        vector = ir.VectorType(context.get_value_type(dtype), LANES)
        mask = first_lanes(builder, context.cast(builder, args[6], signature.args[6], types.int64))
        r0, r1, r2 = (masked_load(builder, vector, pointer(0, k), mask) for k in (1, 2, 3))
        folded = _max2(builder, dtype, r2, _max2(builder, dtype, r1, r0))
        masked_store(builder, folded, pointer(4, 5), mask)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def max_s2_lanes(typingctx: Any, row: Any, at: Any, three: Any, dst: Any, to: Any, count: Any) -> Any:
    """``count <= 16`` outputs of a stride-2 max over a folded row: ``dst[to + i] =
    max2_finite(row[at + 2i + 2], max2_finite(row[at + 2i + 1], row[at + 2i]))`` (``three``
    true) or ``max2_finite(row[at + 2i + 1], row[at + 2i])``. Reads ``row[at:at + 34]``
    whole (the caller's buffer has that room; lanes past ``count`` are dropped), writes only
    the first ``count`` lanes: two 32-element loads, shuffles and one masked store."""
    if not _pooled_dtype(row, dst):
        return None
    sig = types.void(row, at, three, dst, to, count)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        def pointer(array: int, index: int, plus: int = 0) -> Any:
            data = context.make_array(signature.args[array])(context, builder, args[array]).data
            offset = context.cast(builder, args[index], signature.args[index], types.int64)
            return builder.gep(data, [builder.add(offset, ir.Constant(ir.IntType(64), plus))])

        dtype = signature.args[0].dtype
        element = context.get_value_type(dtype)
        wide = ir.VectorType(element, 2 * LANES)
        first = builder.load(builder.bitcast(pointer(0, 1), wide.as_pointer()), align=1)
        second = builder.load(builder.bitcast(pointer(0, 1, 2), wide.as_pointer()), align=1)
        folded = _stride2_windows(builder, dtype, first, second,
                                  context.cast(builder, args[2], signature.args[2], types.boolean))
        mask = first_lanes(builder, context.cast(builder, args[5], signature.args[5], types.int64))
        masked_store(builder, folded, pointer(3, 4), mask)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def max_s2_row(typingctx: Any, src: Any, s0: Any, s1: Any, s2: Any, pl: Any, cols: Any, ident: Any, three: Any,
               dst: Any, to: Any, count: Any) -> Any:
    """One output row of a stride-2 max pool over a small map, in registers: the window rows
    at ``s0``, ``s1``, ``s2`` (repeat one to fold fewer) folded over ``cols`` input columns
    placed after ``pl`` identity entries (``ident``, the left pad; lanes past the input hold
    it too), then ``count <= 16`` outputs as :func:`max_s2_lanes` folds them (``three``: 3-wide
    windows). Needs ``2 * count + 1 <= 33`` buffer entries. Why in registers: through the row
    buffer each row's masked store fed the next loads at other offsets, which the CPU does not
    forward (a row took ~60 cycles; [576, 14, 14] 3x3 stride 2, 1 thread: 146 ns a plane)."""
    if not _pooled_dtype(src, dst):
        return None
    sig = types.void(src, s0, s1, s2, pl, cols, ident, three, dst, to, count)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        def int64(k: int) -> Any:
            return context.cast(builder, args[k], signature.args[k], types.int64)

        dtype = signature.args[0].dtype
        element = context.get_value_type(dtype)
        wide = ir.VectorType(element, 2 * LANES)
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        pad, width = int64(4), int64(5)
        high = builder.add(pad, width)
        fill = _splat(builder, context.cast(builder, args[6], signature.args[6], dtype), 2 * LANES)

        def folded(shift: int) -> Any:  # buffer entries [shift, shift + 32) of the folded rows
            mask = _lanes_between(builder, 2 * LANES, shift, pad, high)
            rows = []
            for k in (1, 2, 3):
                start = builder.sub(builder.add(int64(k), ir.Constant(ir.IntType(64), shift)), pad)
                rows.append(masked_load(builder, wide, builder.gep(data, [start]), mask, fill))
            return _max2(builder, dtype, rows[2], _max2(builder, dtype, rows[1], rows[0]))

        out = _stride2_windows(builder, dtype, folded(0), folded(2),
                               context.cast(builder, args[7], signature.args[7], types.boolean))
        target = context.make_array(signature.args[8])(context, builder, args[8]).data
        masked_store(builder, out, builder.gep(target, [int64(9)]), first_lanes(builder, int64(10)))
        return context.get_dummy_value()

    return sig, codegen
