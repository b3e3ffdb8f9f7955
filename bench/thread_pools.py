"""Probe for issue #17's thread policy: one GEMM of a resnet-sized convolution on OpenBLAS at
1 and 2 threads (fixed shares: the caller waits for every worker) against a caller-takes-
unclaimed-chunks pool (BLAS at 1 thread; the caller claims column chunks until none are left,
a helper thread claims what it can, the caller waits only for chunks a helper claimed).
Run it on a quiet machine and beside a load (e.g. the test suite): the fixed-share pool loses
when a worker is not scheduled, the claiming pool should not. Prints one line per run.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/thread_pools.py
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import threading
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits


class _Job:
    def __init__(self, fn: Callable[[int], None], n: int) -> None:
        self.fn, self.n = fn, n
        self.counter = itertools.count()
        self.lock = threading.Lock()
        self.claimed = self.done = 0
        self.exhausted = False
        self.finished = threading.Event()


class ClaimingPool:
    """The caller works too and waits only for chunks a helper actually took."""

    def __init__(self, helpers: int) -> None:
        self._cv = threading.Condition()
        self._job: _Job | None = None
        self._generation = 0
        for _ in range(helpers):
            threading.Thread(target=self._helper, daemon=True).start()

    def _helper(self) -> None:
        seen = 0
        while True:
            with self._cv:
                while self._generation == seen:
                    self._cv.wait()
                seen, job = self._generation, self._job
            if job is not None:
                self._work(job)

    @staticmethod
    def _work(job: _Job) -> None:
        while (i := next(job.counter)) < job.n:
            with job.lock:
                job.claimed += 1
            job.fn(i)
            with job.lock:
                job.done += 1
                if job.exhausted and job.done == job.claimed:
                    job.finished.set()

    def run(self, fn: Callable[[int], None], n: int) -> None:
        job = _Job(fn, n)
        with self._cv:
            self._job, self._generation = job, self._generation + 1
            self._cv.notify_all()
        self._work(job)
        with job.lock:
            job.exhausted = True
            if job.done == job.claimed:
                return
        job.finished.wait()


def _median_ms(fn: Callable[[], object], reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="64,576,3136", help="M,K,N of the GEMM")
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    m, k, n = (int(x) for x in args.shape.split(","))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    out = np.empty((m, n), np.float32)
    bounds = np.linspace(0, n, args.chunks + 1).astype(int)
    pool = ClaimingPool(1)

    def chunk(i: int) -> None:
        lo, hi = bounds[i], bounds[i + 1]
        np.matmul(a, b[:, lo:hi], out=out[:, lo:hi])

    with threadpool_limits(1):
        one = _median_ms(lambda: np.matmul(a, b, out=out), args.reps)
        reference = out.copy()
        claiming = _median_ms(lambda: pool.run(chunk, args.chunks), args.reps)
        assert np.allclose(out, reference)
    with threadpool_limits(2):
        two = _median_ms(lambda: np.matmul(a, b, out=out), args.reps)
    print(f"load {os.getloadavg()[0]:.1f}: blas 1 thread {one:.3f} ms, blas 2 threads {two:.3f} ms, "
          f"claiming pool (1 helper, blas 1 thread) {claiming:.3f} ms")


if __name__ == "__main__":
    main()
