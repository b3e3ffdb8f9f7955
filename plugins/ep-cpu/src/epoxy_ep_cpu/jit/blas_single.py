"""numpy's OpenBLAS set to one thread while ep-cpu's native pool splits the work.

Why: OpenBLAS's workers spin ~0.1 s after each multi-threaded product, and the native pool's
helpers spin a few milliseconds after each share (:mod:`.native_pool`); two spinners on the
same cores made a split take 3.8 ms instead of 0.1 and slowed OpenBLAS's GEMM 2x
(bench/README.md, session 31). So when a provider runs its kernels on several threads of
the native pool, OpenBLAS runs on one (each helper calls it for its own share of a product:
``native_shares.matmul_share``), set once, at kernel build, never toggled with the helpers'
state: OpenBLAS rounds differently on one and two threads, and results must not change
from one run to the next. The count is set through OpenBLAS's ``openblas_set_num_threads``;
another BLAS is left alone (:func:`available` is then False and the native pool is off).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any


@functools.cache
def _openblas_calls() -> tuple[Any, Any] | None:
    """(get, set) thread-count functions of numpy's OpenBLAS (pthreads build), or None."""
    try:
        from threadpoolctl import ThreadpoolController

        for lib in ThreadpoolController().lib_controllers:
            if lib.internal_api != "openblas" or getattr(lib, "threading_layer", "") != "pthreads":
                continue
            prefix, suffix = getattr(lib, "_symbol_prefix", ""), getattr(lib, "_symbol_suffix", "")
            get = getattr(lib.dynlib, f"{prefix}openblas_get_num_threads{suffix}")
            put = getattr(lib.dynlib, f"{prefix}openblas_set_num_threads{suffix}")
            get.restype, get.argtypes = ctypes.c_int, ()
            put.restype, put.argtypes = None, (ctypes.c_int,)
            return get, put
    except Exception:  # noqa: BLE001 - no OpenBLAS, or one without these symbols
        return None
    return None


def available() -> bool:
    """Whether numpy's BLAS is an OpenBLAS whose thread count can be set here."""
    return _openblas_calls() is not None


def pin() -> None:
    """numpy's OpenBLAS to one thread (no-op for another BLAS)."""
    calls = _openblas_calls()
    if calls is not None and int(calls[0]()) != 1:
        calls[1](1)
