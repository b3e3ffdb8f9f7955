"""The ``epoxy`` CLI end to end, as a user runs it (subprocesses, installed entry points)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from epoxy.demo import MODEL_PATH


def epoxy(*args: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "epoxy.cli.main", *args], capture_output=True, text=True, env=env)
    if check:
        assert result.returncode == 0, result.stderr + result.stdout
    return result


def test_providers_table_and_json():
    assert "epoxy-ep-cpu" in epoxy("providers").stdout
    data = json.loads(epoxy("providers", "--json").stdout)
    cpu = next(p for p in data["providers"] if p["name"] == "cpu")
    assert cpu["available"] and cpu["sdk_api"] == "1.1" and cpu["devices"][0]["kind"] == "cpu"


def test_providers_show_their_options():
    assert "conv_winograd" in epoxy("providers").stdout
    help_ = epoxy("providers", "--options", "cpu").stdout
    assert "auto | f23 | off (default auto)" in help_ and "device_index" in help_
    data = json.loads(epoxy("providers", "--json").stdout)
    cpu = next(p for p in data["providers"] if p["name"] == "cpu")
    assert list(cpu["options"]) == ["conv_winograd", "conv_algo_search", "jit", "jit_threads", "fuse_elementwise",
                                      "heap_arrays"]
    assert cpu["options_error"] is None
    assert "device_index" in data["core_options"]
    unknown = epoxy("providers", "--options", "nope", check=False)
    assert unknown.returncode == 1 and "unknown provider 'nope'" in unknown.stderr


def test_ops_lists_opset_ranges():
    out = epoxy("ops", "--provider", "cpu").stdout
    assert "MatMul" in out and "Conv" in out
    ops = json.loads(epoxy("ops", "--provider", "cpu", "--json").stdout)
    add = next(o for o in ops if o["op"] == "Add")
    assert add["opsets"][-1].endswith("+")
    assert epoxy("ops", "--provider", "nope", check=False).returncode == 1


def test_partition_shows_each_node():
    out = epoxy("partition", str(MODEL_PATH), "--providers", "cpu").stdout
    # the default level (all, as onnxruntime's) fuses MatMul + Add (+ Relu) into Gemm nodes
    assert "dense0" in out and "FusedGemm" in out and "cpu" in out and "planned peak memory" in out
    data = json.loads(epoxy("partition", str(MODEL_PATH), "--providers", "cpu", "--json").stdout)
    assert {n["provider"] for n in data["nodes"]} == {"cpu"}
    assert data["summary"] == {"cpu": 5}


def test_run_with_npy_inputs(tmp_path):
    pixels = np.zeros((2, 64), np.float32)
    np.save(tmp_path / "pixels.npy", pixels)
    out = epoxy(
        "run", str(MODEL_PATH), "--input", f"pixels={tmp_path / 'pixels.npy'}", "-o", str(tmp_path / "out")
    ).stdout
    assert "saved" in out
    assert np.load(tmp_path / "out" / "probabilities.npy").shape == (2, 10)
    bad = epoxy("run", str(MODEL_PATH), "--input", f"pixels={tmp_path / 'nope.npy'}", check=False)
    assert bad.returncode == 1 and "cannot read" in bad.stderr


def test_run_reports_wrong_feed_clearly(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((2, 64), np.float64))
    bad = epoxy("run", str(MODEL_PATH), "--input", f"pixels={tmp_path / 'x.npy'}", check=False)
    assert bad.returncode == 1
    assert "input 'pixels': expected dtype float32, got float64" in bad.stderr


@pytest.mark.parametrize("providers", [None, "cpu"])
def test_demo(providers):
    args = ["demo", "--runs", "20"] + (["--providers", providers] if providers else [])
    out = epoxy(*args).stdout
    accuracy = float(out.split("accuracy on 450 held-out digits: ")[1].split()[0])
    assert accuracy > 0.95
    assert "latency, batch 1" in out


def test_bench_with_onnxruntime_and_profile(tmp_path):
    trace = tmp_path / "trace.json"
    out = epoxy("bench", str(MODEL_PATH), "--providers", "cpu", "--runs", "10", "--warmup", "2",
                "--compare-onnxruntime", "--profile", "--trace", str(trace), "--dim", "batch=4").stdout
    assert "p50 ms" in out and "epoxy / onnxruntime (p50):" in out
    assert "numpy BLAS (the cpu provider's GEMMs): " in out and "kernels" in out  # what bounds cpu GEMM speed
    assert "Gemm" in out and trace.exists()  # MatMul + Add fused at the default level
    events = json.loads(trace.read_text())  # onnxruntime's profile format: a list of events
    assert any(e["cat"] == "Node" and e["args"]["op_name"] == "FusedGemm" for e in events)
    bad = epoxy("bench", str(MODEL_PATH), "--dim", "batch", check=False)
    assert bad.returncode == 1 and "--dim must look like name=N" in bad.stderr
