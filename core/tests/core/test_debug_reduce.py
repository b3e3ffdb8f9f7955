"""epoxy.debug.reduce and ``epoxy reduce``: a planted wrong kernel shrinks to a few nodes that
still diverge, a raising kernel to one node that still raises, fed with real values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from debug_fakes import chain_model, planted_registry

from epoxy import plugins
from epoxy.cli.main import main
from epoxy.debug import reduce, validate
from epoxy.debug.reduce import MODES
from epoxy.debug.references import session_capture
from epoxy.debug.subgraph import connected, extract
from epoxy.errors import InvalidArgumentError, KernelError


@pytest.fixture
def registry() -> Any:
    return planted_registry()


@pytest.mark.parametrize("guess", [True, False])
def test_diverges_reduces_to_the_planted_relu(registry: Any, guess: bool) -> None:
    case = reduce(chain_model(), ["buggy"], mode="diverges", registry=registry, guess=guess)
    assert 1 <= len(case.nodes) <= 3 and "Relu" in case.op_types and "relu_planted" in case.nodes
    assert case.original_nodes == 20 and case.tries >= 1
    onnx.checker.check_model(case.model)
    # the reduced model still diverges on its own, from its written feeds
    again = validate(case.model, ["buggy"], feeds=case.feeds, registry=registry)
    assert again.first is not None and again.first.node == "relu_planted"
    assert validate(case.model, ["cpu"], feeds=case.feeds, registry=registry).passed


@pytest.mark.parametrize("guess", [True, False])
def test_fails_reduces_to_one_node_that_still_raises(registry: Any, guess: bool) -> None:
    case = reduce(chain_model(), ["raiser"], registry=registry, guess=guess)  # mode chosen: it raises
    assert case.mode == "fails" and case.op_types == ["Neg"] and len(case.nodes) == 1
    assert "planted failure" in case.detail
    tested, _ = session_capture(case.model, ["raiser"], case.feeds, registry=registry)
    assert isinstance(tested.error, KernelError)


def test_feeds_are_the_real_intermediate_values(registry: Any) -> None:
    model = chain_model()
    x = np.random.default_rng(4).standard_normal((2, 8)).astype(np.float32)
    case = reduce(model, ["buggy"], feeds={"x": x}, registry=registry)
    full, _ = session_capture(model, ["cpu"], {"x": x}, registry=registry, optimize=False)
    assert case.feeds and all(np.array_equal(v, full.values[k]) for k, v in case.feeds.items())


def test_nothing_to_reduce_says_so(registry: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="does not diverge"):
        reduce(chain_model(), ["cpu"], mode="diverges", registry=registry)
    with pytest.raises(InvalidArgumentError, match="runs without error"):
        reduce(chain_model(), ["buggy"], mode="fails", registry=registry)
    with pytest.raises(InvalidArgumentError, match="mode"):
        reduce(chain_model(), ["buggy"], mode="explodes", registry=registry)
    assert MODES == ("fails", "diverges")


def test_max_tries_bounds_the_search(registry: Any) -> None:
    case = reduce(chain_model(), ["buggy"], mode="diverges", registry=registry, guess=False, max_tries=2)
    assert case.tries <= 2


def test_candidates_are_connected_subgraphs() -> None:
    model = chain_model()
    index = {n.name: i for i, n in enumerate(model.graph.node)}
    assert connected(model, [index["mm2"], index["add3"], index["relu_planted"]])
    assert not connected(model, [index["mm1"], index["relu_planted"]])
    values = {"t9": np.zeros((1, 8), np.float32)}
    sub = extract(model, [index["add3"], index["relu_planted"]], values, {})
    assert [i.name for i in sub.model.graph.input] == ["t9"]
    assert [o.name for o in sub.model.graph.output] == ["t10", "t11"]
    assert [t.name for t in sub.model.graph.initializer] == ["b"]


def test_cli_writes_the_case_and_the_rerun_line(registry: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                capsys: Any) -> None:
    monkeypatch.setattr(plugins, "_default_registry", registry)
    model = tmp_path / "chain.onnx"
    onnx.save(chain_model(), str(model))
    out_dir = tmp_path / "repro"
    assert main(["reduce", str(model), "--providers", "buggy", "--diverges", "-o", str(out_dir)]) == 0
    printed = capsys.readouterr().out
    assert "relu_planted (Relu)" in printed and "epoxy validate" in printed
    assert (out_dir / "reduced.onnx").exists() and (out_dir / "feeds.npz").exists()
    rerun = printed.split("rerun:\n", 1)[1].splitlines()[0].split()
    assert main(rerun[1:]) == 1  # the printed command shows the divergence again
    assert "relu_planted" in capsys.readouterr().out
    assert main(["reduce", str(model), "--providers", "raiser", "--fails", "-o", str(out_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["op_types"] == ["Neg"]
    assert main(["reduce", str(model), "--providers", "cpu", "-o", str(out_dir)]) == 2  # nothing diverges
    with pytest.raises(SystemExit):
        main(["reduce", "--help"])
    assert "example:" in capsys.readouterr().out
