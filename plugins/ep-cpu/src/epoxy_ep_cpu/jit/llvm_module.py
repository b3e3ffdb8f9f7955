"""Kernels written as LLVM IR text, compiled by llvmlite (numba's own code generator) for this
CPU: the int8 GEMM (``kernels_int8_gemm``) and the float32 few-rows GEMM (``kernels_sgemm``).

One place probes the host (llvmlite importable, a native target, the CPU features a kernel
needs) and turns IR text into ctypes functions, which release the GIL while they run. The
compiled code lives as long as its execution engine, which is kept with the functions; its
object code is kept beside numba's cached kernels, so a later process loads it without
generating, parsing or compiling the IR.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


@functools.cache
def _host_features() -> dict[str, bool] | str:
    """This CPU's features as llvmlite names them, or why they cannot be had."""
    try:
        import llvmlite.binding as llvm
    except Exception as exc:  # noqa: BLE001 - an ImportError or a broken llvmlite
        return f"llvmlite cannot be imported: {type(exc).__name__}: {exc}"
    try:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        return dict(llvm.get_host_cpu_features())
    except Exception as exc:  # noqa: BLE001 - no native target
        return f"llvmlite has no native target: {type(exc).__name__}: {exc}"


#: what the float32 GEMM modules need (``sgemm_ir`` and the drivers built on its tiles: the
#: few-rows GEMM, the row-gathered and pointwise convolutions): AVX2 with FMA. On AVX-512 their
#: register tile is wider (``sgemm_ir.tile_shape``); the implicit-GEMM and small-layer
#: convolutions, tuned for AVX-512's 32 registers, keep requiring it (``AVX512``).
FLOAT_GEMM_FEATURES = ("avx2", "fma")
AVX512 = ("avx512f",)


def avx512() -> bool:
    """Whether this CPU has AVX-512: the tiles and routes tuned on it read this, and AVX2 CPUs
    take their own (``sgemm_ir.tile_shape``, ``position_gemm_ir.shapes``, the pool and
    two-thread rules). Probed once per process."""
    return missing(AVX512) is None


def missing(required: Sequence[str]) -> str | None:
    """None when llvmlite can compile for this CPU and it has every ``required`` feature, else
    why not. Probed once per process; compiles nothing."""
    features = _host_features()
    if isinstance(features, str):
        return features
    lacking = [f for f in required if not features.get(f)]
    return f"this CPU lacks {', '.join(lacking)}" if lacking else None


@functools.cache
def _host_cpu() -> tuple[str, str]:
    """(this CPU's name, its features) as LLVM names them: what every module is built for."""
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def _target_machine() -> tuple[Any, str, str]:
    """(a target machine at -O3 for this CPU, its name, its features); a new machine each time:
    an execution engine takes ownership of the one it is made with."""
    import llvmlite.binding as llvm

    cpu, features = _host_cpu()
    return llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features=features, opt=3), cpu, features


def _functions(engine: Any, signatures: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
    functions: dict[str, Any] = {"engine": engine}
    for name, argtypes in signatures.items():
        functions[name] = ctypes.CFUNCTYPE(None, *argtypes)(engine.get_function_address(name))
    return functions


def compile_functions(ir_text: str, signatures: Mapping[str, Sequence[Any]],
                      cache_dir: Path | None = None, *, object_path: Path | None = None) -> dict[str, Any]:
    """The functions ``signatures`` names (entry point -> ctypes argument types, returning
    nothing) of the module ``ir_text``, compiled at -O3 for this CPU; the engine that owns
    their code is kept under the key ``"engine"``.

    With ``cache_dir`` the object code is kept there, keyed by the IR, the CPU and llvmlite's
    version: a later process loads it rather than compiling (0.2-0.3 s for the GEMM modules,
    paid at a model's first run); ``object_path`` names the file instead (a key the caller
    can compute without the IR: :class:`LazyModule`). A cache that cannot be read or written
    is passed over."""
    import llvmlite
    import llvmlite.binding as llvm

    machine, cpu, features = _target_machine()
    module = llvm.parse_assembly(ir_text)
    module.verify()
    engine = llvm.create_mcjit_compiler(module, machine)
    if object_path is None and cache_dir is not None:
        key = hashlib.blake2b("\0".join((ir_text, cpu, features, llvmlite.__version__)).encode(), digest_size=16)
        object_path = cache_dir / f"llvm-{key.hexdigest()}.o"
    if object_path is not None:
        _use_object_cache(engine, object_path)
    engine.finalize_object()
    return _functions(engine, signatures)


def load_functions(object_path: Path, signatures: Mapping[str, Sequence[Any]]) -> dict[str, Any] | None:
    """:func:`compile_functions`' result from object code kept at ``object_path``, with no IR
    generated, parsed or verified (~45 ms and ~10 MB of a process's first run for the four
    convolution modules); None when the file is missing or is not object code. The folder is
    trusted as numba's own cache is: a file there was written for this module."""
    import llvmlite.binding as llvm

    code = _object_code(object_path)
    if code is None:
        return None
    # an empty module whose "compiled" code MCJIT takes from the object cache: the load path a
    # cache hit of compile_functions takes (llvmlite copies the buffer it is handed)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _target_machine()[0])
    engine.set_object_cache(lambda _module, _code: None, lambda _module: code)
    engine.finalize_object()
    if any(not engine.get_function_address(name) for name in signatures):
        return None
    return _functions(engine, signatures)


class LazyModule:
    """An IR module's functions, compiled at the first request in a process (once, under a
    lock; its object code kept in ``cache_dir()`` and loaded from there by later processes
    without generating the IR: :meth:`object_path`).

    Why one class: each LLVM-IR kernel (the float32 GEMM, the small-layer product) is compiled
    on first use, never at import, and must not be compiled twice by two threads at once."""

    def __init__(self, what: str, required: Sequence[str], ir_text: Callable[[], str],
                 signatures: Mapping[str, Sequence[Any]], cache_dir: Callable[[], Path | None]) -> None:
        self._what, self._required, self._ir_text = what, tuple(required), ir_text
        self._signatures, self._cache_dir = dict(signatures), cache_dir
        self._functions: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def object_path(self, cache_dir: Path) -> Path:
        """Where this module's object code is kept: named by what it is (its description and
        generator), the jit tier's sources digest (the IR is generated by them alone, for the
        CPU's features), the CPU and llvmlite's version, so the file is found without the IR."""
        import llvmlite

        from .config import installed_sources_digest

        cpu, features = _host_cpu()
        generator = f"{getattr(self._ir_text, '__module__', '')}.{getattr(self._ir_text, '__qualname__', '')}"
        parts = (self._what, generator, installed_sources_digest(), cpu, features, llvmlite.__version__)
        return cache_dir / f"llvm-{hashlib.blake2b(chr(0).join(parts).encode(), digest_size=16).hexdigest()}.o"

    def _build(self) -> dict[str, Any]:
        cache_dir = self._cache_dir()
        path = None if cache_dir is None else self.object_path(cache_dir)
        loaded = None if path is None else load_functions(path, self._signatures)
        if loaded is not None:
            return loaded
        return compile_functions(self._ir_text(), self._signatures, object_path=path)

    def function(self, name: str) -> Any:
        """The ctypes function ``name`` (a RuntimeError saying why when this CPU cannot run it)."""
        functions = self._functions
        if functions is None:
            reason = missing(self._required)
            if reason is not None:
                raise RuntimeError(f"{self._what} cannot run here: {reason}")
            with self._lock:
                if self._functions is None:
                    self._functions = self._build()
                functions = self._functions
        return functions[name]

    def address(self, name: str) -> int:
        """Function ``name``'s address, for compiled callers (the engine that owns the code is
        kept with the functions, for the process)."""
        return int(ctypes.cast(self.function(name), ctypes.c_void_p).value or 0)


#: the first bytes of the object files MCJIT writes (ELF; Mach-O 64-bit; COFF for x86-64)
_OBJECT_MAGIC = (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\x64\x86\x00\x00")


def _object_code(path: Path) -> bytes | None:
    """The object code kept at ``path``; None when there is none (anything else is compiled again)."""
    try:
        code = path.read_bytes()
    except OSError:
        return None
    return code if code[:4] in _OBJECT_MAGIC else None


def _use_object_cache(engine: Any, path: Path) -> None:
    """Load ``engine``'s object code from ``path`` when it is there, else save it there once
    compiled (to a temporary name, then renamed: two processes compiling at once both leave a
    whole file)."""

    def load(_module: Any) -> bytes | None:
        return _object_code(path)

    def save(_module: Any, code: bytes) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name, delete=False) as handle:
                handle.write(code)
            os.replace(handle.name, path)
        except OSError:
            pass

    engine.set_object_cache(save, load)
