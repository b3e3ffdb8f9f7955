"""One colour per provider, the same for a provider in every picture.

Known providers keep a fixed colour (a reader learns that cpu is grey); any other provider
(a vendor's plugin) takes the next free colour of a palette, in priority order. Light fills,
so the dark box text stays readable.
"""

from __future__ import annotations

from collections.abc import Sequence

#: provider name -> fill colour; a registry, so a provider gets its colour by adding one line
KNOWN: dict[str, str] = {
    "cpu": "#cfd4da",
    "openvino": "#8fb4f0",
    "cuda": "#a8d86e",
    "coreml": "#f2b38f",
    "core": "#eadb9a",  # control-flow nodes the core runs itself
}

PALETTE: tuple[str, ...] = (
    "#c3a6e0", "#86d0c8", "#f4a3c1", "#ffd27f", "#9fd3f7", "#c8b4a8", "#cde6a8", "#f7b7a3",
)


def provider_colours(providers: Sequence[str]) -> dict[str, str]:
    """Provider -> fill colour for the given providers (priority order decides palette turns)."""
    colours: dict[str, str] = {}
    free = [c for c in PALETTE if c not in KNOWN.values()]
    turn = 0
    for name in providers:
        if name in colours:
            continue
        if name in KNOWN:
            colours[name] = KNOWN[name]
        else:
            colours[name] = free[turn % len(free)]
            turn += 1
    return colours


def darker(colour: str, factor: float = 0.55) -> str:
    """A darker shade of ``#rrggbb`` for outlines and group frames (same hue as the fill)."""
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return "#{:02x}{:02x}{:02x}".format(*(int(v * factor) for v in (r, g, b)))
