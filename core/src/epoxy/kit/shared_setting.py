"""A process-wide setting changed for the duration of overlapping regions, put back by the last.

Why one helper: the session build pauses Python's garbage collector (``plan/gc_pause``) and
ep-cpu parks OpenBLAS's idle workers while its own threads run (``jit/blas_spin``); both are
process-wide, regions overlap (nested calls, sessions built or run from several threads), and
the value from before the first region must come back only when the last one ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class SharedSetting:
    """``apply()`` when the first region begins (its result is kept), ``restore(kept)`` when
    the last one ends."""

    def __init__(self, apply: Callable[[], Any], restore: Callable[[Any], None]) -> None:
        self._apply = apply
        self._restore = restore
        self._lock = threading.Lock()
        self._active = 0
        self._kept: Any = None

    @contextmanager
    def held(self) -> Iterator[None]:
        """The setting applied for the duration (shared with overlapping regions)."""
        with self._lock:
            if self._active == 0:
                self._kept = self._apply()
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                if self._active == 0:
                    self._restore(self._kept)
