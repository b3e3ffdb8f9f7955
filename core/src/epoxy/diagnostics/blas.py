"""Thread pools loaded in this process (BLAS, OpenMP) as threadpoolctl sees them: the cpu
provider's GEMMs run at the speed of numpy's BLAS and the kernel architecture it picked."""

from __future__ import annotations

from typing import Any


def thread_pools() -> list[dict[str, Any]]:
    """One entry per native library: its API (blas/openmp), implementation, version,
    threads, kernel architecture and file. numpy is imported first so its BLAS is loaded."""
    import numpy  # noqa: F401  -- loads the BLAS threadpoolctl should find
    from threadpoolctl import threadpool_info

    return [
        {"user_api": i.get("user_api"), "library": i.get("internal_api"), "version": i.get("version"),
         "threads": i.get("num_threads"), "architecture": i.get("architecture"), "filepath": i.get("filepath")}
        for i in threadpool_info()
    ]
