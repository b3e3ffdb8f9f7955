"""``epoxy partition --html`` end to end: the page rendered by headless Chromium.

Chromium (the distribution's package: ``apt-get install chromium``) loads the page from a
file URL with no network, runs its script, and gives back the DOM and a screenshot. The
model runs on openvino then cpu: two openvino groups with a Tile between them that openvino
declines (run-time repeats), so the page has two providers, group frames and a cpu fallback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
OPENVINO_FILL = (0x8F, 0xB4, 0xF0)  # epoxy.pictures.colours.KNOWN
CPU_FILL = (0xCF, 0xD4, 0xDA)


def _chromium() -> str | None:
    named = os.environ.get("EPOXY_CHROMIUM")
    return named or next((path for n in CHROMIUM_NAMES if (path := shutil.which(n))), None)


CHROMIUM = _chromium()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason=f"no Chromium binary on PATH (looked for {', '.join(CHROMIUM_NAMES)} "
                                                "and $EPOXY_CHROMIUM); install it: apt-get install chromium"),
    pytest.mark.skipif(find_spec("igraph") is None,
                       reason="igraph is not installed: pip install 'epoxy-core[pictures]' (nox -s pictures)"),
    pytest.mark.skipif(find_spec("epoxy_ep_openvino") is None or find_spec("openvino") is None,
                       reason="the page is checked with two providers: needs epoxy-ep-openvino and openvino"),
]


def model(path: Path) -> Path:
    rng = np.random.default_rng(0)

    def weight(name: str) -> TensorProto:
        return numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name='relu<2> & "q"'),
        helper.make_node("Add", ["r2", "r1"], ["s"], name="skip_add"),
        helper.make_node("Tile", ["s", "reps"], ["t"], name="tile"),
        helper.make_node("Conv", ["t", "w3"], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["y"], name="relu3"),
    ]
    graph = helper.make_graph(
        nodes, "picture",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32]),
         helper.make_tensor_value_info("reps", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None, None, None])],
        [weight("w1"), weight("w2"), weight("w3")],
    )
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


def epoxy(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "epoxy.cli.main", *args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr + result.stdout
    return result


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    command = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
               f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=2000", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("page")
    onnx_path = model(folder / "picture.onnx")
    html = folder / "partition.html"
    run = epoxy("partition", str(onnx_path), "--providers", "openvino,cpu", "--html", str(html),
                "--svg", str(folder / "partition.svg"))
    assert f"wrote {html} (8 nodes" in run.stderr
    report = json.loads(epoxy("partition", str(onnx_path), "--providers", "openvino,cpu", "--json").stdout)
    return html, report


def test_dom_has_the_legend_and_every_node(page, tmp_path):
    html, report = page
    assert report["summary"] == {"openvino": 7, "cpu": 1} and len(report["groups"]) == 2
    dom = chromium(tmp_path, "--dump-dom", f"{html.as_uri()}#node-5").stdout
    legend = dict(re.findall(r'<li class="legend-entry" data-provider="(\w+)" data-count="(\d+)"', dom))
    assert legend == {p: str(n) for p, n in report["summary"].items()}
    nodes = re.findall(r'<g class="node( fallback)?( selected)?" id="node-(\d+)"[^>]*data-provider="(\w+)"', dom)
    assert len(nodes) == len(report["nodes"]) == 8
    assert [provider for *_, provider in nodes] == [n["provider"] for n in report["nodes"]]
    assert [n for n in nodes if n[0]] == [(" fallback", " selected", "5", "cpu")]  # tile, selected by #node-5
    assert len(re.findall(r'<g class="group" data-group="openvino_\d"', dom)) == 2
    # the script ran: the linked node's details, with openvino's reason, are in the panel
    details = dom.split('<div id="details">')[1].split("</div>")[0]
    assert "Tile" in details and "openvino: known wrong in openvino" in details
    assert "float32" in details and "1x16x32x32" in details


def test_screenshot_shows_both_providers(page, tmp_path):
    Image = pytest.importorskip("PIL.Image", reason="Pillow checks the screenshot: pip install pillow")

    html, _ = page
    shot = tmp_path / "page.png"
    run = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1200,1000", html.as_uri())
    assert shot.exists(), run.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 50, "the screenshot is (almost) blank"
    present = {rgb for _, rgb in colours}
    assert OPENVINO_FILL in present and CPU_FILL in present


def test_page_works_offline_and_bare_svg_has_no_script(page):
    html, _ = page
    text = html.read_text(encoding="utf-8")
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', text)
    svg = html.with_suffix(".svg").read_text(encoding="utf-8")
    assert svg.startswith("<?xml") and "<script" not in svg and 'class="legend-entry" data-provider="openvino"' in svg
