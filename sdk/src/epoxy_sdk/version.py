"""Version of epoxy-sdk."""

__version__ = "0.1.2"
