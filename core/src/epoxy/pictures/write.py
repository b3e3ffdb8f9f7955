"""Write a session's partition picture to a file: one writer per format, chosen by name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .layout import Placed, lay_out
from .model import PartitionPicture, picture_of
from .page import render_page
from .svg import render_svg


def _page(picture: PartitionPicture, placed: Placed, title: str) -> str:
    return render_page(picture, placed, title=title)


def _bare_svg(picture: PartitionPicture, placed: Placed, title: str) -> str:
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + render_svg(picture, placed, legend=True) + "\n"


#: format -> renderer (picture, layout, title) -> document text
WRITERS: dict[str, Callable[[PartitionPicture, Placed, str], str]] = {"html": _page, "svg": _bare_svg}


@dataclass(frozen=True)
class Written:
    """What was written: the file, the node count, how long the layout took."""

    path: Path
    nodes: int
    layout_seconds: float


def write_pictures(session: Any, targets: dict[str, str | Path], *, title: str = "partition") -> list[Written]:
    """Write the picture of ``session`` in each format of ``targets`` (``{"html": "p.html"}``);
    the layout is computed once for all of them."""
    unknown = [k for k in targets if k not in WRITERS]
    if unknown:
        raise ValueError(f"unknown picture format {unknown[0]!r} (known: {', '.join(WRITERS)})")
    picture = picture_of(session)
    placed = lay_out(picture)
    written = []
    for kind, target in targets.items():
        path = Path(target)
        path.write_text(WRITERS[kind](picture, placed, title), encoding="utf-8")
        written.append(Written(path, len(picture.nodes), placed.seconds))
    return written
