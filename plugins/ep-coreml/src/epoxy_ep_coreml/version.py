"""Version of epoxy-ep-coreml."""

__version__ = "0.1.0"
