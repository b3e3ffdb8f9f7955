"""ShuffleNet's channel shuffle on channels-last codes (``ops/channel_shuffle.py``): each pixel's
C codes permuted, group-major to channel-major (channel ``g * C/G + j`` to ``j * G + g``).

Why compiled: numpy copies a ``(P, C/G, G)`` transposed view of bytes at ~1 ns a code (inner
runs of G codes), 106 us for [136, 28, 28]; this loop takes 26 us.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
from .threads import pick, serial_twin


@njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def shuffle_rows(x, y, group, per_group):  # pragma: no cover - compiled
    """``y[p, j * group + g] = x[p, g * per_group + j]`` for (P, C) rows ``x`` and ``y``."""
    for p in prange(x.shape[0]):
        src = x[p]
        dst = y[p]
        for g in range(group):
            for j in range(per_group):
                dst[j * group + g] = src[g * per_group + j]


shuffle_rows_serial = serial_twin(shuffle_rows)


def shuffle(rows: np.ndarray, out: np.ndarray, group: int, per_group: int, nthreads: int) -> None:
    """:func:`shuffle_rows` of C-ordered (P, C) ``rows`` into ``out``, on the provider's threads
    when the codes are many enough (``threads.GRAIN``)."""
    pick(shuffle_rows, shuffle_rows_serial, nthreads, rows.size)(rows, out, group, per_group)
