"""The cpu kernel registry; op family modules register into it when first needed."""

from __future__ import annotations

import importlib
import threading

from epoxy.kit import KernelRegistry

KERNELS = KernelRegistry()

#: One module per op family under ``epoxy_ep_cpu.ops``; imported once, in this order.
FAMILIES = (
    "elementwise",
)

_loaded = False
_lock = threading.Lock()


def load_kernels() -> KernelRegistry:
    """Import every op family module (registering its kernels) and return the registry."""
    global _loaded
    with _lock:
        if not _loaded:
            for family in FAMILIES:
                importlib.import_module(f"epoxy_ep_cpu.ops.{family}")
            _loaded = True
    return KERNELS
