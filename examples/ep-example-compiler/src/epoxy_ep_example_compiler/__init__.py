"""epoxy execution provider 'example_compiler': a compiling provider: elementwise ops claimed as fused groups, each compiled to one callable.

Importing this package imports no driver or compiler; ``create()`` does what is heavy.
"""

from .version import __version__

__all__ = ["__version__"]
