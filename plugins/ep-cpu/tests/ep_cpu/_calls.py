"""Counting calls of a module function: proves which kernel path ran without timing it."""

from __future__ import annotations

from typing import Any


def counting(monkeypatch: Any, module: Any, name: str) -> list[int]:
    """Replace ``module.name`` (for this test) with a wrapper; returns the list it appends to."""
    calls: list[int] = []
    real = getattr(module, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)
    return calls
