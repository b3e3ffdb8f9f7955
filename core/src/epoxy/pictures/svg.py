"""The picture as SVG text: group frames, edges, node boxes, and (bare SVG) a legend.

Every name from the model is escaped (node names may hold ``<``, ``&`` or quotes). Each
node is a ``<g class="node">`` carrying ``data-index`` / ``data-provider`` so the page's
script and tests can find it; its ``<title>`` is the hover text where no script runs.
"""

from __future__ import annotations

from html import escape

from .colours import darker, provider_colours
from .layout import BOX_HEIGHT, BOX_WIDTH, PILL_HEIGHT, Placed
from .model import FALLBACK_PROVIDER, PartitionPicture, PictureIO, PictureNode

GROUP_PAD = 10.0
LEGEND_ROW = 20.0
FALLBACK_STROKE = "#c0392b"
FONT = "font-family:system-ui,-apple-system,'Segoe UI',sans-serif"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def node_tooltip(node: PictureNode) -> str:
    """The hover text: op, name, provider, values, and why earlier providers declined."""
    lines = [f"{node.op_type}  {node.name}", f"provider: {node.provider}"
             + (f"  group: {node.group}" if node.group else "") + ("  (fallback)" if node.fallback else "")]
    lines += [f"in  {v.name}: {v.dtype} {v.shape}".rstrip() for v in node.inputs]
    lines += [f"out {v.name}: {v.dtype} {v.shape}".rstrip() for v in node.outputs]
    lines += [f"{attr}: {where}" for attr, where in node.bodies]
    lines += [f"declined by {p}: {why}" for p, why in node.declined]
    return "\n".join(lines)


def legend_rows(picture: PartitionPicture) -> list[tuple[str, int, str]]:
    """``(provider, node count, colour)`` per provider that ran a node, priority order."""
    colours = provider_colours([*picture.providers, *(n.provider for n in picture.nodes)])
    return [(p, n, colours[p]) for p, n in picture.counts().items()]


def _legend(picture: PartitionPicture) -> list[str]:
    out = ['<g class="legend">']
    for row, (provider, count, colour) in enumerate(legend_rows(picture)):
        y = 10 + row * LEGEND_ROW
        out.append(f'<g class="legend-entry" data-provider="{escape(provider)}" data-count="{count}">'
                   f'<rect x="10" y="{y}" width="14" height="14" fill="{colour}" stroke="{darker(colour)}"/>'
                   f'<text x="30" y="{y + 12}">{escape(provider)} ({count} node{"s" if count != 1 else ""})'
                   '</text></g>')
    fallbacks = sum(n.fallback for n in picture.nodes)
    if fallbacks:
        y = 10 + len(legend_rows(picture)) * LEGEND_ROW
        out.append(f'<g class="legend-entry fallback-key"><rect x="10" y="{y}" width="14" height="14" fill="none" '
                   f'stroke="{FALLBACK_STROKE}" stroke-dasharray="4 2"/><text x="30" y="{y + 12}">'
                   f'{FALLBACK_PROVIDER} fallback ({fallbacks})</text></g>')
    out.append("</g>")
    return out


def legend_height(picture: PartitionPicture) -> float:
    """Room the bare SVG's legend takes above the graph."""
    return 20 + (len(picture.counts()) + 1) * LEGEND_ROW


def render_svg(picture: PartitionPicture, placed: Placed, *, legend: bool = True) -> str:
    """The whole ``<svg>`` element. ``legend``: draw the legend above the graph (the bare
    SVG); the HTML page shows its own legend instead."""
    colours = provider_colours([*picture.providers, *(n.provider for n in picture.nodes)])
    top = legend_height(picture) if legend else 0.0
    width, height = placed.width, placed.height + top
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="partition" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" data-node-count="{len(picture.nodes)}" style="{FONT}">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
           '<rect class="background" width="100%" height="100%" fill="#ffffff"/>']
    if legend:
        out += _legend(picture)
    out.append(f'<g class="graph" transform="translate(0 {top:.0f})">')
    out += _groups(picture, placed, colours)
    out.append('<g class="edges" fill="none" stroke="#555" stroke-width="1.2">')
    for edge, route in zip(picture.edges, placed.routes):
        out.append(f'<path class="edge" d="{_path(route)}" marker-end="url(#arrow)" data-source="{edge.source}" '
                   f'data-target="{edge.target}"><title>{escape(", ".join(edge.values))}</title></path>')
    for (index, _), route in zip(picture.io_edges(), placed.pill_routes):
        out.append(f'<path class="io-edge" d="{_path(route)}" marker-end="url(#arrow)" stroke-dasharray="2 2">'
                   f"<title>{escape(picture.io[index].value.name)}</title></path>")
    out.append("</g>")
    out.append('<g class="io-values">')
    for pill, (x, y) in zip(picture.io, placed.pills):
        out.append(_pill(pill, x, y))
    out.append("</g>")
    out.append('<g class="nodes">')
    for node, (x, y) in zip(picture.nodes, placed.boxes):
        out.append(_node(node, x, y, colours[node.provider]))
    out.append("</g></g></svg>")
    return "\n".join(out)


def _path(route: tuple[tuple[float, float], ...]) -> str:
    return " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(route))


def _pill(pill: PictureIO, x: float, y: float) -> str:
    value = pill.value
    text = f"{value.name} \u00b7 {value.dtype} {value.shape}".rstrip()
    return (f'<g class="io {pill.kind}" data-name="{escape(value.name)}"><title>{pill.kind} {escape(text)}</title>'
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{BOX_WIDTH:.0f}" height="{PILL_HEIGHT:.0f}" '
            f'rx="{PILL_HEIGHT / 2:.0f}" fill="#ffffff" stroke="#777"/><text x="{x + BOX_WIDTH / 2:.1f}" '
            f'y="{y + 16:.1f}" font-size="10" fill="#333" text-anchor="middle">{escape(_clip(text, 30))}</text></g>')


def _groups(picture: PartitionPicture, placed: Placed, colours: dict[str, str]) -> list[str]:
    out = ['<g class="groups">']
    for group in picture.groups:
        xs = [placed.boxes[i][0] for i in group.members]
        ys = [placed.boxes[i][1] for i in group.members]
        left, top = min(xs) - GROUP_PAD, min(ys) - GROUP_PAD - 14
        right, bottom = max(xs) + BOX_WIDTH + GROUP_PAD, max(ys) + BOX_HEIGHT + GROUP_PAD
        stroke = darker(colours[group.provider])
        out.append(f'<g class="group" data-group="{escape(group.label)}" data-provider="{escape(group.provider)}">'
                   f'<rect x="{left:.1f}" y="{top:.1f}" width="{right - left:.1f}" height="{bottom - top:.1f}" '
                   f'rx="8" fill="{colours[group.provider]}" fill-opacity="0.18" stroke="{stroke}" '
                   f'stroke-width="2"/><text x="{left + 8:.1f}" y="{top + 12:.1f}" font-size="11" fill="{stroke}">'
                   f'{escape(group.label)} \u00b7 {escape(group.provider)} \u00b7 {len(group.members)} nodes</text>'
                   '</g>')
    out.append("</g>")
    return out


def _node(node: PictureNode, x: float, y: float, fill: str) -> str:
    stroke = FALLBACK_STROKE if node.fallback else darker(fill)
    dash = ' stroke-dasharray="6 3"' if node.fallback else ""
    parts = [f'<g class="node{" fallback" if node.fallback else ""}" id="node-{node.index}" '
             f'data-index="{node.index}" data-provider="{escape(node.provider)}" tabindex="0">',
             f"<title>{escape(node_tooltip(node))}</title>",
             f'<rect x="{x:.1f}" y="{y:.1f}" width="{BOX_WIDTH:.0f}" height="{BOX_HEIGHT:.0f}" rx="5" '
             f'fill="{fill}" stroke="{stroke}" stroke-width="1.5"{dash}/>',
             f'<text x="{x + 8:.1f}" y="{y + 18:.1f}" font-size="13" font-weight="600" fill="#111">'
             f"{escape(_clip(node.op_type, 20))}</text>",
             f'<text x="{x + 8:.1f}" y="{y + 35:.1f}" font-size="10" fill="#333">{escape(_clip(node.name, 28))}</text>']
    if node.fallback:
        bx = x + BOX_WIDTH - 56
        parts.append(f'<g class="badge"><rect x="{bx:.1f}" y="{y + 4:.1f}" width="52" height="14" rx="7" '
                     f'fill="{FALLBACK_STROKE}"/><text x="{bx + 26:.1f}" y="{y + 14:.1f}" font-size="9" '
                     'fill="#fff" text-anchor="middle">fallback</text></g>')
    parts.append("</g>")
    return "".join(parts)
