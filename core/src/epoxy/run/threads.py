"""BLAS thread control: numpy's BLAS pool is process-wide, so the setting is too."""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_limiter: Any = None


def set_blas_threads(count: int) -> None:
    """Limit the BLAS libraries numpy uses (OpenBLAS, MKL, BLIS) to ``count`` threads."""
    global _limiter
    from threadpoolctl import ThreadpoolController

    with _lock:
        controller = ThreadpoolController()
        controller.limit(limits=count, user_api="blas")
        _limiter = controller


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
