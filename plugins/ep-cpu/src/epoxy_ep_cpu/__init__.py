"""epoxy-ep-cpu: the numpy execution provider (and epoxy's fallback)."""

from .version import __version__

__all__ = ["__version__"]
