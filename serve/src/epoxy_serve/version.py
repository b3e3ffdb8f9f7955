"""Version of epoxy-serve."""

__version__ = "0.1.0"
