"""``epoxy bench``: provider sets side by side, reference runtimes, the latency plot, JSON."""

from __future__ import annotations

import json
import sys

import onnx
import pytest
from fakes import fuser_factory
from models import chain

from epoxy import plugins
from epoxy.cli import bench_cmd
from epoxy.cli.main import build_parser, main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def model(tmp_path, make_registry, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(plugins, "_default_registry", make_registry(fuser_factory([["n1_relu", "n2_neg"]])))
    path = tmp_path / "chain.onnx"
    onnx.save(chain(["Add", "Relu", "Neg", "Mul"]), path)
    return path


def _bench(capsys, *args: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    code = main(["bench", *args, "--runs", "5", "--warmup", "1"])
    out, err = capsys.readouterr()
    return code, out, err


def test_two_provider_sets_are_columns_side_by_side(model, capsys):
    code, out, _ = _bench(capsys, str(model), "--providers", "cpu", "--providers", "fuser,cpu")
    assert code == 0
    header = next(line for line in out.splitlines() if line.startswith("latency"))
    assert header.split() == ["latency", "epoxy[cpu]", "epoxy[fuser,cpu]"]
    p50 = next(line for line in out.splitlines() if line.startswith("p50 ms")).split()
    assert len(p50) == 4 and all(float(v) > 0 for v in p50[2:])
    runs = next(line for line in out.splitlines() if line.startswith("runs")).split()
    assert runs[1:] == ["5", "5"]
    assert "epoxy[fuser,cpu] / epoxy[cpu] (p50): " in out
    assert "epoxy[fuser,cpu]: providers: fuser, cpu;" in out


def test_json_carries_every_sample(model, capsys):
    code, out, _ = _bench(capsys, str(model), "--providers", "cpu", "--providers", "fuser,cpu", "--json")
    data = json.loads(out)
    assert code == 0 and set(data["columns"]) == {"epoxy[cpu]", "epoxy[fuser,cpu]"}
    column = data["columns"]["epoxy[fuser,cpu]"]
    assert column["providers"] == ["fuser", "cpu"] and len(column["samples_ms"]) == 5
    assert column["min"] <= column["p50"] <= column["p99"]


def test_the_same_set_twice_is_refused(model, capsys):
    code, _, err = _bench(capsys, str(model), "--providers", "cpu", "--providers", "cpu")
    assert code == 1 and "the same --providers set is given twice" in err


def test_onnxruntime_column_next_to_epoxy(model, capsys):
    pytest.importorskip("onnxruntime", reason="the onnxruntime column needs onnxruntime installed")
    code, out, _ = _bench(capsys, str(model), "--providers", "cpu", "--compare", "onnxruntime")
    assert code == 0
    assert next(line for line in out.splitlines() if line.startswith("latency")).split() == [
        "latency", "epoxy", "onnxruntime"]
    assert "epoxy / onnxruntime (p50): " in out


def test_a_missing_reference_runtime_says_how_to_install(model, capsys, monkeypatch):
    monkeypatch.setattr(bench_cmd.importlib.util, "find_spec", lambda name: None)
    code, _, err = _bench(capsys, str(model), "--compare", "openvino")
    assert code == 1 and "pip install openvino" in err
    code, out, _ = _bench(capsys, str(model), "--compare", "all")  # all: the installed ones, a note for the rest
    assert code == 0 and "onnxruntime not installed, no column" in out


def test_plot_writes_a_png(model, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (epoxy-core[plot])")
    png = tmp_path / "latency.png"
    code, out, _ = _bench(capsys, str(model), "--providers", "cpu", "--providers", "fuser,cpu", "--plot", str(png))
    assert code == 0 and f"plot written to {png}" in out
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 5000


def test_plot_without_matplotlib_says_how_to_install(model, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    code, _, err = _bench(capsys, str(model), "--plot", str(tmp_path / "x.png"))
    assert code == 1 and "epoxy-core[plot]" in err and not (tmp_path / "x.png").exists()


def test_profile_per_provider_set_writes_one_trace_each(model, tmp_path, capsys):
    trace = tmp_path / "trace.json"
    code, out, _ = _bench(capsys, str(model), "--providers", "cpu", "--providers", "fuser,cpu", "--profile",
                          "--trace", str(trace))
    assert code == 0 and "top ops of epoxy[fuser,cpu]" in out
    assert (tmp_path / "trace.cpu.json").exists() and (tmp_path / "trace.fuser-cpu.json").exists()


def test_help_shows_an_example():
    parser, _ = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["bench"]  # type: ignore[union-attr]
    assert "example:" in sub.format_help() and "--providers cpu --providers openvino,cpu" in sub.format_help()
