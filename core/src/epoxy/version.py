"""Version of epoxy-core (read by hatchling without importing the package)."""

__version__ = "0.1.0"
