"""epoxy execution provider 'example': a kernel provider: numpy kernels in an epoxy.kit.KernelRegistry, run node by node.

Importing this package imports no driver or compiler; ``create()`` does what is heavy.
"""

from .version import __version__

__all__ = ["__version__"]
