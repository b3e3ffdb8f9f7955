"""numba's process-wide settings that the jit tier chooses: cache directory, threading layer,
how its OpenMP workers wait.

Why environment variables: numba reads them once, when it is imported; a user's own
``NUMBA_CACHE_DIR`` / ``NUMBA_THREADING_LAYER`` / ``OMP_WAIT_POLICY`` always wins.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from pathlib import Path
from typing import Any

from epoxy.kit.user_dirs import user_cache_dir

#: the folder under which compiled kernels are cached unless NUMBA_CACHE_DIR is set
CACHE_ENV = "EPOXY_CPU_JIT_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$EPOXY_CPU_JIT_CACHE_DIR``, else ``<user cache dir>/epoxy/numba``."""
    return user_cache_dir("numba", CACHE_ENV)


#: the jit tier's own folder, whose sources name the kernel cache
_SOURCES = Path(__file__).resolve().parent


def sources_digest(folder: Path = _SOURCES) -> str:
    """A digest of the jit tier's sources (``folder``'s ``.py`` files, names and contents).

    Why: numba keys a cached kernel on the stamp of its own file only, but the kernels inline
    or call helpers of other modules (``activations.activate``, ``fast_math``, the shared pad
    and row loops): an edit there left the machine code of every kernel using it stale,
    running the old helper (found when an activation code was added). The kernels are cached
    in a folder named after this digest instead, so any change of the tier's sources starts
    from an empty cache, and the same sources (another checkout, a reinstall) find theirs."""
    digest = hashlib.blake2b(digest_size=8)
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def installed_sources_digest() -> str:
    """:func:`sources_digest` of the installed tier, once per process: every cached kernel's
    locator asks (``kernel_cache.cache_folder``), ~150 of them at import, and reading and
    hashing the sources each time cost ~1 ms (0.1 s of a fresh process's session creation)."""
    return sources_digest()


def kernel_cache_dir() -> Path:
    """Where numba caches this version of the kernels: ``default_cache_dir() /
    sources-<sources_digest()>``."""
    return default_cache_dir() / f"sources-{installed_sources_digest()}"


def compiled_code_dir() -> Path:
    """Where compiled code is kept: the folder numba caches its kernels in (``NUMBA_CACHE_DIR``
    when the user set it, else :func:`kernel_cache_dir`); the LLVM-IR kernels keep their
    object code there too (``llvm_module.compile_functions``)."""
    chosen = os.environ.get("NUMBA_CACHE_DIR")
    return Path(chosen) if chosen else kernel_cache_dir()


def configure() -> None:
    """Point numba at our cache directory and a thread-safe threading layer, unless the user
    chose (a user's ``NUMBA_CACHE_DIR`` is used as given: clear it after editing the tier's
    sources); numba writes cache files to a temporary name and renames them, so two processes
    compiling the same kernel at once both end with a valid cache entry."""
    if not os.environ.get("NUMBA_CACHE_DIR"):
        os.environ["NUMBA_CACHE_DIR"] = str(kernel_cache_dir())
    if not os.environ.get("NUMBA_THREADING_LAYER"):
        os.environ["NUMBA_THREADING_LAYER"] = "threadsafe"
    # OpenMP workers that spin after a parallel kernel fight OpenBLAS's spinning workers for
    # the cores: measured on 2 cores, a 2-thread kernel launched right after a BLAS call took
    # 3.7-7 ms instead of 0.02 ms (docs/THREADING.md). Sleeping workers cost ~30 us to wake,
    # which the GRAIN in threads.py accounts for. Read by libgomp when it loads (numba's first
    # parallel launch), so it only applies when nothing loaded libgomp before.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    numba_config: Any = sys.modules.get("numba.core.config")
    if numba_config is not None:  # numba was imported before us: its config read the env already
        numba_config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]
        if numba_config.THREADING_LAYER == "default":
            numba_config.THREADING_LAYER = "threadsafe"
