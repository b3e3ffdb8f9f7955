"""The compiled kernel tier (numba): optional, lazy, and always backed by the numpy path.

Why a tier and not a replacement: the numpy kernels are the reference (and the tests'
oracle); a jit kernel takes over only the cases it handles (float32/float64, contiguous
layouts) when the provider's ``jit`` option is on and numba works here. Nothing here imports
numba until a provider with ``jit=on`` builds a kernel that has a compiled twin, and nothing
is compiled until that kernel first runs (then from numba's on-disk cache when warm).
"""

from __future__ import annotations

import contextvars
import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from .. import settings
from .config import configure
from .probe import availability

# numba fixes a dispatcher's cache folder when the dispatcher is made, at its module's import:
# a kernels module imported before the folder was chosen (a test, a user's direct import) read
# and wrote numba's default, the package's __pycache__, whose entries outlive edits of the
# helpers the kernels inline. Choosing it here (environment variables only, numba not
# imported) comes before any kernels module.
configure()

__all__ = ["availability", "kernels", "remembering", "thread_count"]

_memo: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar("epoxy_cpu_jit_memo", default=None)
_lock = threading.Lock()
_imported: dict[str, ModuleType] = {}  # kernels modules by name, once imported


@contextmanager
def remembering(memo: dict[str, int]) -> Iterator[None]:
    """Kernels built inside share ``memo`` (one per provider): the thread count is resolved
    once per provider, at its first jit kernel, not per node and not for a model without one
    (resolving imports numba and asks threadpoolctl, ~1 ms)."""
    token = _memo.set(memo)
    try:
        yield
    finally:
        _memo.reset(token)


def thread_count() -> int:
    """The numba thread count of the provider building a kernel now (see :mod:`.threads`):
    read after the session set the BLAS pool from ``intra_op_num_threads``."""
    from .threads import resolve

    requested = settings.current().jit_threads
    memo = _memo.get()
    if memo is None:
        return resolve(requested)
    with _lock:
        if "threads" not in memo:
            memo["threads"] = resolve(requested)
        return memo["threads"]


def kernels(name: str) -> ModuleType | None:
    """The compiled-kernel module ``name`` (``normalization``, ``softmax``, ``pool``) when the
    provider building a kernel now runs the jit tier, else ``None`` (the numpy path runs).

    Called at kernel-build time, never per run: the returned module's functions compile on
    their first call."""
    if not settings.current().jit or not availability().available:
        return None
    module = _imported.get(name)
    if module is None:  # import_module's lookup costs ~2 us: a conv kernel asks ~9 times
        module = _imported.setdefault(name, importlib.import_module(f".kernels_{name}", __name__))
    return module
