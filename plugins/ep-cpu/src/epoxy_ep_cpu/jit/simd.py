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
