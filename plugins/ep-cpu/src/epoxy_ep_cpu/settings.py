"""Provider options that change how kernels are built (not what they compute, beyond rounding).

Kernel factories take only the node; the options of the provider building them are set in a
context variable for the duration of each factory call (``building_with``), so two sessions
with different options never see each other's, and the hot path reads nothing.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from epoxy.kit.options import Option, OptionTable

#: ``conv_winograd`` values: which Winograd variants float convolutions may use
CONV_WINOGRAD = {
    # F(4x4, 3x3) for float32 layers where it is fastest, F(2x2, 3x3) elsewhere (default)
    "auto": ("F(4,3)", "F(2,3)"),
    # F(2x2, 3x3) only: rounding error ~1e-6 relative instead of ~1e-5
    "f23": ("F(2,3)",),
    # none: direct (im2col / row-shift) convolution, the summation order of a plain GEMM
    "off": (),
}

#: ``conv_algo_search`` values: how a convolution layer's path is chosen among those allowed
CONV_ALGO_SEARCH = {
    # fixed thresholds on the layer shape, measured on one machine: the same path, so the
    # same rounding, in every process (default)
    "heuristic": "heuristic",
    # time every allowed path once per layer shape and BLAS thread count (at session creation
    # for static shapes; cached for the process) and keep the fastest: faster where this
    # machine's BLAS differs from the one the thresholds were set on, but the choice (and so
    # the last bits of the outputs) can differ between processes
    "measure": "measure",
}

#: option name -> its allowed values
CHOICES: Mapping[str, Mapping[str, Any]] = {"conv_winograd": CONV_WINOGRAD, "conv_algo_search": CONV_ALGO_SEARCH}


@dataclass(frozen=True)
class CpuSettings:
    """The cpu provider's options, validated (:data:`TABLE` parses them)."""

    conv_winograd: str = "auto"
    conv_algo_search: str = "heuristic"
    #: run the compiled (numba) kernels where one handles the case; off, or numba missing: numpy
    jit: bool = True
    #: numba threads for this provider's jit kernels; 0: follow the BLAS pool (resolved by the
    #: provider at its first kernel build, see ``jit/threads.py``)
    jit_threads: int = 0
    #: fused elementwise groups compiled as one numba loop (jit on): off until a quiet machine
    #: shows a model-level gain (bench/README, Session 7)
    fuse_elementwise: bool = False
    #: keep freed multi-MB arrays in glibc's heap (process-wide, once: ``malloc_policy.py``)
    heap_arrays: bool = True

    @property
    def winograd_paths(self) -> tuple[str, ...]:
        return CONV_WINOGRAD[self.conv_winograd]

    @property
    def measure_conv_paths(self) -> bool:
        return self.conv_algo_search == "measure"


DEFAULT = CpuSettings()

#: The one table of options: ``create`` parses with it, ``CpuProviderFactory.options()``
#: shows ``TABLE.describe()`` (``epoxy providers``), so the two never disagree.
TABLE: OptionTable[CpuSettings] = OptionTable("cpu", [
    Option("conv_winograd", "enum", DEFAULT.conv_winograd, "Winograd for float 3x3 stride-1 Conv",
           choices=tuple(CONV_WINOGRAD),
           notes="auto: F(4x4,3x3) where fastest, else F(2x2,3x3); f23: F(2x2,3x3) only (~1e-6 relative "
                 "rounding instead of ~1e-5); off: direct im2col/GEMM"),
    Option("conv_algo_search", "enum", DEFAULT.conv_algo_search, "how a 2-D stride-1 Conv layer picks its path",
           choices=tuple(CONV_ALGO_SEARCH),
           notes="measure: time each allowed path once per layer shape and BLAS thread count, at session "
                 "creation for static shapes (cached per process; the choice, and so the outputs' last bits, "
                 "can differ between processes); heuristic: fixed shape thresholds, the same choice in every "
                 "process"),
    Option("jit", "bool", DEFAULT.jit, "compiled numba kernels for the ops that have one",
           aliases={"on": True, "off": False}, env="EPOXY_CPU_JIT",
           notes="LayerNormalization, RMSNormalization, BatchNormalization, Softmax/LogSoftmax, pools, "
                 "Erf/Gelu/Sigmoid, Where, Conv (direct, 1x1 and im2col GEMMs), on float32/float64; the "
                 "8-bit integer matrix products with constant weights on an AVX512-VNNI GEMM, and float32 "
                 "products of 2-32 rows with constant weights on an AVX-512 or AVX2+FMA GEMM; off, or numba "
                 "not importable: the numpy kernels (the reference path) run"),
    Option("jit_threads", "int", DEFAULT.jit_threads, "numba threads for the jit kernels", minimum=0,
           default_text="0: as many as the BLAS pool, i.e. intra_op_num_threads when set",
           notes="capped at NUMBA_NUM_THREADS; numba's pool is separate from OpenBLAS's, one count keeps them "
                 "from fighting over the cores"),
    Option("fuse_elementwise", "bool", DEFAULT.fuse_elementwise, "fuse elementwise chains into one compiled loop",
           aliases={"on": True, "off": False}, env="EPOXY_CPU_FUSE_ELEMENTWISE",
           notes="float32/float64 chains with one output (epoxy.kit.elementwise programs), shown as cpu_ew_* "
                 "groups in the partition report; needs jit; off by default: no model-level gain measured yet"),
    Option("heap_arrays", "bool", DEFAULT.heap_arrays, "keep freed multi-MB arrays in glibc's heap for the next run",
           aliases={"on": True, "off": False}, env="EPOXY_CPU_HEAP_ARRAYS",
           notes="mallopt: arrays up to 32 MiB from the heap, 64 MiB of free heap kept (fresh pages page-faulted "
                 "on every run: densenet121 alone 145 -> 107 ms); process-wide, applied once at the first cpu "
                 "provider created with it on, never undone; a process whose MALLOC_* variables or "
                 "glibc.malloc tunables are set, or without glibc, is left as it is"),
], CpuSettings)
#: option name -> one-line help (what ``CpuProviderFactory.options()`` returns)
OPTIONS: Mapping[str, str] = TABLE.describe()

_current: contextvars.ContextVar[CpuSettings] = contextvars.ContextVar("epoxy_cpu_settings", default=DEFAULT)


def current() -> CpuSettings:
    """The options of the provider building a kernel right now (defaults outside a build)."""
    return _current.get()


@contextmanager
def building_with(settings: CpuSettings) -> Iterator[None]:
    token = _current.set(settings)
    try:
        yield
    finally:
        _current.reset(token)
