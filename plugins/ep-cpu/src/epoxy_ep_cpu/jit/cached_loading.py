"""The tier's cached kernels loaded without numba's full target refresh.

Why: before numba loads a cached function it refreshes its CPU target context, which imports
every lowering and typing registry it has (linalg, random, typed containers, datetime, ...).
Compiling needs them; loading compiled code does not: in a fresh process that refresh was
~60 ms and ~10 MB of squeezenet's first result (0.49 s; bench/README.md, session 45). What
loading needs is every external symbol the cached object code refers to: numba registers
them when its CPU context is made (its C helpers, libm), when NRT is initialized (the runtime's
C functions) and when the hashing registry is imported (the string-hashing secrets). Here the
runtime's C functions are registered the way ``rtsys.initialize`` registers them, without the
rest of that call: it also compiles NRT's atomic reference-count functions into a module of
their own, which the first LLVM compilation of a process pays (~30 MB of LLVM's optimizer and
~25 ms; bench/README.md, session 49). Cached code does not call that module: numba links its
functions into every library it compiles, so they are in each cached object. A later compile
initializes NRT through numba's refresh as before; a load that fails on the light path is
retried on numba's own.

Only the tier's own kernels take this path (served by the locator ``install`` is given,
``kernel_cache.InstalledKernelLocator``, or defined in the modules it generates:
:data:`GENERATED_MODULES`); a cache miss compiles through numba, whose compiler
refreshes the context itself, and everything else (a user's functions) keeps numba's path.
``EPOXY_CPU_JIT_FULL_REFRESH=1`` restores numba's own loading for the tier's kernels too.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from numba.core import caching

#: numba's loading entry point this module wraps (None: a numba without it, left alone)
_NUMBA_LOAD: Any = getattr(caching.Cache, "load_overload", None)
#: what the wrapper calls on numba's Cache (a numba without them keeps its own path)
_NEEDED = ("_load_overload", "_guard_against_spurious_io_errors")

_ready_lock = threading.Lock()
_ready = False


def _prepare_for_loading() -> None:
    """The runtime's C functions and the hashing secrets registered with LLVM, once per process."""
    global _ready
    with _ready_lock:
        if _ready:
            return
        import numba.cpython.hashing  # noqa: F401 - registers the _numba_hashsecret_* symbols with LLVM
        from llvmlite import binding as llvm
        from numba.core.runtime import _nrt_python

        for helper, address in _nrt_python.c_helpers.items():
            # rtsys.initialize's naming: internal helpers keep their name, the API gets NRT_
            llvm.add_symbol(helper if helper.startswith("_") else "NRT_" + helper, address)
        _ready = True


#: the locator class of the tier's kernels (``install``'s argument)
_locator_class: type | None = None
#: module-name prefixes of the modules the tier generates and imports from its cache folder
#: (``native_shares._load_module``'s share adapters, ``kernels_elementwise._load``'s fused loops):
#: numba's own locators serve them, and their code is the tier's too
GENERATED_MODULES = ("epoxy_share_", "epoxy_ep_cpu_jit_")


def _ours(cache: Any) -> bool:
    locator = getattr(getattr(cache, "_impl", None), "locator", None)
    if _locator_class is not None and isinstance(locator, _locator_class):
        return True
    module = getattr(getattr(cache, "_py_func", None), "__module__", None) or ""
    return module.startswith(GENERATED_MODULES)


def load_overload(self: Any, sig: Any, target_context: Any) -> Any:
    """``Cache.load_overload`` for the tier's kernels without the full refresh (module docstring)."""
    if not _ours(self):
        return _NUMBA_LOAD(self, sig, target_context)
    _prepare_for_loading()
    try:
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)
    except Exception:  # noqa: BLE001 - numba's own path loads it again, or raises the real error
        return _NUMBA_LOAD(self, sig, target_context)
    return None  # the guard swallowed an I/O error: numba compiles instead, as it would


def install(locator_class: type) -> bool:
    """Route numba's cached loading of the kernels ``locator_class`` serves through
    :func:`load_overload` (once); False when turned off or when this numba's Cache lacks what
    it needs (numba's own path then serves)."""
    global _locator_class
    if os.environ.get("EPOXY_CPU_JIT_FULL_REFRESH", "").strip() not in ("", "0"):
        return False
    if _NUMBA_LOAD is None or not all(hasattr(caching.Cache, name) for name in _NEEDED):
        return False
    _locator_class = locator_class
    if caching.Cache.load_overload is not load_overload:
        caching.Cache.load_overload = load_overload  # type: ignore[method-assign]
    return True
