"""Version of epoxy-ep-cpu."""

__version__ = "0.1.0"
