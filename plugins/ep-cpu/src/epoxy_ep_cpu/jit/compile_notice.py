"""Say so when the jit tier compiles, so a cold first run is not a silent pause.

Why: with an empty kernel cache (a new machine, a new numba, a cleared cache) the first run
of a model compiles its kernels: 8 s for squeezenet, 20-40 s for resnet50 or vgg19 on this
workplace's 2-vCPU VM (bench/README, session 24), and nothing said why the run hung. numba
announces every compilation (not a load from its on-disk cache) as a ``numba:compile`` event;
the first one of ours in a process logs one warning naming the cache directory, and each
compilation is logged at INFO with its seconds (``logging.getLogger("epoxy_ep_cpu.jit")``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

logger = logging.getLogger("epoxy_ep_cpu.jit")

#: kernels whose compilation is announced: the tier's own (their Python functions' modules)
OWN_MODULES = ("epoxy_ep_cpu.",)

_lock = threading.Lock()
_installed = False
_warned = False


def _own(event: Any) -> str | None:
    """The qualified name of the kernel being compiled when it is one of ours."""
    data = event.data or {}
    func = getattr(data.get("dispatcher"), "py_func", None)
    module = getattr(func, "__module__", "") or ""
    if func is None or not module.startswith(OWN_MODULES):
        return None
    return f"{module}.{func.__qualname__}"


def install(cache_dir: str) -> None:
    """Listen to numba's compile events (once per process; numba must be importable)."""
    global _installed
    with _lock:
        if _installed:
            return
        from numba.core import event

        event.register("numba:compile", _listener_class(event.Listener)(cache_dir))
        _installed = True


def _first_notice(cache_dir: str) -> None:
    global _warned
    with _lock:
        if _warned:
            return
        _warned = True
    logger.warning("ep-cpu: compiling jit kernels that are not in the kernel cache yet (%s); the first run "
                   "of a model can take several seconds to a minute, later processes load them in milliseconds",
                   cache_dir)


def _listener_class(base: type) -> type:
    """A ``numba.core.event.Listener`` (numba's ``register`` checks the type; built here so that
    importing this module does not import numba): the first compile of ours warns, each one
    logs its seconds."""

    class Notice(base):
        def __init__(self, cache_dir: str) -> None:
            self.cache_dir = cache_dir
            # per thread, a stack: a kernel's compilation compiles the functions it calls inside it
            self._started: dict[int, list[float]] = {}

        def on_start(self, event: Any) -> None:
            if _own(event) is not None:
                _first_notice(self.cache_dir)
                self._started.setdefault(threading.get_ident(), []).append(time.perf_counter())

        def on_end(self, event: Any) -> None:
            name = _own(event)
            stack = self._started.get(threading.get_ident())
            if name is not None and stack:
                logger.info("ep-cpu: compiled %s in %.2f s", name, time.perf_counter() - stack.pop())

    return Notice
