"""What handing half a kernel to a second thread costs on this machine (issue #17, 2 threads).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/thread_handoff.py
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/thread_handoff.py --sizes 100,400 --calls 1000

A ``nogil`` numba loop over ``planes`` planes of work (a few us to a few hundred) runs:

- ``one``: whole, on the calling thread;
- ``pool``: in two shares through ep-cpu's ``jit.threads.run_shares`` (the caller and a helper
  from a ``ThreadPoolExecutor``, which sleeps between jobs);
- ``spin``: in two shares with a helper that never takes the GIL and never sleeps: a ``nogil``
  numba loop started on a Python thread, spinning on a control array read and written with
  acquire/release atomics (an ``@intrinsic``), ``sched_yield`` in each spin; the caller waits
  in a ``nogil`` loop too.

Each of the three alone, then with an OpenBLAS GEMM (numpy's ``matmul``, a Winograd-sized
product) before each call, at 2 and at 1 BLAS thread: OpenBLAS's worker spins after a GEMM,
on the core the helper wants. Median us of ``--calls`` calls. A probe for the thread design,
not a kernel: the numbers in bench/README.md, session 31.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from threadpoolctl import threadpool_limits

from epoxy_ep_cpu.jit import direct
from epoxy_ep_cpu.jit.threads import run_shares

_libc = ctypes.CDLL(None)
sched_yield = _libc.sched_yield
sched_yield.restype = ctypes.c_int
sched_yield.argtypes = ()


def _element_pointer(context: Any, builder: Any, signature: Any, args: Any) -> Any:
    aryty = signature.args[0]
    ary = context.make_array(aryty)(context, builder, args[0])
    return cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]])


@intrinsic
def load_acquire(typingctx, arr, idx):  # type: ignore[no-untyped-def]
    """``arr[idx]`` (int64) read with acquire ordering: never hoisted out of a spin loop."""
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.load_atomic(_element_pointer(context, builder, signature, args), ordering="acquire", align=8)

    return types.int64(arr, idx), codegen


@intrinsic
def store_release(typingctx, arr, idx, val):  # type: ignore[no-untyped-def]
    """``arr[idx] = val`` (int64) with release ordering: the share's writes are visible first."""
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        builder.store_atomic(args[2], _element_pointer(context, builder, signature, args), ordering="release",
                             align=8)
        return context.get_dummy_value()

    return types.void(arr, idx, val), codegen


@njit(nogil=True, cache=False)
def work(x, y, first, last):  # pragma: no cover - compiled
    """Planes [first, last) of ``y = sqrt(x) * 1.0001 + exp(x / 1000)``."""
    n = x.shape[0] // 64
    for p in range(first, last):
        for i in range(p * n, (p + 1) * n):
            y[i] = np.sqrt(x[i]) * 1.0001 + np.exp(x[i] * 1e-3)


# control array: [0] share posted (a sequence number), [1] share done, [2] first, [3] last, [4] stop
@njit(nogil=True, cache=False)
def spinning_helper(ctrl, x, y):  # pragma: no cover - compiled
    seen = 0
    while load_acquire(ctrl, 4) == 0:
        posted = load_acquire(ctrl, 0)
        if posted != seen:
            seen = posted
            work(x, y, ctrl[2], ctrl[3])
            store_release(ctrl, 1, posted)
        else:
            sched_yield()


@njit(nogil=True, cache=False)
def post_and_run(ctrl, x, y, sequence, total):  # pragma: no cover - compiled
    """Post the second half to the helper, run the first, wait for the helper's."""
    half = total // 2
    ctrl[2] = half
    ctrl[3] = total
    store_release(ctrl, 0, sequence)
    work(x, y, 0, half)
    while load_acquire(ctrl, 1) != sequence:
        sched_yield()


def median_us(call: Callable[[], None], before: Callable[[], None] | None, calls: int) -> float:
    times = []
    for i in range(calls + 20):
        if before is not None:
            before()
        t0 = time.perf_counter()
        call()
        if i >= 20:
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def measure(size: int, calls: int, gemm: Callable[[], None]) -> list[str]:
    """The three ways at ``size`` elements a plane, with no GEMM and with one at 2 and 1 BLAS
    threads between calls: one table row each."""
    x = np.random.rand(64 * size).astype(np.float32)
    y = np.empty_like(x)
    share = direct.overload(work, (x, y, 0, 64))
    ctrl = np.zeros(8, np.int64)
    helper = threading.Thread(target=spinning_helper, args=(ctrl, x, y), daemon=True)
    helper.start()
    sequence = [0]

    def spin() -> None:
        sequence[0] += 1
        post_and_run(ctrl, x, y, sequence[0], 64)

    runs = {"one": lambda: share(x, y, 0, 64), "pool": lambda: run_shares(share, (x, y), 64, 2), "spin": spin}
    rows = []
    for label, blas in (("none", None), ("2 threads", 2), ("1 thread", 1)):
        with threadpool_limits(blas or 1):
            us = {name: median_us(run, None if blas is None else gemm, calls) for name, run in runs.items()}
        rows.append(f"| {size} | {label} | {us['one']:.1f} | {us['pool']:.1f} | {us['spin']:.1f} "
                    f"| {us['pool'] / us['one']:.2f} | {us['spin'] / us['one']:.2f} |")
    ctrl[4] = 1
    helper.join()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="30,100,400", help="elements per plane, comma-separated (64 planes)")
    ap.add_argument("--calls", type=int, default=400)
    args = ap.parse_args()
    a = np.random.rand(64, 16).astype(np.float32)
    b = np.random.rand(16, 196 * 36).astype(np.float32)
    c = np.empty((64, 196 * 36), np.float32)
    print("| per plane | BLAS between calls | one us | pool us | spin us | pool / one | spin / one |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        for row in measure(size, args.calls, lambda: np.matmul(a, b, out=c)):
            print(row, flush=True)


if __name__ == "__main__":
    main()
