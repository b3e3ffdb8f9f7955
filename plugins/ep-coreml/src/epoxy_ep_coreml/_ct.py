"""Lazy, quiet access to coremltools.

Importing coremltools costs seconds (it pulls in sympy) and, off macOS or with untested
versions of optional frameworks installed, logs warnings ("Failed to load _MLModelProxy",
"scikit-learn version ... is not supported") and shows tqdm progress bars while converting.
Everything in this package reaches coremltools through here, so none of that is paid at
plugin import and none of it reaches the user's terminal.
"""

from __future__ import annotations

import contextlib
import io
import logging
import threading
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import Any

_lock = threading.Lock()
_module: ModuleType | None = None


@contextlib.contextmanager
def quiet() -> Iterator[io.StringIO]:
    """Silence coremltools' logger, Python warnings and stdout/stderr chatter (progress bars)."""
    logger = logging.getLogger("coremltools")
    old_level, old_propagate = logger.level, logger.propagate
    logger.setLevel(logging.ERROR)
    buffer = io.StringIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with contextlib.redirect_stderr(buffer), contextlib.redirect_stdout(buffer):
                yield buffer
    finally:
        logger.setLevel(old_level)
        logger.propagate = old_propagate


def coremltools() -> ModuleType:
    """``import coremltools``, once, quietly."""
    global _module
    if _module is None:
        with _lock:
            if _module is None:
                with quiet():
                    import coremltools as ct

                    # submodules used later, imported while still quiet
                    import coremltools.converters.mil
                _module = ct
    return _module


def mil() -> Any:
    """Namespace with MIL's ``Builder``, ``Function``, ``Program`` and ``types``."""
    coremltools()
    from types import SimpleNamespace

    from coremltools.converters.mil.mil import Builder, Function, Program, types

    return SimpleNamespace(Builder=Builder, Function=Function, Program=Program, types=types)
