"""Kernels written as LLVM IR text, compiled by llvmlite (numba's own code generator) for this
CPU: the int8 GEMM (``kernels_int8_gemm``) and the float32 few-rows GEMM (``kernels_sgemm``).

One place probes the host (llvmlite importable, a native target, the CPU features a kernel
needs) and turns IR text into ctypes functions, which release the GIL while they run. The
compiled code lives as long as its execution engine, which is kept with the functions; its
object code is kept beside numba's cached kernels, so a later process skips the compile.
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


def compile_functions(ir_text: str, signatures: Mapping[str, Sequence[Any]],
                      cache_dir: Path | None = None) -> dict[str, Any]:
    """The functions ``signatures`` names (entry point -> ctypes argument types, returning
    nothing) of the module ``ir_text``, compiled at -O3 for this CPU; the engine that owns
    their code is kept under the key ``"engine"``.

    With ``cache_dir`` the object code is kept there, keyed by the IR, the CPU and llvmlite's
    version: a later process loads it rather than compiling (0.2-0.3 s for the GEMM modules,
    paid at a model's first run). A cache that cannot be read or written is passed over."""
    import llvmlite
    import llvmlite.binding as llvm

    target = llvm.Target.from_default_triple()
    cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    machine = target.create_target_machine(cpu=cpu, features=features, opt=3)
    module = llvm.parse_assembly(ir_text)
    module.verify()
    engine = llvm.create_mcjit_compiler(module, machine)
    if cache_dir is not None:
        key = hashlib.blake2b("\0".join((ir_text, cpu, features, llvmlite.__version__)).encode(), digest_size=16)
        _use_object_cache(engine, cache_dir / f"llvm-{key.hexdigest()}.o")
    engine.finalize_object()
    functions: dict[str, Any] = {"engine": engine}
    for name, argtypes in signatures.items():
        functions[name] = ctypes.CFUNCTYPE(None, *argtypes)(engine.get_function_address(name))
    return functions


class LazyModule:
    """An IR module's functions, compiled at the first request in a process (once, under a
    lock; its object code cached by :func:`compile_functions` in ``cache_dir()``).

    Why one class: each LLVM-IR kernel (the float32 GEMM, the small-layer product) is compiled
    on first use, never at import, and must not be compiled twice by two threads at once."""

    def __init__(self, what: str, required: Sequence[str], ir_text: Callable[[], str],
                 signatures: Mapping[str, Sequence[Any]], cache_dir: Callable[[], Path | None]) -> None:
        self._what, self._required, self._ir_text = what, tuple(required), ir_text
        self._signatures, self._cache_dir = dict(signatures), cache_dir
        self._functions: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def function(self, name: str) -> Any:
        """The ctypes function ``name`` (a RuntimeError saying why when this CPU cannot run it)."""
        functions = self._functions
        if functions is None:
            reason = missing(self._required)
            if reason is not None:
                raise RuntimeError(f"{self._what} cannot run here: {reason}")
            with self._lock:
                if self._functions is None:
                    self._functions = compile_functions(self._ir_text(), self._signatures, self._cache_dir())
                functions = self._functions
        return functions[name]

    def address(self, name: str) -> int:
        """Function ``name``'s address, for compiled callers (the engine that owns the code is
        kept with the functions, for the process)."""
        return int(ctypes.cast(self.function(name), ctypes.c_void_p).value or 0)


#: the first bytes of the object files MCJIT writes (ELF; Mach-O 64-bit; COFF for x86-64)
_OBJECT_MAGIC = (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\x64\x86\x00\x00")


def _use_object_cache(engine: Any, path: Path) -> None:
    """Load ``engine``'s object code from ``path`` when it is there, else save it there once
    compiled (to a temporary name, then renamed: two processes compiling at once both leave a
    whole file)."""

    def load(_module: Any) -> bytes | None:
        try:
            code = path.read_bytes()
        except OSError:
            return None
        return code if code[:4] in _OBJECT_MAGIC else None  # anything else is compiled again

    def save(_module: Any, code: bytes) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name, delete=False) as handle:
                handle.write(code)
            os.replace(handle.name, path)
        except OSError:
            pass

    engine.set_object_cache(save, load)
