"""Kernels written as LLVM IR text, compiled by llvmlite (numba's own code generator) for this
CPU: the int8 GEMM (``kernels_int8_gemm``) and the float32 few-rows GEMM (``kernels_sgemm``).

One place probes the host (llvmlite importable, a native target, the CPU features a kernel
needs) and turns IR text into ctypes functions, which release the GIL while they run. The
compiled code lives as long as its execution engine, which is kept with the functions.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Mapping, Sequence
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


def missing(required: Sequence[str]) -> str | None:
    """None when llvmlite can compile for this CPU and it has every ``required`` feature, else
    why not. Probed once per process; compiles nothing."""
    features = _host_features()
    if isinstance(features, str):
        return features
    lacking = [f for f in required if not features.get(f)]
    return f"this CPU lacks {', '.join(lacking)}" if lacking else None


def compile_functions(ir_text: str, signatures: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
    """The functions ``signatures`` names (entry point -> ctypes argument types, returning
    nothing) of the module ``ir_text``, compiled at -O3 for this CPU; the engine that owns
    their code is kept under the key ``"engine"``."""
    import llvmlite.binding as llvm

    target = llvm.Target.from_default_triple()
    machine = target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                           features=llvm.get_host_cpu_features().flatten(), opt=3)
    module = llvm.parse_assembly(ir_text)
    module.verify()
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    functions: dict[str, Any] = {"engine": engine}
    for name, argtypes in signatures.items():
        functions[name] = ctypes.CFUNCTYPE(None, *argtypes)(engine.get_function_address(name))
    return functions
