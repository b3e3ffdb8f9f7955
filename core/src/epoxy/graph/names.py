"""Fresh value and node names: rewrites (function inlining, optimizer passes) must never
reuse a name the model already has."""

from __future__ import annotations


class FreshNames:
    """Unique names derived from a base (``base``, ``base_2``...), recorded in ``used``."""

    def __init__(self, used: set[str]) -> None:
        self.used = used

    def __call__(self, base: str) -> str:
        candidate, k = base, 1
        while candidate in self.used:
            k += 1
            candidate = f"{base}_{k}"
        self.used.add(candidate)
        return candidate
