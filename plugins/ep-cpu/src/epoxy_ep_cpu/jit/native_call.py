"""A compiled numba kernel calling an LLVM-IR kernel (``llvm_module``) by its address.

Why: a small layer's pad, product and store are each a few hundred nanoseconds of work, and
crossing from Python three times (two numba entries and a ctypes call, ~1 us each) cost more
than the arithmetic. With the product's address as an integer argument, one compiled
function runs all three; the address is a run-time value, so numba still caches the caller.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def call_product(typingctx: Any, address: Any, w: Any, rowoff: Any, x: Any, out: Any, k: Any, positions: Any,
                 images: Any, xstep: Any, ostep: Any, cols: Any, blocks: Any) -> Any:
    """``f(w, rowoff, x, out, k, positions, images, xstep, ostep, cols, blocks)`` for the
    function at ``address`` (``position_gemm_ir``'s drivers): arrays pass their data pointers
    (float32 ``w``, ``x``, ``out``; int64 ``rowoff``), integers as int64. The caller vouches
    for the address and the arrays' sizes."""
    arrays = (w, rowoff, x, out)
    if not all(isinstance(a, types.Array) for a in arrays) or rowoff.dtype != types.int64 or any(
            a.dtype != types.float32 for a in (w, x, out)):
        return None
    sig = types.void(address, w, rowoff, x, out, k, positions, images, xstep, ostep, cols, blocks)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointers = [context.make_array(signature.args[i])(context, builder, args[i]).data for i in range(1, 5)]
        integers = [context.cast(builder, args[i], signature.args[i], types.int64) for i in range(5, 12)]
        target = context.cast(builder, args[0], signature.args[0], types.int64)
        fnty = ir.FunctionType(ir.VoidType(), [p.type for p in pointers] + [ir.IntType(64)] * len(integers))
        builder.call(builder.inttoptr(target, fnty.as_pointer()), pointers + integers)
        return context.get_dummy_value()

    return sig, codegen
