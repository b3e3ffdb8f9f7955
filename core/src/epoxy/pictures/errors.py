"""Errors of the partition picture: a missing optional dependency, a report that does not fit its graph."""

from __future__ import annotations

from ..errors import EpoxyError

INSTALL_HINT = "pip install 'epoxy-core[pictures]'"


class PicturesUnavailableError(EpoxyError, ImportError):
    """The layout library (the ``pictures`` extra) is not installed; the message says how to get it."""

    def __init__(self, missing: str) -> None:
        super().__init__(f"the partition picture needs {missing} for its layout, which is not installed: "
                         f"{INSTALL_HINT}")
        self.missing = missing


class PictureError(EpoxyError, ValueError):
    """The partition report names a node the graph does not hold (or the reverse)."""

    def __init__(self, message: str, *, node: str | None = None) -> None:
        super().__init__(message)
        self.node = node
