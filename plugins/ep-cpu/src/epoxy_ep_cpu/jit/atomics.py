"""Ordered loads and stores of int64 array cells, the cycle counter and ``sched_yield``, for
numba code that waits on another thread (the spinning helpers of :mod:`.native_pool`).

Why intrinsics: numba reads an array cell as a plain load, which LLVM may hoist out of a
wait loop (the loop then never sees the other thread's store); an acquire load is read on
every turn, and a release store makes the share's writes visible before the flag. The libc
and LLVM functions are declared by name, not through a ctypes pointer, so numba's disk cache
keeps the functions that use them.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _cell(context: Any, builder: Any, signature: Any, args: Any) -> Any:
    aryty = signature.args[0]
    ary = context.make_array(aryty)(context, builder, args[0])
    return cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]])


@intrinsic
def load_acquire(typingctx: Any, arr: Any, idx: Any) -> Any:
    """``arr[idx]`` (an int64 array) read with acquire ordering."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.load_atomic(_cell(context, builder, signature, args), ordering="acquire", align=8)

    return types.int64(arr, idx), codegen


@intrinsic
def store_release(typingctx: Any, arr: Any, idx: Any, val: Any) -> Any:
    """``arr[idx] = val`` (an int64 array) with release ordering."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        value = context.cast(builder, args[2], signature.args[2], types.int64)
        builder.store_atomic(value, _cell(context, builder, signature, args), ordering="release", align=8)
        return context.get_dummy_value()

    return types.void(arr, idx, val), codegen


@intrinsic
def claim(typingctx: Any, arr: Any, idx: Any, val: Any) -> Any:
    """Set ``arr[idx]`` (an int64 array) to ``val`` unless it already holds it, atomically:
    True for the one thread whose compare-exchange made it ``val`` (the cell's owner for that
    value), False for any other. Values written to a cell must only grow, so a stale read
    can only lose."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        cell = _cell(context, builder, signature, args)
        value = context.cast(builder, args[2], signature.args[2], types.int64)
        seen = builder.load_atomic(cell, ordering="acquire", align=8)
        won = cgutils.alloca_once_value(builder, ir.Constant(ir.IntType(1), 0))
        with builder.if_then(builder.icmp_signed("<", seen, value)):
            pair = builder.cmpxchg(cell, seen, value, "acq_rel", "acquire")
            builder.store(builder.extract_value(pair, 1), won)
        return builder.load(won)

    return types.boolean(arr, idx, val), codegen


@intrinsic
def cycles(typingctx: Any) -> Any:
    """The CPU's cycle counter (``llvm.readcyclecounter``: rdtsc on x86): a clock for spin
    budgets that costs no system call."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(64), []),
                                            "llvm.readcyclecounter")
        return builder.call(fn, [])

    return types.int64(), codegen


@intrinsic
def yield_cpu(typingctx: Any) -> Any:
    """``sched_yield()``: a spinning thread gives its core to any runnable thread there."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []), "sched_yield")
        builder.call(fn, [])
        return context.get_dummy_value()

    return types.void(), codegen



@intrinsic
def pause_cpu(typingctx: Any) -> Any:
    """The x86 ``pause`` hint: a spin-wait turn that lends the core's execution units to its
    other hardware thread (no system call)."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
        builder.call(fn, [])
        return context.get_dummy_value()

    return types.void(), codegen
