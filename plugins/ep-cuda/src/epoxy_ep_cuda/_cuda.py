"""Lazy access to CuPy and the driver: every failure becomes a ``ProviderUnavailable`` reason.

Nothing here runs at import time. ``import cupy`` works on machines without a GPU, but any
runtime call there raises ``CUDARuntimeError`` (insufficient driver / no device): that is
caught and reported, never raised through the plugin loader.
"""

from __future__ import annotations

import functools
from typing import Any

from epoxy.contract import ProviderUnavailable

INSTALL_HINT = "pip install 'epoxy-ep-cuda[cuda13]' (CUDA 13 driver) or 'epoxy-ep-cuda[cuda12]' (CUDA 12 driver)"


def import_cupy() -> Any:
    """The ``cupy`` module, or ``ProviderUnavailable`` saying why it cannot be imported."""
    try:
        import cupy
    except ImportError as exc:
        raise ProviderUnavailable(f"CuPy is not installed ({exc}); {INSTALL_HINT}") from None
    except Exception as exc:  # a broken CuPy install (wrong CUDA libs) must not crash loading
        raise ProviderUnavailable(f"CuPy failed to import: {type(exc).__name__}: {exc}") from None
    return cupy


@functools.lru_cache(maxsize=1)
def probe_devices() -> tuple[dict[str, Any], ...]:
    """One dict per visible GPU (index, name, compute capability, memory, SM count).

    Raises ``ProviderUnavailable`` with a clear reason when CuPy is missing, the driver is
    missing or too old, or no GPU is visible. Cached: enumeration happens once per process.
    """
    cupy = import_cupy()
    runtime = cupy.cuda.runtime
    try:
        count = runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError: no driver, driver too old, no device
        msg = str(exc)
        if "InsufficientDriver" in msg or "insufficient" in msg.lower():
            why = "no NVIDIA driver, or one too old for this CuPy's CUDA runtime"
        elif "NoDevice" in msg:
            why = "no CUDA-capable GPU is visible"
        else:
            why = "the CUDA runtime could not be initialized"
        raise ProviderUnavailable(f"{why} ({type(exc).__name__}: {msg})") from None
    if count <= 0:
        raise ProviderUnavailable("no CUDA-capable GPU is visible (cudaGetDeviceCount returned 0)")
    found = []
    for index in range(count):
        try:
            props = runtime.getDeviceProperties(index)
        except Exception as exc:
            raise ProviderUnavailable(f"GPU {index}: properties unreadable ({type(exc).__name__}: {exc})") from None
        name = props.get("name", b"")
        name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        found.append({
            "index": index,
            "name": name,
            "compute_capability": f"{props.get('major', 0)}.{props.get('minor', 0)}",
            "memory_bytes": int(props.get("totalGlobalMem", 0)),
            "multiprocessors": int(props.get("multiProcessorCount", 0)),
            "cuda_runtime": runtime.runtimeGetVersion(),
            # one GPU, whichever provider sees it: epoxy.get_devices() merges devices by this
            "pci_bus_id": (f"{int(props.get('pciDomainID', 0)):04x}:{int(props.get('pciBusID', 0)):02x}:"
                           f"{int(props.get('pciDeviceID', 0)):02x}.0") if "pciBusID" in props else "",
        })
    return tuple(found)
