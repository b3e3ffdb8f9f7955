"""The partition picture: graph model, SVG/HTML writers, igraph layout, ``epoxy partition --html``.

The session runs on test providers: ``fuser`` (one compiled group), ``sim`` (single nodes)
and the mini ``cpu`` (the fallback), so the picture has three providers, a group and a
fallback. The writers are checked on a hand-made layout (no igraph needed); the layout and
the CLI need the ``pictures`` extra and skip, saying so, without it.
"""

from __future__ import annotations

import html
import json
import re
import sys
from importlib.util import find_spec

import numpy as np
import pytest
from fakes import fuser_factory, sim_factory
from onnx import GraphProto, TensorProto, helper, numpy_helper

from epoxy import InferenceSession
from epoxy.pictures import (
    PictureError,
    PicturesUnavailableError,
    Placed,
    build_picture,
    lay_out,
    picture_of,
    render_page,
    render_svg,
)
from epoxy.pictures.colours import KNOWN, provider_colours
from epoxy.pictures.layout import BOX_HEIGHT, BOX_WIDTH

ADD = 'add<1> & "a"'
RELU = "relu 'r' </script>"
needs_igraph = pytest.mark.skipif(find_spec("igraph") is None,
                                  reason="igraph (epoxy-core[pictures]) is not installed; `nox -s pictures` runs this")


def model():
    """x -> Add -> Relu -> Neg -> Sub -> y, plus a skip edge Add -> Sub; awkward node names."""
    one = numpy_helper.from_array(np.ones((2, 3), np.float32), "one")
    nodes = [
        helper.make_node("Add", ["x", "one"], ["a"], name=ADD),
        helper.make_node("Relu", ["a"], ["r"], name=RELU),
        helper.make_node("Neg", ["r"], ["n"], name="neg"),
        helper.make_node("Sub", ["n", "a"], ["y"], name="sub"),
    ]
    graph = helper.make_graph(nodes, "picture", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], initializer=[one])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def session(make_registry):
    registry = make_registry(fuser_factory([[ADD, RELU]]), sim_factory(ops=("Neg", "Relu")))
    return InferenceSession(model(), providers=["fuser", "sim", "cpu"], registry=registry)


def grid(picture) -> Placed:
    """One node per row, a straight path per edge: a layout that needs no igraph."""
    boxes = tuple((40.0, 40.0 + 80.0 * i) for i in range(len(picture.nodes)))
    routes = tuple(((boxes[e.source][0] + 5, boxes[e.source][1] + BOX_HEIGHT),
                    (boxes[e.target][0] + 5, boxes[e.target][1])) for e in picture.edges)
    pills = tuple((250.0, 40.0 + 80.0 * i) for i in range(len(picture.io)))
    pill_routes = tuple((pills[p], boxes[n]) for p, n in picture.io_edges())
    return Placed(boxes, routes, 500.0, 40.0 + 80.0 * len(boxes), 0.0, pills, pill_routes)


def test_model_joins_report_and_graph(session):
    picture = picture_of(session)
    by_name = {n.name: n for n in picture.nodes}
    assert list(by_name) == [ADD, RELU, "neg", "sub"]
    assert {n: by_name[n].provider for n in by_name} == {ADD: "fuser", RELU: "fuser", "neg": "sim", "sub": "cpu"}
    assert picture.counts() == {"fuser": 2, "sim": 1, "cpu": 1}
    (group,) = picture.groups
    assert group.provider == "fuser" and [picture.nodes[i].name for i in group.members] == [ADD, RELU]
    sub = by_name["sub"]
    assert sub.fallback and not by_name["neg"].fallback
    assert dict(sub.declined)["sim"] == "sim device has no Sub"
    assert [(v.name, v.dtype, v.shape) for v in sub.inputs] == [("n", "float32", "2x3"), ("a", "float32", "2x3")]
    edges = {(picture.nodes[e.source].name, picture.nodes[e.target].name) for e in picture.edges}
    assert edges == {(ADD, RELU), (RELU, "neg"), ("neg", "sub"), (ADD, "sub")}


def test_graph_inputs_and_outputs_are_pills_not_nodes(session):
    picture = picture_of(session)  # "one" is an initializer: a weight, not drawn
    assert [(p.kind, p.value.name, p.value.shape, p.nodes) for p in picture.io] == [
        ("input", "x", "2x3", (0,)), ("output", "y", "2x3", (3,))]
    svg = render_svg(picture, grid(picture))
    assert re.findall(r'<g class="io (\w+)" data-name="(\w+)"', svg) == [("input", "x"), ("output", "y")]
    assert 'data-node-count="4"' in svg and "y \u00b7 float32 2x3" in svg


def test_control_flow_node_lists_where_its_bodies_ran(make_registry):
    def body(op: str, out: str) -> GraphProto:
        return helper.make_graph([helper.make_node(op, ["x"], [out], name=f"body_{op.lower()}")], op, [],
                                 [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2, 3])])

    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="branch", then_branch=body("Relu", "t"),
                          else_branch=body("Neg", "e"))], "cf",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]), cond],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    registry = make_registry(sim_factory(ops=("Relu",)))
    picture = picture_of(InferenceSession(onnx_model, providers=["sim", "cpu"], registry=registry))
    (node,) = picture.nodes
    assert node.provider == "core" and dict(node.bodies) == {"then_branch": "1 on sim", "else_branch": "1 on cpu"}
    page = render_page(picture, grid(picture))
    assert json.loads(page.split('id="epoxy-nodes">')[1].split("</script>")[0])["nodes"][0]["bodies"] == [
        ["then_branch", "1 on sim"], ["else_branch", "1 on cpu"]]
    assert "then_branch: 1 on sim" in render_svg(picture, grid(picture))


def test_mismatched_report_names_the_node(session):
    report = session.partition_report()
    report.nodes[2].node = "renamed"
    try:
        with pytest.raises(PictureError, match="'neg'") as info:
            build_picture(report, session._graph)
        assert info.value.node == "neg"
    finally:
        report.nodes[2].node = "neg"


def test_svg_has_a_box_per_node_coloured_by_provider(session):
    picture = picture_of(session)
    svg = render_svg(picture, grid(picture))
    colours = provider_colours(picture.providers)
    assert colours["cpu"] == KNOWN["cpu"] and len({colours[p] for p in ("fuser", "sim", "cpu")}) == 3
    nodes = re.findall(r'<g class="node[^"]*" id="node-\d+" data-index="\d+" data-provider="(\w+)".*?'
                       r'<rect [^>]*fill="(#[0-9a-f]{6})"', svg, re.S)
    assert len(nodes) == 4 and 'data-node-count="4"' in svg
    assert all(fill == colours[provider] for provider, fill in nodes)
    legend = re.findall(r'class="legend-entry" data-provider="(\w+)" data-count="(\d+)"', svg)
    assert legend == [("fuser", "2"), ("sim", "1"), ("cpu", "1")]
    assert svg.count('<path class="edge"') == 4


def test_group_is_boxed_around_its_nodes(session):
    picture = picture_of(session)
    placed = grid(picture)
    svg = render_svg(picture, placed, legend=False)
    (frame,) = re.findall(r'<g class="group" data-group="fused0" data-provider="fuser"><rect x="([\d.]+)" '
                          r'y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"', svg)
    left, top, width, height = map(float, frame)
    for i in picture.groups[0].members:
        x, y = placed.boxes[i]
        assert left < x and x + BOX_WIDTH < left + width and top < y and y + BOX_HEIGHT < top + height
    neg = placed.boxes[2]
    assert not (top < neg[1] < top + height)  # the sim node is outside the fuser's frame
    assert "fused0 \u00b7 fuser \u00b7 2 nodes" in svg


def test_fallback_is_dashed_with_a_badge_and_a_reason(session):
    picture = picture_of(session)
    svg = render_svg(picture, grid(picture))
    fallbacks = re.findall(r'<g class="node fallback"[^>]*data-provider="(\w+)"[^>]*><title>([^<]*)</title><rect [^>]*'
                           r'stroke-dasharray', svg)
    assert [p for p, _ in fallbacks] == ["cpu"]
    assert "declined by sim: sim device has no Sub" in fallbacks[0][1]
    assert svg.count('class="badge"') == 1 and ">fallback</text>" in svg


def test_names_are_escaped(session):
    picture = picture_of(session)
    svg = render_svg(picture, grid(picture))
    page = render_page(picture, grid(picture), title="<model>.onnx")
    for text in (svg, page):
        assert ADD not in text and html.escape(ADD) in text
    assert "relu 'r' </script>" not in page and "<title>epoxy partition: &lt;model&gt;.onnx</title>" in page
    payload = page.split('<script type="application/json" id="epoxy-nodes">')[1].split("</script>")[0]
    assert json.loads(payload)["nodes"][1]["name"] == RELU


def test_page_is_self_contained(session):
    picture = picture_of(session)
    page = render_page(picture, grid(picture))
    assert not re.search(r'(src|href)="(https?:)?//', page) and "@import" not in page
    assert page.count('<li class="legend-entry"') == 3 and len(re.findall(r'<g class="node( fallback)?"', page)) == 4
    records = json.loads(page.split('id="epoxy-nodes">')[1].split("</script>")[0])["nodes"]
    assert records[3]["declined"] == [list(d) for d in picture.nodes[3].declined] and records[3]["fallback"]


@needs_igraph
def test_layout_is_top_to_bottom_and_edges_follow_it(session):
    picture = picture_of(session)
    placed = lay_out(picture)
    ys = [y for _, y in placed.boxes]
    for edge, route in zip(picture.edges, placed.routes):
        assert ys[edge.source] < ys[edge.target]
        sx, sy = placed.boxes[edge.source]
        tx, ty = placed.boxes[edge.target]
        assert route[0] == (sx + BOX_WIDTH / 2, sy + BOX_HEIGHT) and route[-1] == (tx + BOX_WIDTH / 2, ty)
    skip = next(r for e, r in zip(picture.edges, placed.routes)
                if (picture.nodes[e.source].name, picture.nodes[e.target].name) == (ADD, "sub"))
    assert len(skip) > 2  # spans three layers: routed through the layout's waypoints
    (x_pill, y_pill) = placed.pills
    assert x_pill[1] < ys[0] and y_pill[1] > ys[3]  # the feed above its reader, the output below its writer
    assert len(placed.pill_routes) == 2
    assert placed.width >= max(x for x, _ in placed.boxes) + BOX_WIDTH


@needs_igraph
def test_large_graph_lays_out_quickly():
    from epoxy.pictures import PartitionPicture, PictureEdge, PictureNode

    count = 2000
    nodes = tuple(PictureNode(i, f"n{i}", "Add", "cpu", None, (), (), ()) for i in range(count))
    edges = tuple(PictureEdge(i, i + 1, (f"v{i}",)) for i in range(count - 1)) + tuple(
        PictureEdge(i, i + 5, (f"w{i}",)) for i in range(0, count - 5, 4))
    placed = lay_out(PartitionPicture(("cpu",), nodes, edges, ()))
    assert len(placed.boxes) == count and placed.seconds < 20


def test_missing_igraph_says_how_to_install(monkeypatch, session):
    monkeypatch.setitem(sys.modules, "igraph", None)  # import igraph now raises ImportError
    with pytest.raises(PicturesUnavailableError, match=re.escape("pip install 'epoxy-core[pictures]'")):
        lay_out(picture_of(session))


def test_cli_without_igraph_fails_with_the_install_hint(monkeypatch, tmp_path, capsys):
    from epoxy.cli.main import main

    monkeypatch.setitem(sys.modules, "igraph", None)
    path = tmp_path / "m.onnx"
    path.write_bytes(model().SerializeToString())
    assert main(["partition", str(path), "--html", str(tmp_path / "p.html")]) == 1
    assert "pip install 'epoxy-core[pictures]'" in capsys.readouterr().err
    assert not (tmp_path / "p.html").exists()


def test_help_has_an_example(capsys):
    from epoxy.cli.main import main

    with pytest.raises(SystemExit):
        main(["partition", "--help"])
    out = capsys.readouterr().out
    assert "--html OUT.html" in out and "example:" in out and "--html partition.html" in out
