"""epoxy-ep-cuda: the CUDA execution provider, built on CuPy (imported lazily, never here)."""

from .version import __version__

__all__ = ["__version__"]
