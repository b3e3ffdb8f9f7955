"""One register tile of a channels-last depthwise convolution, as a numba intrinsic (LLVM IR
emitted into :mod:`kernels_depthwise_channels`' kernel, cached with it).

Why: that kernel accumulated an output row tap by tap, each tap one loop over the row's
``ow * C`` sums in memory: per multiply-add a load of the sum, of the tap's weight (repeated
per output column) and of the input, and a store. On convnext's 7x7 layers over 8x8 maps
that ran at ~7 G multiply-adds a second (16 channels, 7.2 us an image; onnxruntime's blocked
kernel ~1.5 us). Here up to :data:`TILE` output positions of one row and one vector of
channels stay in registers over all the taps: per tap one load of the tap's channel
weights, then per position one input load and one fused multiply-add.

The sums start from the bias and add the taps in the kernel's order (row by row, column by
column), one rounding per tap, as the loop it replaces.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .llvm_module import avx512
from .simd import first_lanes, masked_load, masked_store

#: output positions a tile keeps in registers (8 accumulators, the weights' vector and an input)
TILE = 8
#: bytes of one vector register: AVX-512's 64, else AVX2's 32
VECTOR_BYTES = 64 if avx512() else 32


def lanes_of(itemsize: int) -> int:
    """Channels in one vector of ``itemsize``-byte elements."""
    return VECTOR_BYTES // itemsize


def _fma(builder: Any, a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` lane by lane with one rounding (``llvm.fma`` on the vector type)."""
    vector = a.type
    name = f"llvm.fma.v{vector.count}{'f32' if vector.element == ir.FloatType() else 'f64'}"
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector] * 3), name)
    return builder.call(fn, [a, b, c])


class _Vectors:
    """Loads and stores of one vector type at element offsets, masked or not."""

    def __init__(self, builder: Any, vector: Any, mask: Any | None) -> None:
        self.builder, self.vector, self.mask = builder, vector, mask

    def _at(self, base: Any, offset: Any) -> Any:
        return self.builder.bitcast(self.builder.gep(base, [offset]), self.vector.as_pointer())

    def load(self, base: Any, offset: Any) -> Any:
        if self.mask is None:
            return self.builder.load(self._at(base, offset), align=1)
        zero = ir.Constant(self.vector, [0.0] * self.vector.count)
        return masked_load(self.builder, self.vector, self.builder.gep(base, [offset]), self.mask, zero)

    def store(self, value: Any, base: Any, offset: Any) -> None:
        if self.mask is None:
            self.builder.store(value, self._at(base, offset), align=1)
        else:
            masked_store(self.builder, value, self.builder.gep(base, [offset]), self.mask)


def _plus(builder: Any, base: Any, step: Any, p: int) -> Any:
    """``base + p * step`` (i64), ``base`` itself for ``p == 0``."""
    return base if p == 0 else builder.add(base, builder.mul(step, ir.Constant(ir.IntType(64), p)))


def _tile(builder: Any, io: _Vectors, slots: list[Any], pointers: dict[str, Any], n: dict[str, Any],
          positions: int) -> None:
    """The IR of one tile of ``positions`` outputs (see :func:`tap_tile`)."""
    bias = io.load(pointers["bias"], n["cb"])
    for p in range(positions):
        builder.store(bias, slots[p])
    with cgutils.for_range(builder, n["taps"]) as loop:
        t = loop.index
        weights = io.load(pointers["wt"], builder.add(builder.mul(t, n["c"]), n["cb"]))
        base = builder.add(n["xbase"], builder.load(builder.gep(pointers["toff"], [t])))
        for p in range(positions):
            x = io.load(pointers["xt"], _plus(builder, base, n["step"], p))
            builder.store(_fma(builder, weights, x, builder.load(slots[p])), slots[p])
    for p in range(positions):
        io.store(builder.load(slots[p]), pointers["acc"], _plus(builder, n["abase"], n["c"], p))


@intrinsic
def tap_tile(typingctx: Any, xt: Any, wt: Any, bias: Any, acc: Any, toff: Any, taps: Any, xbase: Any, cb: Any,
             abase: Any, c: Any, step: Any, lanes: Any, positions: Any) -> Any:
    """``acc[abase + p * c + j] = bias[cb + j] + sum over t < taps of wt[t * c + cb + j] *
    xt[xbase + toff[t] + p * step + j]`` for ``j < lanes`` (at most :func:`lanes_of` the dtype's
    size) and ``p < positions`` (at most :data:`TILE`), the taps added in order, each a fused
    multiply-add. ``xt``, ``wt``, ``bias``, ``acc``: 1-D arrays of one float dtype; ``toff``:
    int64 offsets. Lanes past ``lanes`` are neither read nor written."""
    arrays = (xt, wt, bias, acc)
    if not (all(isinstance(a, types.Array) and isinstance(a.dtype, types.Float) for a in arrays)
            and len({a.dtype for a in arrays}) == 1 and isinstance(toff, types.Array)
            and isinstance(toff.dtype, types.Integer)):
        return None
    sig = types.void(xt, wt, bias, acc, toff, taps, xbase, cb, abase, c, step, lanes, positions)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        dtype = signature.args[0].dtype
        element = context.get_value_type(dtype)
        width = lanes_of(dtype.bitwidth // 8)
        vector = ir.VectorType(element, width)
        pointers = {name: context.make_array(signature.args[k])(context, builder, args[k]).data
                    for k, name in enumerate(("xt", "wt", "bias", "acc", "toff"))}
        n = {name: context.cast(builder, args[k], signature.args[k], types.int64)
             for k, name in zip(range(5, 13), ("taps", "xbase", "cb", "abase", "c", "step", "lanes", "positions"))}
        slots = [cgutils.alloca_once(builder, vector) for _ in range(TILE)]  # registers after SROA
        full = builder.icmp_signed("==", n["lanes"], ir.Constant(ir.IntType(64), width))
        with builder.if_else(full) as (whole, partial):
            for block, masked in ((whole, False), (partial, True)):
                with block:
                    io = _Vectors(builder, vector, first_lanes(builder, n["lanes"], width) if masked else None)
                    for positions in range(1, TILE + 1):
                        same = builder.icmp_signed("==", n["positions"], ir.Constant(ir.IntType(64), positions))
                        with builder.if_then(same):
                            _tile(builder, io, slots, pointers, n, positions)
        return context.get_dummy_value()

    return sig, codegen
