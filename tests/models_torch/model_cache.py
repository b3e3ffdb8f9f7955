"""Each zoo model is exported once per test run, whichever test (and pytest-xdist worker)
asks first: the file is written under a lock in a folder every worker shares, then reused.
A case's cpu test and openvino test, and every tool run on an exported model, read the
same file."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock, at worst a model is exported twice
    fcntl = None  # type: ignore[assignment]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+") as handle:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)


class ModelStore:
    """Model files by key under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def get(self, key: str, write: Callable[[Path], None]) -> Path:
        """The model file for ``key``, written by ``write(path)`` if no test wrote it yet.
        ``write`` works in a folder of its own (tools leave side files), then the file is
        moved into place, so a reader never sees half a model."""
        target = self.root / f"{key}.onnx"
        if target.exists():
            return target
        with _locked(self.root / f"{key}.lock"):
            if not target.exists():
                work = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=self.root))
                try:
                    write(work / "model.onnx")
                    os.replace(work / "model.onnx", target)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
        return target
