"""Vector operations numba's loop vectorizer does not find, as numba intrinsics (LLVM IR emitted
into the calling kernel, so they inline and are kept in numba's on-disk cache like the rest).

Why: splitting a row into its even and odd columns (a stride-2 convolution's phase grids)
compiled to scalar strided loads: 1 MB of planes took ~110 us against ~25 for a plain copy.
Two vector loads and two shuffles per 32 floats run at copy speed.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

#: floats one :func:`deinterleave32` call reads
SPAN = 32

_I64 = ir.IntType(64)
_VEC = ir.VectorType(ir.FloatType(), 16)
_EVEN = ir.Constant(ir.VectorType(ir.IntType(32), 16), [2 * i for i in range(16)])
_ODD = ir.Constant(ir.VectorType(ir.IntType(32), 16), [2 * i + 1 for i in range(16)])


@intrinsic
def deinterleave32(typingctx: Any, src: Any, at: Any, dst: Any, even_at: Any, odd_at: Any) -> Any:
    """``dst[even_at:even_at + 16] = src[at:at + 32:2]`` and ``dst[odd_at:odd_at + 16] =
    src[at + 1:at + 32:2]`` for float32 arrays (no bounds checks: the caller's indices)."""
    if not (isinstance(src, types.Array) and isinstance(dst, types.Array)
            and src.dtype == types.float32 and dst.dtype == types.float32):
        return None
    sig = types.void(src, at, dst, even_at, odd_at)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        def index(k: int) -> Any:
            return context.cast(builder, args[k], signature.args[k], types.int64)

        source = context.make_array(signature.args[0])(context, builder, args[0]).data
        target = context.make_array(signature.args[2])(context, builder, args[2]).data
        base = builder.gep(source, [index(1)])
        low = builder.load(builder.bitcast(base, _VEC.as_pointer()), align=4)
        high = builder.load(builder.bitcast(builder.gep(base, [ir.Constant(_I64, 16)]), _VEC.as_pointer()), align=4)
        builder.store(builder.shuffle_vector(low, high, _EVEN),
                      builder.bitcast(builder.gep(target, [index(3)]), _VEC.as_pointer()), align=4)
        builder.store(builder.shuffle_vector(low, high, _ODD),
                      builder.bitcast(builder.gep(target, [index(4)]), _VEC.as_pointer()), align=4)
        return context.get_dummy_value()

    return sig, codegen
