"""numba's on-disk cache of the jit tier's kernels, found by package rather than by install folder.

Why: numba names a cached function's folder after a hash of the absolute path of its source
folder, so every venv, reinstall or checkout of the same epoxy-ep-cpu compiled every kernel
again: a clean CI run compiled them once per nox session, each in its own venv (the package's
path differs), and a user's second venv started cold. Here the jit tier's kernels are cached
in one folder named after the package, ``<cache dir>/epoxy_ep_cpu.jit``; the cache dir is
already named after the tier's sources digest (``config.kernel_cache_dir``), and each entry
is stamped with its file's content hash (not its mtime, which a reinstall changes), so the same
sources share their kernels wherever they are installed and different sources never do. With
a ``NUMBA_CACHE_DIR`` the user chose (not named after the sources), the folder carries the
digest itself.

Imported by every module that defines ``cache=True`` kernels, before its first one: numba
picks a dispatcher's locator when the dispatcher is made. numba's own locators still serve
everything else (a user's functions, the generated elementwise and share modules, which live
in the cache dir already). A ``NUMBA_CACHE_LOCATOR_CLASSES`` the user set wins over this.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Any

from numba.core import caching
from numba.core import config as numba_config

from . import cached_loading
from .config import installed_sources_digest, kernel_cache_dir

#: the folder whose modules' kernels this locator serves (the jit tier's own)
JIT_FOLDER = Path(__file__).resolve().parent
#: the package-relative name of that folder, the cache subfolder's name
PACKAGE = f"{JIT_FOLDER.parent.name}.{JIT_FOLDER.name}"


@functools.lru_cache(maxsize=8)
def cache_folder(cache_dir: str) -> str:
    """Where the jit tier's kernels go under numba's cache dir ``cache_dir`` (once per dir:
    every kernel's locator asks)."""
    if Path(cache_dir) == kernel_cache_dir():
        return os.path.join(cache_dir, PACKAGE)  # the dir names the sources already
    return os.path.join(cache_dir, f"{PACKAGE}-sources-{installed_sources_digest()}")


@functools.cache
def _content_stamp(path: str, mtime_ns: int, size: int) -> str:
    """The file's content hash (memoized per stat, so an edit while running is seen)."""
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


#: numba's base class of its locators, and the class holding their list (``CacheImpl`` since
#: numba 0.61, ``_CacheImpl`` before); a numba without them keeps its own locators
_LOCATOR_BASE: type = getattr(caching, "_CacheLocator", object)
_CACHE_IMPL: Any = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)


class InstalledKernelLocator(_LOCATOR_BASE):  # type: ignore[misc,valid-type]
    """Locates the cache of a kernel defined in the jit tier's folder (see the module docstring)."""

    def __init__(self, py_func: Any, py_file: str) -> None:
        self._py_file = py_file  # numba's cache warnings name it
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = cache_folder(numba_config.CACHE_DIR)

    def get_cache_path(self) -> str:
        return self._cache_path

    def get_source_stamp(self) -> str:
        st = os.stat(self._py_file)
        return _content_stamp(self._py_file, st.st_mtime_ns, st.st_size)

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> InstalledKernelLocator | None:
        if not numba_config.CACHE_DIR or not _in_jit_folder(py_file):
            return None
        return cls(py_func, py_file)


@functools.lru_cache(maxsize=256)
def _in_jit_folder(py_file: str) -> bool:
    """Whether ``py_file`` is one of the jit tier's modules (once per file: each of its kernels asks)."""
    try:
        return Path(py_file).resolve().parent == JIT_FOLDER
    except (OSError, ValueError):  # a placeholder file name ("<string>")
        return False


def install() -> bool:
    """Put :class:`InstalledKernelLocator` first in numba's locator list (once); False when this
    numba has no such list (its own locators then serve the kernels, one folder per install)."""
    classes = getattr(_CACHE_IMPL, "_locator_classes", None)
    if _LOCATOR_BASE is object or not isinstance(classes, list):
        return False
    if InstalledKernelLocator not in classes:
        classes.insert(0, InstalledKernelLocator)
    return True


install()
cached_loading.install(InstalledKernelLocator)  # and they load without numba's full target refresh
