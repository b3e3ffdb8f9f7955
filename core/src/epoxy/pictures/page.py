"""The picture as one self-contained HTML page: the SVG inline, a legend, a details panel.

No CDN and no external file: the page must open from a bug report's attachment on a
machine without network. The node details travel as JSON in a ``<script
type="application/json">`` block (``<``, ``>`` and ``&`` escaped so a node name cannot close
it) and the script writes them with ``textContent`` only, never as markup.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from .layout import Placed
from .model import PartitionPicture, PictureNode, ValueInfo
from .svg import legend_rows, render_svg

STYLE = """
body{margin:0;font-family:system-ui,-apple-system,'Segoe UI',sans-serif;color:#222;background:#f6f7f9}
header{position:sticky;top:0;z-index:2;background:#fff;border-bottom:1px solid #ddd;padding:8px 14px;
 display:flex;flex-wrap:wrap;gap:14px;align-items:center}
header h1{font-size:15px;margin:0}
#legend{list-style:none;margin:0;padding:0;display:flex;flex-wrap:wrap;gap:10px;font-size:13px}
#legend li{display:flex;align-items:center;gap:5px}
#legend .swatch{width:14px;height:14px;border-radius:3px;border:1px solid #0004;display:inline-block}
#legend .fallback-key .swatch{background:none;border:2px dashed #c0392b}
#controls{display:flex;gap:6px;font-size:13px}
#layout{display:flex;align-items:flex-start}
#canvas{flex:1;overflow:auto;height:calc(100vh - 52px)}
#canvas svg{display:block}
aside{width:340px;height:calc(100vh - 52px);overflow:auto;background:#fff;border-left:1px solid #ddd;
 padding:10px 14px;font-size:13px;box-sizing:border-box}
aside h2{font-size:14px;margin:4px 0 8px}
aside dt{font-weight:600;margin-top:6px}
aside dd{margin:2px 0 0 10px;word-break:break-all}
.declined{color:#8a1c10}
g.node{cursor:pointer}
g.node.selected rect:first-of-type{stroke:#000;stroke-width:3}
g.node.dim,g.group.dim{opacity:.18}
"""

SCRIPT = """
(function(){
  var data = JSON.parse(document.getElementById('epoxy-nodes').textContent);
  var panel = document.getElementById('details');
  var svg = document.querySelector('#canvas svg');
  var pinned = null;
  function add(parent, tag, text, cls){
    var el = document.createElement(tag); el.textContent = text; if (cls) el.className = cls;
    parent.appendChild(el); return el;
  }
  function values(dl, title, list){
    add(dl, 'dt', title + ' (' + list.length + ')');
    list.forEach(function(v){ add(dl, 'dd', v[0] + ': ' + v[1] + (v[2] ? ' [' + v[2] + ']' : '')); });
  }
  function show(i){
    var n = data.nodes[i];
    panel.replaceChildren();
    add(panel, 'h2', n.op + ' \\u2014 ' + n.name);
    var dl = add(panel, 'dl', '');
    add(dl, 'dt', 'provider'); add(dl, 'dd', n.provider + (n.fallback ? ' (fallback)' : ''));
    if (n.group) { add(dl, 'dt', 'group'); add(dl, 'dd', n.group); }
    values(dl, 'inputs', n.inputs); values(dl, 'outputs', n.outputs);
    n.bodies.forEach(function(b){ add(dl, 'dt', 'subgraph ' + b[0]); add(dl, 'dd', b[1]); });
    add(dl, 'dt', 'declined by earlier providers');
    if (!n.declined.length) add(dl, 'dd', 'none (first provider to claim it)');
    n.declined.forEach(function(d){ add(dl, 'dd', d[0] + ': ' + d[1], 'declined'); });
  }
  function nodeOf(target){ return target && target.closest ? target.closest('g.node') : null; }
  svg.addEventListener('mouseover', function(e){ var g = nodeOf(e.target); if (g && !pinned) show(+g.dataset.index); });
  svg.addEventListener('click', function(e){ var g = nodeOf(e.target); pin(g && g !== pinned ? g : null); });
  function pin(g){
    if (pinned) pinned.classList.remove('selected');
    pinned = g; if (g) { g.classList.add('selected'); show(+g.dataset.index); }
  }
  // a link to page.html#node-12 opens with that node selected (for bug reports)
  var linked = /^#node-\\d+$/.test(location.hash) ? document.getElementById(location.hash.slice(1)) : null;
  if (linked) { pin(linked); linked.scrollIntoView({block: 'center', inline: 'center'}); }
  else if (document.getElementById('node-0')) {
    // a wide graph's first node need not sit at the top-left corner: start where it is
    document.getElementById('node-0').scrollIntoView({block: 'center', inline: 'center'});
  }
  var width = +svg.getAttribute('width'), height = +svg.getAttribute('height'), scale = 1;
  function zoom(s){ scale = s; svg.setAttribute('width', width * s); svg.setAttribute('height', height * s); }
  document.getElementById('zoom-in').onclick = function(){ zoom(scale * 1.25); };
  document.getElementById('zoom-out').onclick = function(){ zoom(scale / 1.25); };
  document.getElementById('zoom-fit').onclick = function(){
    var box = document.getElementById('canvas'); zoom(Math.min(1, box.clientWidth / width));
  };
  document.getElementById('find').addEventListener('input', function(e){
    var q = e.target.value.toLowerCase();
    document.querySelectorAll('g.node').forEach(function(g){
      var n = data.nodes[+g.dataset.index];
      var hit = !q || (n.name + ' ' + n.op + ' ' + n.provider).toLowerCase().indexOf(q) >= 0;
      g.classList.toggle('dim', !hit);
    });
  });
})();
"""


def _value(v: ValueInfo) -> list[str]:
    return [v.name, v.dtype, v.shape]


def node_record(node: PictureNode) -> dict[str, Any]:
    """What the details panel shows for one node (JSON-ready)."""
    return {"name": node.name, "op": node.op_type, "provider": node.provider, "group": node.group,
            "fallback": node.fallback, "inputs": [_value(v) for v in node.inputs],
            "outputs": [_value(v) for v in node.outputs], "declined": [list(d) for d in node.declined],
            "bodies": [list(b) for b in node.bodies]}


def script_json(payload: Any) -> str:
    """JSON safe inside a ``<script>`` element: no ``</script>``, no ``<!--``, no entity."""
    text = json.dumps(payload, ensure_ascii=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def render_page(picture: PartitionPicture, placed: Placed, *, title: str = "partition") -> str:
    """The complete HTML document."""
    legend = []
    for provider, count, colour in legend_rows(picture):
        legend.append(f'<li class="legend-entry" data-provider="{escape(provider)}" data-count="{count}">'
                      f'<span class="swatch" style="background:{colour}"></span>{escape(provider)} '
                      f'<b>{count}</b> node{"s" if count != 1 else ""}</li>')
    fallbacks = sum(n.fallback for n in picture.nodes)
    if fallbacks:
        legend.append(f'<li class="fallback-key"><span class="swatch"></span>fallback <b>{fallbacks}</b></li>')
    if picture.groups:
        legend.append(f'<li class="groups-key">groups <b>{len(picture.groups)}</b></li>')
    payload = {"nodes": [node_record(n) for n in picture.nodes], "notes": list(picture.notes)}
    notes = "".join(f"<dd>{escape(n)}</dd>" for n in picture.notes)
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>epoxy partition: {escape(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f'<header><h1>{escape(title)}</h1><span id="summary">{len(picture.nodes)} nodes \u00b7 providers '
        f'{escape(", ".join(picture.providers))}</span>',
        f'<ul id="legend">{"".join(legend)}</ul>',
        '<div id="controls"><input id="find" type="search" placeholder="find node, op, provider">'
        '<button id="zoom-out" title="zoom out">\u2212</button><button id="zoom-fit" title="fit width">fit</button>'
        '<button id="zoom-in" title="zoom in">+</button></div></header>',
        '<div id="layout"><div id="canvas">',
        render_svg(picture, placed, legend=False),
        '</div><aside><div id="details"><h2>hover or click a node</h2><p>op, values, provider and why '
        "earlier providers declined it show here.</p></div>"
        + (f"<dl><dt>notes</dt>{notes}</dl>" if notes else "") + "</aside></div>",
        f'<script type="application/json" id="epoxy-nodes">{script_json(payload)}</script>',
        f"<script>{SCRIPT}</script>",
        "</body></html>",
    ])
