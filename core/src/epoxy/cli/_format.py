"""Plain-text tables for CLI output (no dependency on rich)."""

from __future__ import annotations

from collections.abc import Sequence


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns; lines carry no trailing blanks (a long last column pads nothing)."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(s.rstrip() for s in out)


def providers_arg(text: str | None) -> list[str] | None:
    """``a,b`` -> ``["a", "b"]``; empty/None -> None (all available)."""
    if not text:
        return None
    return [p.strip() for p in text.split(",") if p.strip()]
