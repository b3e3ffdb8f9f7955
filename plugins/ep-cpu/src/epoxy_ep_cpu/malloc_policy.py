"""Keep freed multi-megabyte arrays in the heap (glibc), as onnxruntime's CPU arena keeps its
buffers: the ``heap_arrays`` option.

Why: glibc serves an allocation above its mmap threshold (128 KiB at start, then adapted to
what was freed) with fresh pages, and gives heap memory above its trim threshold back to the
system; the next run's arrays of that size page-fault again, ~3 us a 4 KiB page on these VMs.
A model alone in a process paid that on every run (faults a run, run time, 1 thread):
densenet121 14,500 (145 -> 107 ms with this), shufflenet 1,000 (11.9 -> 9.0 ms), vgg19
7,900 (348 -> 333 ms), the BERT-style encoder 2,900 (115 -> 109 ms); peak RSS unchanged
(bench/README, session 15). With it, allocations up to :data:`MMAP_THRESHOLD` come from the
heap and up to :data:`TRIM_THRESHOLD` of free heap top is kept for the next run.

What it touches: ``mallopt`` is process-wide, so it is applied once, at the first cpu provider
created with the option on, and never undone; a process whose glibc malloc settings were
chosen by its owner (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_``
or ``glibc.malloc`` tunables in ``GLIBC_TUNABLES``) is left as it is, and so is any platform
without glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading

#: allocations up to this size come from the heap (above it: a fresh mapping, per call)
MMAP_THRESHOLD = 32 << 20
#: free memory at the heap's top kept for the next run, up to this much
TRIM_THRESHOLD = 64 << 20
#: glibc's mallopt parameters
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: environment variables by which a process's owner sets glibc's malloc policy
OWNER_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")

_lock = threading.Lock()
_state: dict[str, str] = {}


def _owner_choice() -> str | None:
    """Why the process's malloc policy is its owner's, or None."""
    for name in OWNER_VARIABLES:
        if name in os.environ:
            return f"{name} is set"
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES sets glibc.malloc tunables"
    return None


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 - present in glibc only (not musl)
        return libc
    except (OSError, AttributeError):
        return None


def apply() -> str:
    """Apply the policy once per process; returns what was done, or why not."""
    with _lock:
        if "status" in _state:
            return _state["status"]
        reason = _owner_choice()
        libc = None if reason else _glibc()
        if libc is None:
            status = f"left as it is: {reason or 'not glibc'}"
        else:
            ok = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and libc.mallopt(_M_TRIM_THRESHOLD,
                                                                                         TRIM_THRESHOLD) == 1
            status = (f"applied: heap up to {MMAP_THRESHOLD >> 20} MiB arrays, {TRIM_THRESHOLD >> 20} MiB kept"
                      if ok else "mallopt refused the thresholds")
        _state["status"] = status
        return status


def status() -> str:
    """What :func:`apply` did in this process, or that it has not run."""
    return _state.get("status", "not applied yet (no cpu provider created with heap_arrays on)")
