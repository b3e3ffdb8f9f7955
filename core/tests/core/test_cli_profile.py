"""``epoxy profile``: a Chrome/Perfetto trace naming the model's nodes and groups, thread
tracks named, warm-up runs marked and left out of the top-ops table."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest
from fakes import fuser_factory
from models import chain, diamond

from epoxy import plugins
from epoxy.cli import profile_cmd
from epoxy.cli.main import build_parser, main

OPS = ["Add", "Relu", "Neg", "Mul"]


@pytest.fixture
def model(tmp_path, make_registry, monkeypatch):  # type: ignore[no-untyped-def]
    """A chain whose Relu and Neg a fusing provider compiles as one group; the mini cpu runs the rest."""
    monkeypatch.setattr(plugins, "_default_registry", make_registry(fuser_factory([["n1_relu", "n2_neg"]])))
    path = tmp_path / "chain.onnx"
    onnx.save(chain(OPS), path)
    return path


def _profile(capsys, *args: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    code = main(["profile", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _table_row(out: str, op: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if line.split()[:1] == [op])


def test_trace_names_nodes_and_groups_and_top_ops_leave_out_warmup(model, tmp_path, capsys):
    trace_path = tmp_path / "trace.json"
    code, out, _ = _profile(capsys, str(model), "--providers", "fuser,cpu", "--runs", "4", "--warmup", "2",
                            "-o", str(trace_path), "--top", "5")
    assert code == 0
    events = json.loads(trace_path.read_text())
    nodes = {e["name"]: e for e in events if e.get("cat") == "Node"}
    assert {"n0_add_kernel_time", "n3_mul_kernel_time"} <= set(nodes)
    group = next(e for e in events if e.get("cat") == "Node" and e["args"]["op_name"] == "FusedGroup")
    assert group["args"]["group_nodes"] == ["n1_relu", "n2_neg"] and group["args"]["provider"] == "fuser"
    runs = [e for e in events if e.get("name") == "model_run"]
    assert len(runs) == 6 and sum(bool(e["args"].get("warmup")) for e in runs) == 2
    assert all(e["ph"] in ("X", "M") and isinstance(e["ts" if e["ph"] == "X" else "args"], (int, dict)) for e in events)
    # the table: op, calls, total ms, share; calls count the profiled runs only
    assert re.search(r"^op\s+provider\s+calls\s+total ms\s+mean us\s+share$", out, re.M)
    add = _table_row(out, "Add")
    assert add[1] == "cpu" and add[2] == "4" and add[-1].endswith("%")
    assert _table_row(out, "FusedGroup")[1:3] == ["fuser", "4"]
    assert f"trace written to {trace_path}" in out


def test_every_thread_gets_a_named_track(tmp_path, make_registry, monkeypatch, capsys):
    monkeypatch.setattr(plugins, "_default_registry", make_registry())
    path = tmp_path / "diamond.onnx"
    onnx.save(diamond(), path)
    trace_path = tmp_path / "t.json"
    code, _, _ = _profile(capsys, str(path), "--parallel", "--runs", "3", "-o", str(trace_path))
    assert code == 0
    events = json.loads(trace_path.read_text())
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names[0] == "main"
    assert {e["tid"] for e in events if e["ph"] == "X"} <= set(names)
    assert all(n == "main" or n.startswith("inter-op worker") for n in names.values())


def test_tracks_split_by_thread():
    events = [{"cat": "Session", "pid": 1, "tid": 111, "ts": 0, "dur": 5, "ph": "X", "name": "model_run",
               "args": {"run": 1}},
              {"cat": "Node", "pid": 1, "tid": 222, "ts": 1, "dur": 2, "ph": "X", "name": "a_kernel_time",
               "args": {"op_name": "Relu", "provider": "cpu", "run": 1}},
              {"cat": "Node", "pid": 1, "tid": 333, "ts": 1, "dur": 3, "ph": "X", "name": "b_kernel_time",
               "args": {"op_name": "Neg", "provider": "cpu", "run": 2}}]
    trace = profile_cmd.enrich_trace(events, {}, warmup=1, process_name="p")
    tids = {e["name"]: e["tid"] for e in trace if e["ph"] == "X"}
    assert tids == {"model_run": 0, "a_kernel_time": 1, "b_kernel_time": 2}
    assert [r["op_type"] for r in profile_cmd.top_ops(trace, 5)] == ["Neg"]  # run 1 was warm-up


def test_inputs_from_files_and_a_wrong_name(model, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    code, out, _ = _profile(capsys, str(model), "--inputs", f"x={tmp_path / 'x.npy'}", "--runs", "1",
                            "-o", str(tmp_path / "t.json"), "--json")
    assert code == 0 and json.loads(out)["top_ops"]
    code, _, err = _profile(capsys, str(model), "--inputs", f"nope={tmp_path / 'x.npy'}", "-o", str(tmp_path / "t"))
    assert code == 1 and "--inputs 'nope': the model has no such input" in err


def test_help_shows_an_example():
    parser, _ = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["profile"]  # type: ignore[union-attr]
    assert "example:" in sub.format_help() and "epoxy profile model.onnx" in sub.format_help()
