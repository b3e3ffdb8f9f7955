"""Environment variables that change what epoxy does, and which of them are set.

The list is what the core and the bundled plugins read (``os.environ`` / ``getenv``), plus
the threading and JIT settings of the libraries they run on. Any other set variable with an
epoxy prefix is reported too, marked unknown: a misspelled ``EPOXY_`` name is a classic bug."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

#: variable -> what it changes
KNOWN: dict[str, str] = {
    "EPOXY_PROVIDERS": "allowlist of providers whose plugins load",
    "EPOXY_DISABLE_PLUGIN_AUTOLOAD": "do not load provider plugins from entry points",
    "EPOXY_STRICT_PLUGINS": "a plugin that fails to load raises instead of being listed",
    "EPOXY_DEVICE_TIMEOUT": "seconds a provider's devices() may take",
    "EPOXY_CHECK_OUTPUTS": "check every kernel output (dtype, shape, NaN/Inf)",
    "EPOXY_STRAIGHT_LINE": "generated straight-line executor (0 off, always)",
    "EPOXY_COMPILE_KEY": "key file signing compiled models",
    "EPOXY_SESSION_CACHE_DIR": "session cache folder for models loaded from files (prepared once, then reused)",
    "EPOXY_EAGER_SYMPY": "import sympy with onnx_ir instead of at its first use (1: eager)",
    "EPOXY_TUNE_CACHE_DIR": "where max_performance keeps its provider decisions",
    "EPOXY_CPU_JIT": "cpu provider: numba-compiled kernels on/off",
    "EPOXY_CPU_JIT_CACHE_DIR": "cpu provider: where numba caches compiled kernels",
    "EPOXY_CPU_JIT_FULL_REFRESH": "cpu provider: 1 loads cached kernels after numba's full target refresh",
    "EPOXY_CPU_NATIVE_POOL": "cpu provider: its own spinning helper threads on several threads (0: OpenBLAS's)",
    "EPOXY_CPU_SPIN_PAUSES": "cpu provider: pause hints a turn of its helpers' wait (0: sched_yield every turn)",
    "EPOXY_CPU_FUSE_ELEMENTWISE": "cpu provider: fuse elementwise chains on/off",
    "EPOXY_CPU_HEAP_ARRAYS": "cpu provider: keep freed multi-MB arrays in glibc's heap for the next run",
    "EPOXY_OPENVINO_MIN_GROUP_COST": "openvino provider: smallest group it claims",
    "EPOXY_CUDA_CACHE_DIR": "cuda provider: NVRTC kernel cache",
    "EPOXY_COREML_CACHE_DIR": "coreml provider: compiled model cache",
    "OPENBLAS_NUM_THREADS": "OpenBLAS threads (numpy GEMMs of the cpu provider)",
    "OPENBLAS_CORETYPE": "pins OpenBLAS's kernel architecture (may select AVX2 on AVX-512)",
    "OPENBLAS_VERBOSE": "OpenBLAS prints the kernel it picked",
    "MKL_NUM_THREADS": "MKL threads",
    "MKL_ENABLE_INSTRUCTIONS": "caps MKL's instruction set",
    "OMP_NUM_THREADS": "OpenMP threads (BLAS, numba's omp layer, onnxruntime)",
    "OMP_WAIT_POLICY": "whether idle OpenMP threads spin",
    "NUMBA_NUM_THREADS": "size of numba's pool (caps cpu provider jit_threads)",
    "NUMBA_THREADING_LAYER": "numba's threading layer (tbb, omp, workqueue)",
    "NUMBA_CACHE_DIR": "numba's cache directory",
    "NUMBA_DISABLE_JIT": "runs numba kernels as Python (very slow)",
    "NUMBA_OPT": "numba's LLVM optimization level",
    "NUMBA_CPU_NAME": "the CPU numba compiles for",
    "NUMBA_CPU_FEATURES": "the CPU features numba compiles for",
    "NO_COLOR": "plain CLI output",
}

#: prefixes whose set variables are listed even when unknown
PREFIXES = ("EPOXY_", "OPENBLAS_", "OMP_", "NUMBA_", "MKL_")


def environment(env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The set variables that matter: name, value, what it changes (None when epoxy does
    not know the name), sorted by name."""
    source = os.environ if env is None else env
    names = {n for n in source if n in KNOWN or n.startswith(PREFIXES)}
    return [{"name": n, "value": source[n], "effect": KNOWN.get(n)} for n in sorted(names)]
