"""Top-to-bottom coordinates for the picture, from igraph's Sugiyama layout.

Why igraph: its layered (Sugiyama) layout is C code, so a graph of a few thousand nodes
lays out in about a second, where grandalf (pure Python, the other well-kept choice) takes
minutes at that size; it ships wheels for every platform we test, and it routes every edge
that spans several layers through waypoints (its dummy vertices), which become the edges'
paths. It is the ``pictures`` extra: ``pip install 'epoxy-core[pictures]'``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from .errors import PicturesUnavailableError
from .model import PartitionPicture

#: a node box, in px; the layout's unit slot is a box plus its gap
BOX_WIDTH = 168.0
BOX_HEIGHT = 44.0
PILL_HEIGHT = 24.0  # a graph input/output, centred in its slot
H_GAP = 28.0
V_GAP = 40.0
MARGIN = 36.0
#: crossing-reduction sweeps: igraph's default (100) for ordinary models; past this many
#: nodes fewer, since the sweeps dominate the time (3275 nodes: 7.3 s at 100, 3.2 s at 30)
#: and a graph that large is read by search and zoom, not by following every crossing
LARGE_GRAPH = 1000
LARGE_GRAPH_SWEEPS = 30

Point = tuple[float, float]


@dataclass(frozen=True)
class Placed:
    """Where everything goes: top-left corner of each node's box (picture order), each edge's
    path from the source's bottom to the target's top (picture order), the canvas size."""

    boxes: tuple[Point, ...]
    routes: tuple[tuple[Point, ...], ...]
    width: float
    height: float
    seconds: float
    #: top-left of each input/output pill, and a path per ``PartitionPicture.io_edges()``
    pills: tuple[Point, ...] = ()
    pill_routes: tuple[tuple[Point, ...], ...] = ()


def _igraph() -> Any:
    try:
        return import_module("igraph")
    except ImportError as exc:
        raise PicturesUnavailableError("igraph") from exc


def ensure_available() -> None:
    """Raise :class:`PicturesUnavailableError` now when the layout library is missing, before
    a caller spends time building a session it could not draw."""
    _igraph()


def lay_out(picture: PartitionPicture) -> Placed:
    """Layers top to bottom (producers above consumers), crossings reduced by igraph."""
    igraph = _igraph()
    start = time.perf_counter()
    count, pills = len(picture.nodes), len(picture.io)
    # one vertex per node, then one per pill; arrows always point down the page
    io_pairs = [(count + i, n) if picture.io[i].kind == "input" else (n, count + i) for i, n in picture.io_edges()]
    pairs = [(e.source, e.target) for e in picture.edges] + io_pairs
    graph = igraph.Graph(n=count + pills, edges=pairs, directed=True)
    sweeps = 100 if count <= LARGE_GRAPH else LARGE_GRAPH_SWEEPS
    layout = graph.layout_sugiyama(hgap=1, vgap=1, maxiter=sweeps) if count + pills else None
    coords = [tuple(c) for c in layout.coords[:count + pills]] if layout is not None else []
    routing = list(getattr(layout, "edge_routing", None) or [[] for _ in pairs])

    def corner(x: float, y: float) -> Point:
        return (MARGIN + x * (BOX_WIDTH + H_GAP), MARGIN + y * (BOX_HEIGHT + V_GAP))

    slots = [corner(x, y) for x, y in coords]
    boxes = tuple(slots[:count])
    pill_boxes = tuple((x, y + (BOX_HEIGHT - PILL_HEIGHT) / 2) for x, y in slots[count:])
    tops = [*boxes, *pill_boxes]
    heights = [BOX_HEIGHT] * count + [PILL_HEIGHT] * pills
    routes = []
    for (source, target), waypoints in zip(pairs, routing):
        sx, sy = tops[source]
        tx, ty = tops[target]
        # a waypoint stands where a box of its layer would: pass through that box's centre
        via = tuple((x + BOX_WIDTH / 2, y + BOX_HEIGHT / 2)
                    for x, y in (corner(float(a), float(b)) for a, b in waypoints))
        routes.append(((sx + BOX_WIDTH / 2, sy + heights[source]), *via, (tx + BOX_WIDTH / 2, ty)))
    right = max([x + BOX_WIDTH for x, _ in tops] + [x for route in routes for x, _ in route] + [0.0])
    bottom = max([y + BOX_HEIGHT for _, y in boxes] + [y + PILL_HEIGHT for _, y in pill_boxes] + [0.0])
    edges = len(picture.edges)
    return Placed(boxes, tuple(routes[:edges]), right + MARGIN, bottom + MARGIN, time.perf_counter() - start,
                  pill_boxes, tuple(routes[edges:]))
