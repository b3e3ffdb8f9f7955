"""Helper threads that take shares of a kernel without the GIL and stay awake between them.

Why: on the 2-vCPU VM the benchmarks run on, a thread that blocks (a futex: a sleeping
``ThreadPoolExecutor`` worker, or a thread waiting for the GIL) halts its vCPU at once
(``haltpoll.guest_halt_poll_ns=0`` on its kernel command line), and waking it costs 20-130
us, more than many layers take. So a helper here never blocks while it works: after a share
it waits in a ``nogil`` numba loop (acquire loads of its control cell, ``pause`` hints and now
and then a ``sched_yield``: ``_wait_turn``) for up to :data:`SPIN_CYCLES`, and a share is a C function pointer,
``void share(int64 argv, int64 first, int64 last)``, that the loop calls itself: the share's
arguments are packed into an int64 array (:mod:`.native_shares` makes these functions for
numba kernels and for OpenBLAS's sgemm). Only an idle helper sleeps, on a condition, and the
next share wakes it.

A share is run by whoever claims it first (a compare-exchange of its sequence number): the
caller, done with its own share, claims every helper share not yet started and runs it itself,
and waits only for the ones helpers took. A helper that is late (asleep, its vCPU busy with
another process's thread, onnxruntime's spinning workers in the same process) then costs the
caller the helper's share, not a scheduler time slice: a 1x1 layer right after an onnxruntime
session's run took 150 us a call here against 56 alone (bench/README.md, session 37).

A helper that spun in Python (taking the GIL to call each share) measured no gain: it
blocked on the GIL the caller held, and paid the wake-up anyway (bench/README.md, session 33).

Two spinning pools on two cores fight (OpenBLAS's workers spin ~0.1 s after each product):
a provider on this pool sets numpy's OpenBLAS to one thread (:mod:`.blas_single`) and its
kernels split their products themselves. One caller at a time: a second thread calling
:meth:`NativePool.run` while another's shares run runs all of its shares itself.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
from .atomics import claim, cycles, load_acquire, pause_cpu, store_release, yield_cpu

#: how long an idle helper stays awake: ~5 ms at 3 GHz (the gaps between the split layers of
#: a run are tens to hundreds of microseconds; OpenBLAS's own workers stay ~0.1 s)
SPIN_CYCLES = 1 << 24
#: ``pause`` hints a turn of a wait (0: ``sched_yield`` every turn), see ``_wait_turn``
PAUSES = int(os.environ.get("EPOXY_CPU_SPIN_PAUSES", "16"))
#: int64 cells of a helper's control block (two 64-byte lines: no false sharing between helpers)
_STRIDE = 16
_POSTED, _DONE, _FN, _ARGV, _FIRST, _LAST, _SLEEPING, _PAUSES, _CLAIMED, _TAKEN = range(10)
_STOP = -1


@intrinsic
def call_share(typingctx: Any, fn: Any, argv: Any, first: Any, last: Any) -> Any:
    """Call the C function at address ``fn`` as ``void fn(int64 argv, int64 first, int64 last)``."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i64 = ir.IntType(64)
        fnty = ir.FunctionType(ir.VoidType(), [i64, i64, i64])
        builder.call(builder.inttoptr(args[0], fnty.as_pointer()), list(args[1:]))
        return context.get_dummy_value()

    return types.void(types.int64, types.int64, types.int64, types.int64), codegen


@njit(nogil=True, cache=True, inline="always")
def _wait_turn(turn, pauses):  # pragma: no cover - compiled
    """One turn of a wait: ``pauses`` x86 ``pause`` hints (the core's execution units go to
    its other hardware thread), and every 64th turn a ``sched_yield`` (a runnable thread on
    this vCPU gets it); ``pauses`` 0: a ``sched_yield`` every turn."""
    if pauses == 0 or turn % 64 == 63:
        yield_cpu()
    else:
        for _ in range(pauses):
            pause_cpu()


@njit(nogil=True, cache=True)
def _serve_native(ctrl, base, seen, budget, hold):  # pragma: no cover - compiled
    """The helper's loop: run each posted share, then wait for the next; returns the last
    sequence seen when ``budget`` cycles passed idle (or ``hold`` was raised), or -1 to stop."""
    start = cycles()
    turn = 0
    while True:
        posted = load_acquire(ctrl, base)
        if posted == _STOP:
            return _STOP
        if posted != seen:
            seen = posted
            if claim(ctrl, base + _CLAIMED, posted):  # the caller did not take this share first
                call_share(ctrl[base + _FN], ctrl[base + _ARGV], ctrl[base + _FIRST], ctrl[base + _LAST])
                store_release(ctrl, base + _DONE, posted)
            start = cycles()
            continue
        if load_acquire(hold, 0) != 0 or cycles() - start > budget:
            return seen
        _wait_turn(turn, hold[1])
        turn += 1


@njit(nogil=True, cache=True)
def _post(ctrl, helpers, fn, argv, bounds, sequence):  # pragma: no cover - compiled
    """Share h + 1 to helper h (function, arguments, range first, then the sequence number)."""
    for h in range(helpers):
        base = h * _STRIDE
        ctrl[base + _FN] = fn
        ctrl[base + _ARGV] = argv
        ctrl[base + _FIRST] = bounds[h + 1]
        ctrl[base + _LAST] = bounds[h + 2]
        store_release(ctrl, base, sequence)


@njit(nogil=True, cache=True)
def _run_first_and_wait(ctrl, helpers, fn, argv, bounds, sequence):  # pragma: no cover - compiled
    """The caller's share; then each helper's share the helper has not claimed yet (it was
    late: asleep, or its core taken) the caller claims and runs itself, and it waits for the
    ones the helpers took."""
    call_share(fn, argv, bounds[0], bounds[1])
    for h in range(helpers):
        base = h * _STRIDE
        if claim(ctrl, base + _CLAIMED, sequence):
            call_share(fn, argv, bounds[h + 1], bounds[h + 2])
            ctrl[base + _TAKEN] += 1
            continue
        turn = 0
        while load_acquire(ctrl, base + _DONE) != sequence:
            _wait_turn(turn, ctrl[base + _PAUSES])
            turn += 1


@njit(nogil=True, cache=True)
def _post_run_wait(ctrl, helpers, fn, argv, bounds, sequence):  # pragma: no cover - compiled
    """:func:`_post` and :func:`_run_first_and_wait` in one call (helpers known awake)."""
    address = np.int64(argv.ctypes.data)
    _post(ctrl, helpers, fn, address, bounds, sequence)
    _run_first_and_wait(ctrl, helpers, fn, address, bounds, sequence)


class NativePool:
    """``helpers`` threads, started with the pool, running the shares :meth:`run` posts."""

    def __init__(self, helpers: int) -> None:
        self.helpers = helpers
        self._ctrl = np.zeros(max(helpers, 1) * _STRIDE, np.int64)
        self._hold = np.zeros(2, np.int64)  # [go to sleep, pauses a wait turn]
        self._hold[1] = PAUSES
        self._cond = threading.Condition(threading.Lock())
        self._busy = threading.Lock()
        self._awake = 0  # helpers counted awake (under _cond)
        self._held = False  # quiesce() asked the awake helpers to sleep (the next run resets it)
        self._sequence = 0
        for h in range(helpers):
            self._ctrl[h * _STRIDE + _SLEEPING] = 1  # born asleep: the first share wakes it
            self._ctrl[h * _STRIDE + _PAUSES] = PAUSES  # the caller's wait for this helper
        self._threads = [threading.Thread(target=self._serve, args=(h,), name=f"epoxy-cpu-helper-{h}", daemon=True)
                         for h in range(helpers)]
        for thread in self._threads:
            thread.start()

    def run(self, fn: int, argv: np.ndarray, bounds: np.ndarray) -> bool:
        """Shares ``[bounds[t], bounds[t + 1])`` of the C share ``fn`` (see module doc) over
        the caller and ``len(bounds) - 2`` helpers; ``argv`` (int64) must live until the call
        returns. False (nothing run) when another caller holds the helpers."""
        helpers = len(bounds) - 2
        if helpers > self.helpers or not self._busy.acquire(blocking=False):
            return False
        try:
            self._sequence += 1
            sequence = self._sequence
            if self._awake >= helpers and not self._held:
                # read without the lock: a helper that goes to sleep meanwhile misses this share,
                # which the caller then claims and runs itself (no share is lost or run twice)
                _post_run_wait(self._ctrl, helpers, fn, argv, bounds, sequence)
                return True
            self._hold[0] = 0
            self._held = False
            address = argv.ctypes.data
            _post(self._ctrl, helpers, fn, address, bounds, sequence)
            with self._cond:  # (under the lock the helpers decide to sleep under: no lost wake-up)
                if self._awake < helpers:
                    for h in range(helpers):
                        self._wake(h)
                    self._cond.notify_all()
            _run_first_and_wait(self._ctrl, helpers, fn, address, bounds, sequence)
            return True
        finally:
            self._busy.release()

    def taken(self) -> int:
        """Helper shares the callers ran themselves so far (the helper had not claimed them
        when the caller's own share was done)."""
        return int(sum(self._ctrl[h * _STRIDE + _TAKEN] for h in range(self.helpers)))

    def quiesce(self) -> None:
        """Idle helpers to sleep now (another pool is about to want the cores)."""
        if self._awake:
            self._hold[0] = 1
            self._held = True

    def stop(self) -> None:
        """End the helpers (a larger pool replaces this one; tests), after the shares running."""
        with self._busy, self._cond:
            for h in range(self.helpers):
                self._ctrl[h * _STRIDE + _POSTED] = _STOP
            self._cond.notify_all()
        for thread in self._threads:
            thread.join()

    def _wake(self, h: int) -> None:
        """(under ``_cond``) helper ``h`` counted awake."""
        if self._ctrl[h * _STRIDE + _SLEEPING]:
            self._ctrl[h * _STRIDE + _SLEEPING] = 0
            self._awake += 1

    def _sleep(self, h: int) -> None:
        """(under ``_cond``) helper ``h`` counted asleep."""
        if not self._ctrl[h * _STRIDE + _SLEEPING]:
            self._ctrl[h * _STRIDE + _SLEEPING] = 1
            self._awake -= 1

    def _serve(self, h: int) -> None:
        base = h * _STRIDE
        seen = 0
        with self._cond:  # wait for the first share
            while self._ctrl[base + _POSTED] == seen:
                self._cond.wait()
        while True:
            seen = _serve_native(self._ctrl, base, seen, SPIN_CYCLES, self._hold)
            with self._cond:
                if seen == _STOP:
                    self._sleep(h)
                    return
                if self._ctrl[base + _POSTED] != seen:  # posted since the loop gave up
                    continue
                self._sleep(h)
                while self._ctrl[base + _POSTED] == seen:
                    self._cond.wait()


_pool: NativePool | None = None
_pool_lock = threading.Lock()


def pool(helpers: int) -> NativePool:
    """The process's pool, with at least ``helpers`` helpers (started at the first split)."""
    global _pool
    current = _pool
    if current is not None and current.helpers >= helpers:
        return current
    with _pool_lock:
        if _pool is None or _pool.helpers < helpers:
            old, _pool = _pool, NativePool(helpers)
            if old is not None:
                old.stop()
        return _pool


def quiesce() -> None:
    """Idle helpers to sleep (no-op before the first split)."""
    if _pool is not None:
        _pool.quiesce()


def bounds_for(total: int, count: int) -> np.ndarray:
    """``count`` contiguous shares of [0, total) as an int64 array of ``count + 1`` bounds."""
    return (np.arange(count + 1, dtype=np.int64) * total) // count


def _forget_pool() -> None:
    """A forked child has none of the parent's threads: it starts its own pool."""
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)

