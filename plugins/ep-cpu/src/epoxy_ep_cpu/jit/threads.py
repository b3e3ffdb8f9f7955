"""The jit tier's thread policy: numba's threads follow the BLAS pool, one count for both.

Why: the session's ``intra_op_num_threads`` sets numpy's BLAS pool (process-wide) before
kernels are built; numba kernels launched with a different count would leave OpenBLAS
threads spinning on the cores numba wants (or the reverse). So a provider resolves its
count once, at its first jit kernel build, to the BLAS pool's count then (the session's
``intra_op_num_threads`` when set, else the BLAS default, which like numba's is the core
count), capped at numba's pool size. The ``jit_threads`` option overrides it.

On more than one thread the kernels split their passes and products themselves over the
native pool (:class:`Split`, :class:`SplitMatmul`, :mod:`.native_pool`), and numpy's
OpenBLAS is set to one thread for the process (:func:`_pin_blas`); the count sessions meant
stays known (:func:`_sessions_blas_count`).
"""

from __future__ import annotations

import os
import threading
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from . import blas_single
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
    count = max(1, min(requested if requested > 0 else (_sessions_blas_count() or ceiling), ceiling))
    if count > 1 and native():
        _pin_blas()
    return count


#: (the core's BLAS-setting generation when ep-cpu pinned OpenBLAS to one thread, the count
#: OpenBLAS had then): sessions built later in that generation still get that count
_pinned: tuple[int, int] | None = None


def _sessions_blas_count() -> int | None:
    """The BLAS count a session meant: OpenBLAS's, unless ep-cpu pinned it to one thread since
    a session last set it (then the count it had before)."""
    from epoxy.run.threads import blas_request

    if _pinned is not None and _pinned[0] == blas_request()[0]:
        return _pinned[1]
    return blas_count()


def keep_blas_pinned() -> None:
    """Set OpenBLAS to one thread again if a session set its count since ep-cpu did (a product's
    shares each call OpenBLAS, which would otherwise start its own threads beside the helpers);
    a comparison of two integers when nothing changed."""
    from epoxy.run import threads as core_threads

    pinned = _pinned
    if pinned is not None and core_threads._generation != pinned[0]:
        _pin_blas(pinned[1])


def _pin_blas(keep: int | None = None) -> None:
    """numpy's OpenBLAS to one thread for the process: the native pool's helpers split the
    products themselves (one OpenBLAS thread each), and a count that changed with the
    helpers' state would change results between runs (OpenBLAS rounds differently on one and
    two threads)."""
    global _pinned
    from epoxy.run.threads import blas_request

    generation, requested = blas_request()
    if _pinned is not None and _pinned[0] == generation:
        return
    before = requested or keep or blas_count() or 1  # a session's request since beats the count kept
    blas_single.pin()
    _pinned = (generation, before)


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
    if count > 1 and native():
        from . import native_pool

        native_pool.quiesce()  # numba's OpenMP workers get the cores, not a spinning helper
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
    if native():
        from . import native_pool

        native_pool.quiesce()  # its spinning helper would share the core with this pool's
    pool = worker_pool()
    with parked():  # OpenBLAS's idle workers asleep: the helper gets the core (blas_spin)
        rest = [pool.submit(fn, *args, bounds[t], bounds[t + 1]) for t in range(1, count)]
        try:
            fn(*args, bounds[0], bounds[1])
        finally:
            for done in rest:
                done.result()


# -- the native pool (native_pool.py): shares handed over without the GIL ------------------------
_NATIVE: bool | None = None


def native() -> bool:
    """Whether kernels on several threads split their work over :mod:`.native_pool`'s helpers
    (which stay awake between shares; numpy's OpenBLAS is then set to one thread: :func:`_pin_blas`)
    rather than over OpenBLAS's threads and :func:`worker_pool`; ``EPOXY_CPU_NATIVE_POOL=0``
    turns it off, and so does a BLAS other than OpenBLAS."""
    global _NATIVE
    if _NATIVE is None:
        from .native_shares import matmul_available

        _NATIVE = os.environ.get("EPOXY_CPU_NATIVE_POOL", "1") != "0" and blas_single.available() \
            and matmul_available()
    return _NATIVE


#: elements a share of a memory-bound pass on the native pool reads at least (~15-30 us of
#: copying; a spinning helper takes a share in ~3 us)
SHARE_GRAIN = 1 << 15
#: multiply-adds below which a product stays whole on one thread
MIN_SPLIT_MACS = 1 << 19


def share_count(nthreads: int, work: int, units: int) -> int:
    """Shares for a pass reading ``work`` elements over ``units`` planes (:class:`Split`):
    from :data:`SHARE_GRAIN` a share on the native pool, from :data:`GRAIN` otherwise."""
    grain = SHARE_GRAIN if nthreads > 1 and native() else GRAIN
    return max(1, min(nthreads, units, work // grain))


def gemm_count(nthreads: int, macs: int) -> int:
    """Shares for a product of ``macs`` multiply-adds (:class:`SplitMatmul`): 1 without the
    native pool (OpenBLAS's own threads split it then)."""
    if nthreads <= 1 or not native():
        return 1
    return max(1, min(nthreads, macs // MIN_SPLIT_MACS))


class Split:
    """A pass ``fn(*args, first, last)`` over [0, total) in ``count`` shares, prepared once for
    a call site (a kernel call for one input shape): on the native pool when it runs and the
    arguments can travel (C-contiguous arrays and numbers, the kinds of ``sample``), else on
    :func:`run_shares`. ``kernel`` is the numba dispatcher (``nogil``) whose overload ``fn``
    is; each call packs the arguments (compiled, ~1 us) and hands the shares over."""

    __slots__ = ("_address", "_bounds", "_count", "_fn", "_length", "_pack", "_total")

    def __init__(self, kernel: Any, fn: Any, sample: tuple[Any, ...], total: int, count: int) -> None:
        self._fn, self._total, self._count = fn, total, min(count, total)
        self._address: int | None = None
        if self._count > 1 and native():
            from . import native_pool, native_shares

            share = native_shares.kernel_share(kernel, sample)
            if share is not None:
                self._address, self._pack, self._length = share
                self._bounds = native_pool.bounds_for(total, self._count)

    def __call__(self, *args: Any) -> None:
        if self._address is None:
            run_shares(self._fn, args, self._total, self._count)
            return
        from . import native_pool

        argv = np.empty(self._length, np.int64)
        self._pack(argv, *args)
        if not native_pool.pool(self._count - 1).run(self._address, argv, self._bounds):
            self._fn(*args, 0, self._total)  # another thread's shares hold the helpers


class Shares:
    """A compiled pass ``kernel(*args, first, last)`` over [0, total) in ``count`` shares,
    prepared at its first call: on one share the compiled overload called directly (a tiny
    pass's call is a few us), else a :class:`Split`. The pools, BatchNorm and LRN passes of
    one input shape each hold one."""

    __slots__ = ("_count", "_kernel", "_one", "_run", "_total")

    def __init__(self, kernel: Any, total: int, count: int) -> None:
        self._kernel, self._total, self._count = kernel, total, count
        self._run: Any = None
        self._one: Any = None  # one share: the overload, called here with no frame between

    def __call__(self, *args: Any) -> None:
        one = self._one
        if one is not None:
            one(*args, 0, self._total)
            return
        run = self._run
        if run is None:
            from . import direct

            fn = direct.overload(self._kernel, (*args, 0, self._total))
            if self._count <= 1:
                self._one = fn
                fn(*args, 0, self._total)
                return
            run = self._run = Split(self._kernel, fn, args, self._total, self._count)
        run(*args)


class SplitMatmul:
    """``np.matmul(a, b, out=out)`` for operands shaped and strided as ``a``, ``b``, ``out``
    at preparation, split in ``count`` shares on the native pool (by products of a stack, by
    row blocks when the product is tall, else by column blocks; each share calls OpenBLAS on
    one thread) when the pool runs and the operands are float32 BLAS-ready stacks; else
    numpy's matmul (OpenBLAS's own threads)."""

    __slots__ = ("_bounds", "_count", "_template")

    def __init__(self, a: np.ndarray, b: np.ndarray, out: np.ndarray, count: int) -> None:
        self._template: np.ndarray | None = None
        if count > 1 and native():
            from . import native_pool, native_shares

            packed = native_shares.matmul_argv(a, b, out, count)
            if packed is not None and min(count, packed[1]) > 1:
                self._template, units = packed
                self._count = min(count, units)
                self._bounds = native_pool.bounds_for(units, self._count)

    def __call__(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
        template = self._template
        if template is None:
            return np.matmul(a, b, out=out)
        from . import native_pool, native_shares

        keep_blas_pinned()
        argv = template.copy()
        native_shares.repoint(argv, a, b, out)
        if not native_pool.pool(self._count - 1).run(native_shares.matmul_share(), argv, self._bounds):
            np.matmul(a, b, out=out)
        return out


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul(a, b)`` for the numpy paths: split over the native pool's threads when this
    process runs it (OpenBLAS was then set to one thread: :func:`_pin_blas`), so products the
    jit tier does not run still use the threads the sessions were given."""
    pinned = _pinned
    if pinned is None or pinned[1] < 2 or a.dtype != np.float32 or b.dtype != np.float32 or min(a.ndim, b.ndim) < 2:
        return np.matmul(a, b)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    out = np.empty((*batch, a.shape[-2], b.shape[-1]), dtype=np.float32)
    count = gemm_count(pinned[1], out.size * a.shape[-1])
    if count < 2 or (a.ndim > 2 and a.shape[:-2] != batch) or (b.ndim > 2 and b.shape[:-2] != batch):
        return np.matmul(a, b, out=out)
    return SplitMatmul(a, b, out, count)(a, b, out)
