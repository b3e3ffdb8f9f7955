"""The cpu kernel registry; op family modules register into it when first needed."""

from __future__ import annotations

import importlib
import pkgutil
import threading

from epoxy.kit import KernelRegistry

KERNELS = KernelRegistry()


def _families() -> list[str]:
    """Op family modules under ``epoxy_ep_cpu.ops`` (private ``_`` modules are helpers)."""
    from . import ops

    return sorted(m.name for m in pkgutil.iter_modules(ops.__path__) if not m.name.startswith("_"))

_loaded = False
_lock = threading.Lock()


def load_kernels() -> KernelRegistry:
    """Import every op family module (registering its kernels) and return the registry."""
    global _loaded
    with _lock:
        if not _loaded:
            for family in _families():
                importlib.import_module(f"epoxy_ep_cpu.ops.{family}")
            _loaded = True
    return KERNELS
