"""The jit tier's thread policy: numba's threads follow the BLAS pool, one count for both.

Why: the session's ``intra_op_num_threads`` sets numpy's BLAS pool (process-wide) before
kernels are built; numba kernels launched with a different count would leave OpenBLAS
threads spinning on the cores numba wants (or the reverse). So a provider resolves its
count once, at its first jit kernel build, to the BLAS pool's count then (the session's
``intra_op_num_threads`` when set, else the BLAS default, which like numba's is the core
count), capped at numba's pool size. The ``jit_threads`` option overrides it.
"""

from __future__ import annotations

import os
import threading
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .blas_spin import parked

_controller: Any = None


def blas_count() -> int | None:
    """The largest thread count of the BLAS libraries numpy loaded (None: none reported).

    The libraries are found once per process (threadpoolctl scans every loaded library,
    ~1.6 ms, which kernel builds paid per node); their counts are read live each call."""
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController()
    counts = [int(c.num_threads) for c in _controller.lib_controllers if c.user_api == "blas" and c.num_threads]
    return max(counts) if counts else None


def resolve(requested: int) -> int:
    """Threads for this provider's jit kernels: ``requested`` when > 0, else the BLAS pool's,
    never more than numba's pool (``NUMBA_NUM_THREADS``)."""
    import numba

    ceiling = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    count = requested if requested > 0 else (blas_count() or ceiling)
    return max(1, min(count, ceiling))


#: elements of work per thread below which a kernel runs on fewer threads: waking a sleeping
#: worker costs ~30 us (OMP_WAIT_POLICY=PASSIVE, see config.py) and the memory-bound kernels
#: here gain little from a second thread: measured on 2 cores right after a BLAS call,
#: GlobalAveragePool over 0.8 M float32 took 0.077 ms on one thread and 0.111 ms on two
GRAIN = 1 << 20

_local = threading.local()


def thread_count_for(nthreads: int, work: int) -> int:
    """Threads for ``work`` elements read: at most ``nthreads``, each given at least
    :data:`GRAIN` of them (one thread below that)."""
    return max(1, min(nthreads, work // GRAIN))


def use(nthreads: int, work: int) -> None:
    """Launch this thread's next parallel kernel on :func:`thread_count_for` threads.
    numba's count is per calling thread and setting it is a Python call of microseconds, so
    it is set only when it changes."""
    count = thread_count_for(nthreads, work)
    if getattr(_local, "count", 0) != count:
        import numba

        numba.set_num_threads(count)
        _local.count = count


def serial_twin(kernel: Any) -> Any:
    """``kernel`` (a ``parallel=True`` numba function) compiled once more without threads:
    a parallel launch costs ~1.5-2 us even on one thread, more than a small tensor's whole
    kernel. The twin is a copy of the Python function under its own name, so numba's
    on-disk cache (keyed by qualified name, not by the ``parallel`` flag) keeps both."""
    from numba import njit

    fn = kernel.py_func
    twin = types.FunctionType(fn.__code__, fn.__globals__, f"{fn.__name__}_serial", fn.__defaults__,
                              fn.__closure__)
    twin.__qualname__ = f"{fn.__qualname__}_serial"
    twin.__module__ = fn.__module__
    options = {k: v for k, v in kernel.targetoptions.items() if k not in ("parallel", "nopython")}
    # ``cache`` is a dispatcher setting, not a target option: without it the twin was compiled
    # again in every process (2-6 s at a model's first run, warm cache or not)
    cached = type(kernel._cache).__name__ != "NullCache"
    return njit(cache=cached, **options)(twin)


def pick(parallel: Any, serial: Any, nthreads: int, work: int) -> Any:
    """The kernel to launch for ``work`` elements: the serial twin when one thread will do
    (see :func:`use`), else the parallel kernel with numba's count set."""
    if thread_count_for(nthreads, work) == 1:
        return serial
    use(nthreads, work)
    return parallel


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def worker_pool() -> ThreadPoolExecutor:
    """The process's helper threads for kernels split into shares by hand (:func:`run_shares`,
    the int8 GEMM's row tiles): started at the first split, reused after."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(thread_name_prefix="epoxy-cpu-jit")
        return _pool


def _forget_pool() -> None:
    """In a forked child the parent's workers do not exist, but its executor would count
    them as idle and queue work for nobody: the child starts a pool of its own."""
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)


def run_shares(fn: Callable[..., Any], args: tuple[Any, ...], total: int, count: int) -> None:
    """``fn(*args, first, last)`` over [0, total) in ``count`` contiguous shares, the calling
    thread taking the first and :func:`worker_pool` the others (``fn`` must release the GIL:
    ``nogil=True``).

    Why not a numba ``prange``: a parallel kernel is a second compilation of the same loop,
    and numba's parallel lowering made it the slowest one: 6-8 s a Winograd transform cold
    against 1.1-1.5 s for the serial kernel (bench/README, session 24), paid at a model's
    first run with an empty kernel cache. Waking a helper costs tens of microseconds either
    way (numba's OpenMP workers sleep too, ``OMP_WAIT_POLICY=PASSIVE``), and ~130 us on the
    2-vCPU VM the benchmarks run on: 145 us of work took 204 split in two (bench/README,
    session 31, with what a spinning, GIL-free helper would take instead)."""
    if count <= 1 or total <= 1:  # hot callers skip this call on one thread (1-4% of a tiny CNN)
        fn(*args, 0, total)
        return
    count = min(count, total)
    bounds = [total * t // count for t in range(count + 1)]
    pool = worker_pool()
    with parked():  # OpenBLAS's idle workers asleep: the helper gets the core (blas_spin)
        rest = [pool.submit(fn, *args, bounds[t], bounds[t + 1]) for t in range(1, count)]
        try:
            fn(*args, bounds[0], bounds[1])
        finally:
            for done in rest:
                done.result()
