"""Per-thread scratch buffers for kernel temporaries that are never returned (im2col matrices,
padded planes, GEMM accumulators): reused across calls instead of allocated per call.

Why: a multi-megabyte ``np.empty`` that glibc serves by ``mmap`` comes back as fresh pages,
and touching them costs a page fault per 4 KiB (~3 us each on these VMs). Whether a model's
temporaries land there depends on the heap's history: squeezenet alone in a process took
~1,500 minor faults a run in its grid-GEMM convolutions (the 3 -> 64 channel stem's im2col
matrix and accumulator, 4.5 MB), ~4 ms of a 14-18 ms run; with these buffers, none.

Safety: a buffer belongs to the calling thread, and kernels on one thread run one at a time,
so a kernel may hold its slots until it returns; it must not return a view of one (outputs
stay fresh or planned). Each slot keeps the largest size asked of it up to
:data:`MAX_RETAINED_BYTES`; a larger request gets a fresh array that is not kept.
"""

from __future__ import annotations

import threading

import numpy as np

from epoxy.kit.aligned import aligned_empty

#: the largest buffer a slot keeps between calls (larger temporaries are allocated per call)
MAX_RETAINED_BYTES = 64 << 20
#: typed views a slot keeps ready (one per size and dtype asked: a prepared call asks the same
#: one every run); past this many the slot's views are dropped and made again as asked
MAX_VIEWS = 16

_local = threading.local()


def scratch(slot: str, size: int, dtype: np.dtype) -> np.ndarray:
    """A 1-D array of ``size`` elements of ``dtype`` (contents undefined), reusing this
    thread's buffer for ``slot``. The same request gets the same view object back: slicing
    and viewing the buffer again was ~0.5 us of a tiny layer's ~4 us call."""
    slots: dict[str, tuple[np.ndarray, dict[tuple[int, np.dtype], np.ndarray]]] | None = getattr(
        _local, "slots", None)
    if slots is None:
        slots = _local.slots = {}
    held = slots.get(slot)
    if held is not None:
        view = held[1].get((size, dtype))
        if view is not None:
            return view
    nbytes = size * dtype.itemsize
    if nbytes > MAX_RETAINED_BYTES:
        return aligned_empty(size, dtype)
    if held is None or held[0].nbytes < nbytes:
        held = slots[slot] = (aligned_empty(nbytes, np.uint8), {})  # vector rows on cache lines
    views = held[1]
    if len(views) >= MAX_VIEWS:
        views.clear()
    view = views[(size, dtype)] = held[0][:nbytes].view(dtype)
    return view
