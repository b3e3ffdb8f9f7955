"""Version of epoxy-ep-cuda."""

__version__ = "0.1.0"
