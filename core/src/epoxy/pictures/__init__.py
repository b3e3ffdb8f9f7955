"""Pictures of a partition: which provider runs each node, drawn as a graph.

``picture_of(session)`` joins the partition report with the graph (model), ``lay_out``
places it top to bottom with igraph (layout), ``render_svg`` / ``render_page`` draw it
(SVG, or a self-contained HTML page with a legend and a details panel), and
``write_pictures`` does all of it for ``epoxy partition --html/--svg``.

The layout needs the ``pictures`` extra: ``pip install 'epoxy-core[pictures]'``.
"""

from __future__ import annotations

from .errors import INSTALL_HINT, PictureError, PicturesUnavailableError
from .layout import Placed, ensure_available, lay_out
from .model import PartitionPicture, PictureEdge, PictureGroup, PictureNode, ValueInfo, build_picture, picture_of
from .page import render_page
from .svg import render_svg
from .write import WRITERS, Written, write_pictures

__all__ = [
    "INSTALL_HINT", "PartitionPicture", "PictureEdge", "PictureError", "PictureGroup", "PictureNode",
    "PicturesUnavailableError", "Placed", "ValueInfo", "WRITERS", "Written", "build_picture", "ensure_available",
    "lay_out", "picture_of", "render_page", "render_svg", "write_pictures",
]
