"""epoxy.debug.validate and ``epoxy validate``: a planted wrong kernel is named as the first
divergence (node, op, provider); correct providers pass; bad input is a usage error."""

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
from epoxy.debug import compare, validate
from epoxy.debug.feeds import INT_HIGH, random_feeds


@pytest.fixture
def registry() -> Any:
    return planted_registry()


@pytest.fixture
def cli_registry(registry: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(plugins, "_default_registry", registry)
    return registry


@pytest.fixture
def chain_path(tmp_path: Path) -> Path:
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model(), str(path))
    return path


@pytest.mark.parametrize("reference", ["cpu", "onnxruntime"])
def test_planted_relu_is_the_first_divergence(registry: Any, reference: str) -> None:
    report = validate(chain_model(), ["buggy", "cpu"], reference=reference, random=2, registry=registry)
    assert not report.passed and report.error is None
    first = report.first
    assert first is not None
    assert (first.name, first.node, first.op_type, first.provider) == ("t11", "relu_planted", "Relu", "buggy")
    assert first.stats.max_rel == pytest.approx(0.01, rel=1e-3)  # the planted 1%
    # buggy's correct Mul and Neg ran before the Relu and matched
    assert any(v.provider == "buggy" and v.op_type in ("Mul", "Neg") and v.stats.passed for v in report.values)
    assert all(v.stats.passed for v in report.values[: report.values.index(first)])
    drift = {v.name for v in report.drift}
    assert "y" in drift and "t8" not in drift  # the output carries the error; values before it do not


def test_correct_provider_passes_against_both_references(registry: Any) -> None:
    for reference in ("cpu", "onnxruntime"):
        report = validate(chain_model(), ["cpu"], reference=reference, random=3, registry=registry)
        assert report.passed, report.to_dict()
        assert len(report.values) >= 10  # intermediate values, not only the output
        assert report.outputs and report.outputs[0].name == "y"


def test_provider_that_raises_is_an_error(registry: Any) -> None:
    report = validate(chain_model(), ["raiser"], registry=registry)
    assert not report.passed
    assert report.error is not None and "neg1" in report.error and "planted failure" in report.error


def test_feeds_are_used_as_given(registry: Any) -> None:
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    report = validate(chain_model(), ["buggy"], feeds={"x": x}, registry=registry)
    assert report.runs == 1 and report.feeds["x"] is x
    relu = next(v for v in report.values if v.name == "t11")
    assert relu.shape == [2, 8]


def test_cli_names_the_node_and_exits_1(cli_registry: Any, chain_path: Path, capsys: Any) -> None:
    assert main(["validate", str(chain_path), "--providers", "buggy,cpu", "--random", "2"]) == 1
    out = capsys.readouterr().out
    assert "first divergence: value 't11'" in out and "'relu_planted' (Relu) on provider 'buggy'" in out
    assert out.rstrip().endswith("FAIL")


def test_cli_json_and_exit_0(cli_registry: Any, chain_path: Path, capsys: Any, tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.ones((3, 8), np.float32))
    assert main(["validate", str(chain_path), "--providers", "cpu", "--reference", "onnxruntime",
                 "--inputs", f"x={tmp_path / 'x.npy'}", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and report["first_divergence"] is None and report["compared"] >= 10
    assert main(["validate", str(chain_path), "--providers", "buggy", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["first_divergence"]["node"] == "relu_planted"


def test_cli_usage_errors_exit_2(cli_registry: Any, chain_path: Path, capsys: Any) -> None:
    assert main(["validate", str(chain_path), "--providers", "cpu", "--inputs", "x=missing.npy"]) == 2
    assert "--inputs x" in capsys.readouterr().err
    assert main(["validate", str(chain_path), "--providers", "cpu", "--inputs", f"y={chain_path}"]) == 2
    z = chain_path.with_name("z.npy")
    np.save(z, np.ones((1, 8), np.float32))
    assert main(["validate", str(chain_path), "--providers", "cpu", "--inputs", f"z={z}"]) == 2
    assert "input 'x' has no value" in capsys.readouterr().err
    assert main(["validate", str(chain_path), "--providers", "cpu", "--dim", "batch"]) == 2
    assert main(["validate", str(chain_path), "--providers", "nosuch"]) == 2
    assert "unknown provider 'nosuch'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(chain_path)])  # --providers is required
    assert exc.value.code == 2


def test_help_has_an_example(capsys: Any) -> None:
    with pytest.raises(SystemExit):
        main(["validate", "--help"])
    assert "example:" in capsys.readouterr().out


def test_random_feeds_follow_declared_types() -> None:
    model = chain_model()
    feeds = random_feeds(model, seed=1, dims={"batch": 5})
    assert feeds["x"].shape == (5, 8) and feeds["x"].dtype == np.float32
    assert not np.array_equal(feeds["x"], random_feeds(model, seed=2, dims={"batch": 5})["x"])
    graph = onnx.helper.make_graph([], "g", [onnx.helper.make_tensor_value_info("i", onnx.TensorProto.INT64, ["n", 3])],
                                   [onnx.helper.make_tensor_value_info("i", onnx.TensorProto.INT64, ["n", 3])])
    ints = random_feeds(onnx.helper.make_model(graph), seed=0)["i"]
    assert ints.shape == (1, 3) and ints.dtype == np.int64 and ints.min() >= 0 and ints.max() < INT_HIGH


class TestCompare:
    def test_tolerance_is_numpys_rule(self) -> None:
        ref = np.array([1.0, 100.0], np.float32)
        assert compare(ref + np.float32(5e-4), ref, rtol=1e-3, atol=0).passed  # within rtol * |b| = 1e-3
        s = compare(ref * np.float32(1.01), ref, rtol=1e-3, atol=1e-4)
        assert not s.passed and s.mismatches == 2 and s.max_rel == pytest.approx(0.01, rel=1e-4)

    def test_nan_and_inf(self) -> None:
        ref = np.array([np.nan, np.inf, 1.0])
        assert compare(ref.copy(), ref, 1e-3, 1e-4).passed
        s = compare(np.array([1.0, np.inf, 1.0]), ref, 1e-3, 1e-4)
        assert not s.passed and s.ref_nan == 1 and s.nan == 0 and s.mismatches == 1
        assert not compare(np.array([np.nan, -np.inf, 1.0]), ref, 1e-3, 1e-4).passed

    def test_integers_are_exact_and_shapes_must_match(self) -> None:
        assert not compare(np.array([1, 2]), np.array([1, 3]), rtol=1.0, atol=1.0).passed
        s = compare(np.zeros((2, 3)), np.zeros((3, 2)), 1e-3, 1e-4)
        assert not s.passed and "shape" in s.reason and s.to_dict()["max_abs"] is None
