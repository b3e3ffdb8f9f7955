"""Whether the jit tier can run here, and why not: probed once, without compiling anything."""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass

from . import compile_notice
from .config import configure


@dataclass(frozen=True)
class Availability:
    """``available`` and, when not, the reason ``epoxy providers`` shows."""

    available: bool
    version: str = ""
    reason: str = ""

    def describe(self) -> str:
        if self.available:
            return f"numba {self.version} available"
        return f"unavailable ({self.reason}): the numpy kernels run"


def _threadsafe_layer() -> str | None:
    """A threading layer that tolerates parallel kernels launched from several threads at
    once (sessions run concurrently): numba's ``workqueue`` layer aborts the process then."""
    for layer in ("omppool", "tbbpool"):
        try:
            importlib.import_module(f"numba.np.ufunc.{layer}")
        except Exception:  # a missing libgomp / tbb is an ImportError or an OSError
            continue
        return layer.removesuffix("pool")
    return None


@functools.cache
def availability() -> Availability:
    """Import numba (after setting its cache directory and threading layer) and report.

    Tests monkeypatch this function to simulate a machine without numba."""
    configure()
    try:
        numba = importlib.import_module("numba")
    except Exception as exc:  # ImportError, or a broken llvmlite raising something else
        return Availability(False, reason=f"numba cannot be imported: {type(exc).__name__}: {exc}")
    if _threadsafe_layer() is None:
        return Availability(False, numba.__version__, "no thread-safe numba threading layer (needs libgomp or tbb)")
    compile_notice.install(str(numba.config.CACHE_DIR or ""))  # a cold cache's first run says why it waits
    return Availability(True, numba.__version__)
