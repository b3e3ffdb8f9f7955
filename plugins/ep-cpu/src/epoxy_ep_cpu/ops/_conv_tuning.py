"""Choose a convolution layer's path by timing the candidates (``conv_algo_search="measure"``).

Which of im2col, row-shift, Winograd F(2x2) and F(4x4) is fastest for a layer depends on how
fast this machine's BLAS is next to numpy's single-threaded copies: with OpenBLAS's AVX2
kernels the Winograd transforms pay from ~64 channels, with its AVX-512 kernels on the same
CPU row-shift wins most of those layers (bench/conv_paths.py). Fixed thresholds fit one
machine; timing each candidate once per layer shape fits the one we run on, like cuDNN's
benchmark mode. Results are cached per process under the layer shape, the candidates and the
BLAS libraries' thread counts, so sessions of one process agree and a shape is timed once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

#: (key) -> chosen path; key = (x shape, weight shape, pads, dtype, candidates, BLAS threads)
_CHOSEN: dict[tuple, str] = {}
_LOCK = threading.Lock()
#: a candidate whose first call takes this many times the best one so far is not timed again
_HOPELESS = 3.0
#: calls above this many seconds are timed once; shorter ones take the best of _REPEAT
_LONG_CALL_S = 0.01
_REPEAT = 3
_clock = time.perf_counter  # tests replace it with a clock the paths advance


def blas_key() -> tuple:
    """What the BLAS libraries run with now (threads, kernels): part of every cache key."""
    from epoxy.run.threads import blas_threads

    return tuple((b["library"], b["threads"], b["architecture"]) for b in blas_threads())


def fastest(
    key: tuple, candidates: Sequence[str], run: Callable[[str, np.ndarray], object], x_shape: tuple[int, ...],
    dtype: np.dtype,
) -> str:
    """The candidate path for which ``run(path, x)`` is fastest on a random input of
    ``x_shape``; remembered under ``key`` for the rest of the process."""
    if len(candidates) == 1:
        return candidates[0]
    full_key = (key, tuple(candidates))
    found = _CHOSEN.get(full_key)
    if found is not None:
        return found
    with _LOCK:  # two sessions built at once time one layer shape once, not concurrently
        found = _CHOSEN.get(full_key)
        if found is not None:
            return found
        x = np.random.default_rng(0).standard_normal(x_shape).astype(dtype)
        best_path, best_s = candidates[0], float("inf")
        for path in candidates:
            run(path, x)  # builds the path's weight layout, warms caches
            t0 = _clock()
            run(path, x)
            first = _clock() - t0
            took = first
            if first < _LONG_CALL_S and first < _HOPELESS * best_s:
                for _ in range(_REPEAT - 1):
                    t0 = _clock()
                    run(path, x)
                    took = min(took, _clock() - t0)
            if took < best_s:
                best_path, best_s = path, took
        _CHOSEN[full_key] = best_path
        return best_path


def forget() -> None:
    """Drop every remembered choice (tests; a process whose BLAS changed kernels)."""
    with _LOCK:
        _CHOSEN.clear()
