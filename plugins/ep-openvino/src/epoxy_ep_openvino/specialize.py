"""Per-shape static specializations of a group compiled with dynamic dims (issue #17).

OpenVINO runs a model reshaped to static shapes ~30% faster than the same model compiled
with dynamic dims (shape-specific kernels, shape subgraphs folded). A group whose inputs
arrive with the same concrete shapes :data:`SPECIALIZE_AFTER` times gets a specialization
compiled in a background thread (OpenVINO's compile releases the GIL), so no run waits for
it: runs take the dynamic compilation until the specialization is ready. At most ``limit``
specializations per group (least recently used evicted); shapes OpenVINO cannot reshape or
compile to, or whose specialization fails to run, are remembered and stay on the dynamic
compilation.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from epoxy.contract import KernelFn

log = logging.getLogger("epoxy_ep_openvino")

#: runs with one shape key on the dynamic compilation before it is specialized (once is no pattern)
SPECIALIZE_AFTER = 2
#: distinct shape keys counted (or remembered as failed) per group before the counts start over
MAX_TRACKED = 256

ShapeKey = tuple[tuple[int, ...], ...]


@dataclass
class SpecializationStats:
    """One group's specializations (``epoxy_ep_openvino.stats(session)["specializations"]``)."""

    label: str
    compiled: int = 0
    compile_s: float = 0.0
    failed: int = 0
    evicted: int = 0
    specialized_runs: int = 0
    dynamic_runs: int = 0
    #: specializations compiled on one thread (below ``one_thread_below_macs``)
    one_thread: int = 0


class ShapeSpecializer:
    """Routes a group's runs to the specialization for their input shapes, when one is ready.

    ``build(key)`` compiles and binds a runner for the shapes ``key`` (one shape per entry of
    ``positions``, the argument positions of the group's dynamic inputs); it runs in the
    background through ``submit``. Every shared structure is guarded by one lock."""

    def __init__(
        self,
        dynamic: KernelFn,
        positions: Sequence[int],
        build: Callable[[ShapeKey], KernelFn],
        submit: Callable[[Callable[[], None]], Any],
        limit: int,
        stats: SpecializationStats,
    ) -> None:
        self.dynamic = dynamic
        self.positions = tuple(positions)
        self.build = build
        self.submit = submit
        self.limit = limit
        self.stats = stats
        self.lock = threading.Lock()
        self.ready: OrderedDict[ShapeKey, KernelFn] = OrderedDict()  # least recently used first
        self.seen: dict[ShapeKey, int] = {}
        self.pending: set[ShapeKey] = set()
        self.failed: set[ShapeKey] = set()

    def runner(self) -> KernelFn:
        """The group's kernel: a specialization when ready for these shapes, else the dynamic one."""
        positions = self.positions
        ready = self.ready
        lock = self.lock
        stats = self.stats
        dynamic = self.dynamic
        note = self._note
        drop = self._drop

        def run(*args: Any) -> tuple[Any, ...]:
            try:
                key: ShapeKey = tuple([args[p].shape for p in positions])
            except AttributeError:  # not an array: no shape to specialize for
                return dynamic(*args)
            fast = ready.get(key)
            if fast is not None:
                with lock:
                    if key in ready:
                        ready.move_to_end(key)
                    stats.specialized_runs += 1
                try:
                    return fast(*args)
                except Exception as exc:  # noqa: BLE001 - the dynamic compilation answers instead
                    drop(key, exc)
            results = dynamic(*args)
            note(key)
            return results

        return run

    def _note(self, key: ShapeKey) -> None:
        """Count a dynamic run with ``key``; the SPECIALIZE_AFTER-th one queues a compile."""
        with self.lock:
            self.stats.dynamic_runs += 1
            if key in self.failed or key in self.pending or key in self.ready:
                return
            count = self.seen.get(key, 0) + 1
            if count < SPECIALIZE_AFTER or len(self.pending) >= self.limit:
                if len(self.seen) >= MAX_TRACKED and key not in self.seen:
                    self.seen.clear()
                self.seen[key] = count
                return
            self.seen.pop(key, None)
            self.pending.add(key)
        try:
            self.submit(lambda: self._compile(key))
        except RuntimeError as exc:  # the executor is shut down (interpreter exit)
            with self.lock:
                self.pending.discard(key)
            log.debug("openvino: %s not specialized to %s: %s", self.stats.label, key, exc)

    def _compile(self, key: ShapeKey) -> None:
        t0 = time.perf_counter()
        try:
            fn = self.build(key)
        except Exception as exc:  # noqa: BLE001 - OpenVINO cannot reshape/compile to it: stay dynamic
            with self.lock:
                self.pending.discard(key)
            self._drop(key, exc)
            return
        seconds = time.perf_counter() - t0
        with self.lock:
            self.pending.discard(key)
            self.ready[key] = fn
            self.stats.compiled += 1
            self.stats.compile_s += seconds
            while len(self.ready) > self.limit:
                self.ready.popitem(last=False)
                self.stats.evicted += 1
        log.debug("openvino: specialized %s to input shapes %s in %.3f s", self.stats.label, key, seconds)

    def _drop(self, key: ShapeKey, exc: BaseException) -> None:
        """Remember that ``key`` cannot be specialized; its runs stay on the dynamic compilation."""
        with self.lock:
            if key in self.failed:
                return
            self.ready.pop(key, None)
            if len(self.failed) >= MAX_TRACKED:
                self.failed.clear()
            self.failed.add(key)
            self.stats.failed += 1
        log.debug("openvino: %s stays dynamic for input shapes %s: %s: %s", self.stats.label, key,
                  type(exc).__name__, exc)
