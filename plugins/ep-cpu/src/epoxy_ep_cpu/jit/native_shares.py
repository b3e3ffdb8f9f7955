"""Shares the :mod:`.native_pool` helpers can call: ``void share(int64 argv, int64 first, int64 last)``.

Why C functions: a helper that runs a share must not take the GIL (a thread waiting for it
halts its vCPU here, and waking it costs more than the share; native_pool's doc). So each
kind of share is a numba ``cfunc`` that reads its arguments from an int64 array:

- :func:`kernel_share`: a ``nogil`` numba kernel ``kernel(*args, first, last)`` whose array
  arguments are C-contiguous: the adapter (generated once per kernel and argument types)
  rebuilds the arrays from their addresses and shapes and calls the kernel;
- :func:`matmul_share`: float32 products ``C = A @ B`` (one, or a stack) through OpenBLAS's
  ``cblas_sgemm``, whose address the arguments carry: a share is a range of the stack's
  products, or of 16-column blocks of each product.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from llvmlite import ir
from numba import carray, cfunc, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
from .llvm_module import avx512

_SIGNATURE = types.void(types.int64, types.int64, types.int64)
#: rows or columns a share of a split product is rounded to (whole vectors and cache lines)
COLUMN_BLOCK = 16


def _pointer_intrinsic(dtype: Any) -> Any:
    @intrinsic
    def at(typingctx: Any, address: Any) -> Any:
        pointer = types.CPointer(dtype)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return builder.inttoptr(args[0], context.get_value_type(pointer))

        return pointer(types.int64), codegen

    return at


_POINTERS = {np.dtype(np.float32): _pointer_intrinsic(types.float32),
             np.dtype(np.float64): _pointer_intrinsic(types.float64),
             np.dtype(np.int64): _pointer_intrinsic(types.int64),
             np.dtype(np.int32): _pointer_intrinsic(types.int32),
             np.dtype(np.uint8): _pointer_intrinsic(types.uint8),
             np.dtype(np.int8): _pointer_intrinsic(types.int8)}
float32_at, float64_at, int64_at, int32_at, uint8_at, int8_at = _POINTERS.values()
i64_at, f64_at, f32_at = int64_at, float64_at, float32_at


def _call_by_address(args: tuple[Any, ...]) -> Any:
    """The typing of ``fn(a1, ...)`` for the C function at address ``fn`` taking 64-bit
    integers and pointers (passed as integers: the same registers and stack slots on x86-64):
    the LLVM-IR kernels (``sgemm_ir``) called from shares."""
    if not all(isinstance(a, types.Integer) for a in args):
        return None

    def codegen(context: Any, builder: Any, signature: Any, values: Any) -> Any:
        i64 = ir.IntType(64)
        ints = [context.cast(builder, v, t, types.int64) for v, t in zip(values, signature.args)]
        fnty = ir.FunctionType(ir.VoidType(), [i64] * (len(ints) - 1))
        builder.call(builder.inttoptr(ints[0], fnty.as_pointer()), ints[1:])
        return context.get_dummy_value()

    return types.void(*args), codegen


@intrinsic
def call_address14(typingctx: Any, fn: Any, a1: Any, a2: Any, a3: Any, a4: Any, a5: Any, a6: Any, a7: Any, a8: Any,
                   a9: Any, a10: Any, a11: Any, a12: Any, a13: Any, a14: Any) -> Any:
    """``fn(a1, ..., a14)``: ``pgemm`` (``kernels_pointwise``), see :func:`_call_by_address`."""
    return _call_by_address((fn, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14))


@intrinsic
def call_address13(typingctx: Any, fn: Any, a1: Any, a2: Any, a3: Any, a4: Any, a5: Any, a6: Any, a7: Any, a8: Any,
                   a9: Any, a10: Any, a11: Any, a12: Any, a13: Any) -> Any:
    """``fn(a1, ..., a13)``: ``igemm`` (``kernels_conv_implicit``), see :func:`_call_by_address`."""
    return _call_by_address((fn, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13))


@intrinsic
def call_address12(typingctx: Any, fn: Any, a1: Any, a2: Any, a3: Any, a4: Any, a5: Any, a6: Any, a7: Any, a8: Any,
                   a9: Any, a10: Any, a11: Any, a12: Any) -> Any:
    """``fn(a1, ..., a12)``: ``cgemm`` (``kernels_conv_rows``), see :func:`_call_by_address`."""
    return _call_by_address((fn, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12))


@intrinsic
def call_address11(typingctx: Any, fn: Any, a1: Any, a2: Any, a3: Any, a4: Any, a5: Any, a6: Any, a7: Any, a8: Any,
                   a9: Any, a10: Any, a11: Any) -> Any:
    """``fn(a1, ..., a11)``: ``sgemm`` (``kernels_sgemm``), see :func:`_call_by_address`."""
    return _call_by_address((fn, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11))


@intrinsic
def _sgemm(typingctx: Any, fn: Any, transb: Any, m: Any, n: Any, k: Any, a: Any, lda: Any, b: Any, ldb: Any, c: Any,
           ldc: Any) -> Any:
    """``cblas_sgemm(RowMajor, NoTrans, transb, m, n, k, 1, a, lda, b, ldb, 0, c, ldc)`` through
    the address ``fn`` (64-bit integers: numpy's OpenBLAS is an ILP64 build; ``transb`` 111
    or 112, CBLAS's NoTrans / Trans)."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i32, i64, f32, ptr = ir.IntType(32), ir.IntType(64), ir.FloatType(), ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, f32, ptr, i64, ptr, i64, f32, ptr, i64])
        target = builder.inttoptr(args[0], fnty.as_pointer())
        one, zero = ir.Constant(f32, 1.0), ir.Constant(f32, 0.0)
        builder.call(target, [ir.Constant(i32, 101), ir.Constant(i32, 111), builder.trunc(args[1], i32), args[2],
                              args[3], args[4], one, builder.inttoptr(args[5], ptr), args[6],
                              builder.inttoptr(args[7], ptr), args[8], zero, builder.inttoptr(args[9], ptr), args[10]])
        return context.get_dummy_value()

    return types.void(*([types.int64] * 11)), codegen


@intrinsic
def _sgemv(typingctx: Any, fn: Any, trans: Any, m: Any, n: Any, a: Any, lda: Any, x: Any, y: Any) -> Any:
    """``cblas_sgemv(RowMajor, trans, m, n, 1, a, lda, x, 1, 0, y, 1)`` through the address
    ``fn`` (ILP64; ``trans`` 111 or 112)."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i32, i64, f32, ptr = ir.IntType(32), ir.IntType(64), ir.FloatType(), ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i64, i64, f32, ptr, i64, ptr, i64, f32, ptr, i64])
        target = builder.inttoptr(args[0], fnty.as_pointer())
        one, zero, step = ir.Constant(f32, 1.0), ir.Constant(f32, 0.0), ir.Constant(i64, 1)
        builder.call(target, [ir.Constant(i32, 101), builder.trunc(args[1], i32), args[2], args[3], one,
                              builder.inttoptr(args[4], ptr), args[5], builder.inttoptr(args[6], ptr), step, zero,
                              builder.inttoptr(args[7], ptr), step])
        return context.get_dummy_value()

    return types.void(*([types.int64] * 8)), codegen


# argv of a product share: sgemm, stack depth, m, n, k, a, a's stack step, lda, b, b's step,
# ldb, c, c's step, ldc (steps and leading dimensions in elements), the split: by products of
# the stack (0), by column blocks (1) or by row blocks (2) of every product, or one row times a
# matrix by column blocks on sgemv (3: OpenBLAS's sgemm is 2x slower than its sgemv there);
# b transposed (1: a 2-D b that is the transpose of a C-contiguous matrix, as a Gemm with
# transB reads it); sgemv
_BY_STACK, _BY_COLUMNS, _BY_ROWS, _VECTOR = 0, 1, 2, 3
_ARGV = 17


def _matmul_share(argp, first, last):  # pragma: no cover - compiled (share_address)
    v = carray(i64_at(argp), (17,))
    fn, depth, m, n, k = v[0], v[1], v[2], v[3], v[4]
    tb = 112 if v[15] else 111
    if v[14] == 3:  # y[lo:hi] = x @ b[:, lo:hi]: rows lo..hi of the matrix b transposes, or b's columns
        lo = first * 16
        hi = min(last * 16, n)
        if lo < hi:
            if v[15]:
                _sgemv(v[16], 111, hi - lo, k, v[8] + 4 * lo * v[10], v[10], v[5], v[11] + 4 * lo)
            else:
                _sgemv(v[16], 112, k, hi - lo, v[8] + 4 * lo, v[10], v[5], v[11] + 4 * lo)
        return
    a, sa, lda, b, sb, ldb, c, sc, ldc = v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13]
    if v[14] == 0:
        for i in range(first, last):
            _sgemm(fn, tb, m, n, k, a + 4 * i * sa, lda, b + 4 * i * sb, ldb, c + 4 * i * sc, ldc)
        return
    lo = first * 16
    hi = min(last * 16, n if v[14] == 1 else m)
    if lo >= hi:
        return
    for i in range(depth):
        if v[14] == 1:  # columns lo..hi of b: rows of the matrix a transposed b is
            first_b = lo * ldb if v[15] else lo
            _sgemm(fn, tb, m, hi - lo, k, a + 4 * i * sa, lda, b + 4 * (i * sb + first_b), ldb, c + 4 * (i * sc + lo),
                   ldc)
        else:
            _sgemm(fn, tb, hi - lo, n, k, a + 4 * (i * sa + lo * lda), lda, b + 4 * i * sb, ldb,
                   c + 4 * (i * sc + lo * ldc), ldc)


@njit(cache=True, nogil=True)
def repoint(v, a, b, out):  # pragma: no cover - compiled
    """A prepared product's argv pointed at these operands (shaped and strided as prepared)."""
    v[5] = a.ctypes.data
    v[8] = b.ctypes.data
    v[11] = out.ctypes.data


#: inner dimension below which a product is not split: on AVX-512 it is bound by memory, not
#: arithmetic (64x16 @ 16x3025 took longer in two shares than whole; so did OpenBLAS's two
#: threads). On an AVX2 CPU (OpenBLAS's Haswell kernels) such products split well: two shares
#: / one, us, 64x16 @ 16x3025 157-193 / 273, 64x27 @ 27x12321 (squeezenet's stem) 638-665 /
#: 1165-1234, 64x4 @ 4x12321 241 / 338; 16x8 @ 8x3025 even (bench/README, session 43)
MIN_SPLIT_DEPTH = 32 if avx512() else 4


def _cblas_sgemm() -> int | None:
    """The address of numpy's OpenBLAS ``cblas_sgemm`` (ILP64 build), or None."""
    return _cblas("sgemm")


@functools.cache
def _cblas(name: str) -> int | None:
    """The address of numpy's OpenBLAS ``cblas_<name>`` (ILP64 build), or None."""
    try:
        from threadpoolctl import ThreadpoolController

        for lib in ThreadpoolController().lib_controllers:
            if lib.internal_api != "openblas":
                continue
            prefix, suffix = getattr(lib, "_symbol_prefix", ""), getattr(lib, "_symbol_suffix", "")
            if not suffix.startswith("64"):  # a 32-bit-integer build: the share's signature differs
                return None
            return ctypes.cast(getattr(lib.dynlib, f"{prefix}cblas_{name}{suffix}"), ctypes.c_void_p).value
    except Exception:  # noqa: BLE001 - no OpenBLAS, or one without the symbol
        return None
    return None


def _stack(x: np.ndarray, depth: int) -> tuple[np.ndarray, int] | None:
    """``x`` as (a view of) its 2-D products and the step between them in elements, for a
    stack of ``depth`` products (a 2-D ``x`` is broadcast: step 0); None if not BLAS-ready."""
    if x.dtype != np.float32 or x.strides[-1] != 4 or x.strides[-2] % 4:
        return None
    if x.ndim == 2:
        return x, 0
    outer = x.reshape(-1, *x.shape[-2:]) if x.flags.c_contiguous else None
    if outer is None or outer.shape[0] not in (1, depth):
        return None
    return outer[0], (outer.strides[0] // 4 if outer.shape[0] == depth else 0)


def matmul_argv(a: np.ndarray, b: np.ndarray, out: np.ndarray, count: int) -> tuple[np.ndarray, int] | None:
    """(argv, share units) for ``out = a @ b`` split in ``count`` shares by
    :func:`matmul_share`, or None when the operands are not float32 BLAS-ready stacks
    (C-contiguous outer dimensions) or OpenBLAS's sgemm is not found."""
    fn = _cblas_sgemm()
    if fn is None or out.dtype != np.float32 or not out.flags.c_contiguous:
        return None
    depth = int(np.prod(out.shape[:-2])) if out.ndim > 2 else 1
    transposed = b.ndim == 2 and b.dtype == np.float32 and b.strides[0] == 4 and b.strides[1] % 4 == 0 \
        and b.shape[0] > 1 and not b.flags.c_contiguous
    parts = [_stack(a, depth), (b, 0) if transposed else _stack(b, depth), _stack(out, depth)]
    if any(p is None for p in parts):
        return None
    (a2, sa), (b2, sb), (c2, sc) = parts  # type: ignore[misc]
    m, k = a2.shape
    n = b2.shape[1]
    ldb = b2.strides[1] // 4 if transposed else b2.strides[0] // 4
    if k < MIN_SPLIT_DEPTH:
        return None
    split = _BY_STACK if depth >= count else (_BY_ROWS if m >= n else _BY_COLUMNS)
    if split == _BY_COLUMNS and depth == 1 and m == 1:
        split = _VECTOR
    argv = np.array([fn, depth, m, n, k, a2.ctypes.data, sa, a2.strides[0] // 4, b2.ctypes.data, sb,
                     ldb, c2.ctypes.data, sc, c2.strides[0] // 4, split, int(transposed), _cblas("sgemv")],
                    np.int64)
    units = depth if split == _BY_STACK else -(-(m if split == _BY_ROWS else n) // COLUMN_BLOCK)
    return argv, units


def matmul_available() -> bool:
    """Whether numpy's OpenBLAS sgemm can be called from a share here."""
    return _cblas_sgemm() is not None and _cblas("sgemv") is not None


@functools.cache
def matmul_share() -> int:
    """The address of the product share (:func:`matmul_argv` packs its arguments)."""
    return share_address(_matmul_share)


_compiled: dict[Any, Any] = {}
_adapters_lock = threading.Lock()


def share_address(py_func: Any) -> int:
    """The address of ``py_func`` (a module-level share written for this signature) compiled
    as a ``cfunc``: once per process, from numba's disk cache when warm, never at import."""
    compiled = _compiled.get(py_func)
    if compiled is None:
        with _adapters_lock:
            compiled = _compiled.get(py_func)
            if compiled is None:
                compiled = _compiled[py_func] = cfunc(_SIGNATURE, nopython=True, cache=True)(py_func)
    return int(compiled.address)


@intrinsic
def call_compiled(typingctx: Any, address: Any, args: Any) -> Any:
    """Call the numba-compiled function at ``address`` (numba's own calling convention, the
    overload for exactly these argument types, returning None) with the tuple ``args``.

    Why not call the dispatcher: a compiled caller links the callee's code into its own and
    optimizes it again (a share's adapter then cost as much to compile cold as its kernel,
    5-12 s a model); through the address the adapter compiles in milliseconds."""
    if not isinstance(address, types.Integer) or not isinstance(args, types.BaseTuple):
        return None
    argtys = tuple(args.types)

    def codegen(context: Any, builder: Any, signature: Any, values: Any) -> Any:
        call_conv = context.call_conv
        fnty = call_conv.get_function_type(types.none, argtys)
        target = builder.inttoptr(context.cast(builder, values[0], signature.args[0], types.int64),
                                  fnty.as_pointer())
        items = [builder.extract_value(values[1], i) for i in range(len(argtys))]
        retty = call_conv.get_return_type(types.none).pointee
        retval = cgutils.alloca_once(builder, retty)
        builder.store(cgutils.get_null_value(retty), retval)
        excinfo = cgutils.alloca_once(builder, fnty.args[1].pointee, name="excinfo")
        packed = list(call_conv._get_arg_packer(argtys).as_arguments(builder, items))
        builder.call(target, [retval, excinfo, *packed])
        return context.get_dummy_value()

    return types.void(address, args), codegen


def compiled_address(kernel: Any, args: Sequence[Any]) -> int:
    """The address of ``kernel``'s compiled overload for ``(*args, first, last)`` (compiled,
    or loaded from numba's cache, now): what :func:`call_compiled` calls."""
    from .direct import argument_types

    sig = argument_types(args) + (types.int64, types.int64)
    kernel.compile(sig)
    cres = kernel.overloads[sig]
    return int(cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name))


# -- numba kernels ------------------------------------------------------------------------------
_adapters: dict[tuple[Any, ...], tuple[int, Callable[..., None], int]] = {}


def _slot_kind(value: Any) -> tuple[str, Any]:
    """How one kernel argument travels in argv: ('array', (dtype, ndim)), 'bool', 'int' or
    ('float', dtype)."""
    if isinstance(value, np.ndarray):
        if not value.flags.c_contiguous or value.dtype not in _POINTERS:
            raise TypeError("arrays must be C-contiguous with a supported dtype")
        return "array", (value.dtype.name, value.ndim)
    if isinstance(value, (bool, np.bool_)):
        return "bool", None
    if isinstance(value, (int, np.integer)):
        return "int", None
    if isinstance(value, (float, np.floating)):
        return "float", np.dtype(type(value)).name if isinstance(value, np.floating) else "float64"
    raise TypeError(f"argument of type {type(value).__name__} cannot be packed")


def _module_source(kinds: Sequence[tuple[str, Any]]) -> tuple[str, int]:
    """A module with ``adapter`` (the share: it calls the kernel whose compiled address argv's
    last slot holds) and ``pack(v, address, *args)`` (compiled: writes argv) for arguments of
    these kinds; argv's length."""
    unpack, pack, names, slot = [], [], [], 0
    for i, (kind, info) in enumerate(kinds):
        name = f"a{i}"
        names.append(name)
        if kind == "array":
            dtype, ndim = info
            shape = ", ".join(f"v[{slot + 1 + d}]" for d in range(ndim))
            unpack.append(f"    {name} = carray({dtype}_at(v[{slot}]), ({shape},))")
            pack.append(f"    v[{slot}] = {name}.ctypes.data")
            pack += [f"    v[{slot + 1 + d}] = {name}.shape[{d}]" for d in range(ndim)]
            slot += 1 + ndim
        elif kind == "float":
            unpack.append(f"    {name} = np.{info}(f[{slot}])")
            pack.append(f"    f[{slot}] = {name}")
            slot += 1
        else:
            unpack.append(f"    {name} = v[{slot}] != 0" if kind == "bool" else f"    {name} = v[{slot}]")
            pack.append(f"    v[{slot}] = {name}")
            slot += 1
    length = slot + 1  # the last slot: the kernel's compiled address (compiled_address)
    lines = [
        '"""Generated by epoxy_ep_cpu.jit.native_shares: a native-pool share calling a compiled kernel."""',
        "import numpy as np",
        "from numba import carray, njit",
        "from epoxy_ep_cpu.jit.native_shares import "
        + ", ".join(sorted({"call_compiled", "f64_at", "i64_at",
                            *(f"{info[0]}_at" for kind, info in kinds if kind == "array")})),
        "",
        "",
        "def adapter(argp, first, last):",
        f"    v = carray(i64_at(argp), ({length},))",
        f"    f = carray(f64_at(argp), ({length},))",
        *unpack,
        f"    call_compiled(v[{slot}], ({', '.join([*names, 'first', 'last'])},))",
        "",
        "",
        "@njit(cache=True, nogil=True)",
        f"def pack(v, address, {', '.join(names)}):",
        "    f = v.view(np.float64)",
        *pack,
        f"    v[{slot}] = address",
        "",
    ]
    return "\n".join(lines), length


def _load_module(source: str) -> Any:
    """The generated module ``source``, written once under the kernel cache folder (named by
    its digest and the tier's sources, so an edited kernel never meets an old share) and
    imported from there, so numba's disk cache keeps its compiled functions."""
    import hashlib
    import importlib.util
    import os
    import sys
    from pathlib import Path

    from .config import compiled_code_dir, installed_sources_digest

    digest = hashlib.sha256(f"{installed_sources_digest()}\n{source}".encode()).hexdigest()[:16]
    name = f"epoxy_share_{digest}"
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    folder = Path(compiled_code_dir()) / "shares"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    if not path.exists():
        partial = folder / f".{name}.{os.getpid()}.{threading.get_ident()}"
        partial.write_text(source)
        os.replace(partial, path)  # two processes write the same text: either one wins
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    sys.modules[name] = module
    return module


def kernel_share(kernel: Any, args: Sequence[Any]) -> tuple[int, Callable[..., None], int] | None:
    """(address of a share calling ``kernel(*args, first, last)``, ``pack(argv, *args)``
    writing such arguments into argv, argv's length); None when an argument cannot travel (a
    strided array, an object). One adapter module per argument kinds, compiled once (or loaded
    from numba's cache); the kernel is called through its compiled overload's address."""
    try:
        kinds = tuple(_slot_kind(a) for a in args)
    except TypeError:
        return None
    key = (kernel, kinds)
    made = _adapters.get(key)
    if made is not None:
        return made
    with _adapters_lock:
        made = _adapters.get(key)
        if made is None:
            from . import direct

            adapter = _by_kinds.get(kinds)
            if adapter is None:
                source, length = _module_source(kinds)
                module = _load_module(source)
                compiled = cfunc(_SIGNATURE, nopython=True, cache=True)(module.adapter)
                _keep.append(compiled)
                pack = direct.overload(module.pack, (np.zeros(length, np.int64), 0, *args))
                adapter = _by_kinds[kinds] = (int(compiled.address), pack, length)
            address, pack, length = adapter
            kernel_at = compiled_address(kernel, args)

            def pack_for_kernel(argv: np.ndarray, *values: Any, _pack: Any = pack, _at: int = kernel_at) -> None:
                _pack(argv, _at, *values)

            made = _adapters[key] = (address, pack_for_kernel, length)
    return made


_by_kinds: dict[tuple[Any, ...], tuple[int, Callable[..., None], int]] = {}
_keep: list[Any] = []  # the compiled adapters (their code lives as long as these objects)
