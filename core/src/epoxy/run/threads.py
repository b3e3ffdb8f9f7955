"""BLAS thread control: numpy's BLAS pool is process-wide, so the setting is too."""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_controller: Any = None


def set_blas_threads(count: int) -> None:
    """Limit the BLAS libraries numpy uses (OpenBLAS, MKL, BLIS) to ``count`` threads.

    The libraries are found once per process (threadpoolctl's scan of the loaded shared
    objects took 0.9 ms, a sixth of creating a session of a small model from the session
    cache): numpy's BLAS is loaded with numpy, before any session; a BLAS loaded later
    belongs to another library and runs none of epoxy's kernels. The limit itself is set
    on every call (another library may have changed it since)."""
    global _controller
    from threadpoolctl import ThreadpoolController

    global _generation, _requested
    with _lock:
        if _controller is None:
            _controller = ThreadpoolController()
        _controller.limit(limits=count, user_api="blas")
        _generation += 1
        _requested = count


_generation = 0
_requested: int | None = None


def blas_request() -> tuple[int, int | None]:
    """(how many times :func:`set_blas_threads` ran in this process, the count it last set):
    a provider that keeps BLAS at one thread while its own threads split the work (ep-cpu's
    native pool) tells its own setting from a session's by the first number."""
    return _generation, _requested


def blas_threads() -> list[dict[str, Any]]:
    """What each BLAS library loaded in this process currently uses (for reports)."""
    from threadpoolctl import threadpool_info

    return [{"library": i.get("internal_api"), "threads": i.get("num_threads"), "version": i.get("version"),
             "architecture": i.get("architecture")} for i in threadpool_info() if i.get("user_api") == "blas"]


def describe_blas() -> str:
    """One line on numpy's BLAS for benchmark reports: cpu kernels run at its GEMM speed, so
    the kernel architecture it picked (and an ``OPENBLAS_CORETYPE`` pin, which can select
    AVX2 kernels on an AVX-512 machine) explains much of a latency ratio."""
    import os

    parts = [f"{b['library']} {b['version']} ({b['architecture'] or '?'} kernels, {b['threads']} threads)"
             for b in blas_threads()]
    pin = os.environ.get("OPENBLAS_CORETYPE")
    if pin:
        parts.append(f"OPENBLAS_CORETYPE={pin} set in the environment")
    return "; ".join(parts) or "no BLAS found by threadpoolctl"
