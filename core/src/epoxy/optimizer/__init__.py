"""Graph optimizer: passes registered through the plugin manager, run by level."""

from .pipeline import LEVEL_ORDER, optimize

__all__ = ["LEVEL_ORDER", "optimize"]
