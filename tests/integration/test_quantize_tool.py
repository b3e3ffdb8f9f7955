"""``epoxy quantize`` end to end: the CLI in-process on a small CNN and an MLP (fixed seeds).

What must hold: the written model loads and runs in epoxy and onnxruntime and stays close to
the float model; the JSON report carries sizes, held-out accuracy, latency, node counts,
partition and checks with sane values; missing calibration data and bad flags fail clearly;
a scheme that writes a broken graph leaves nothing on disk and the error names the node;
``--mode auto`` keeps only a candidate within the error budget and not slower than fp32.
The error bound (3 %) is test_quantization_qdq.py's, argued there for the same kind of model.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from epoxy.cli.main import main
from epoxy.quantization import auto, schemes
from epoxy.quantization.report import count_nodes
from epoxy.quantization.tool import quantize_model
from epoxy.session import InferenceSession

ort = pytest.importorskip("onnxruntime")

MAX_REL_ERROR = 0.03


def _model(nodes: list[onnx.NodeProto], inits: dict[str, np.ndarray], shape: list[Any],
           out: list[Any]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model, full_check=True)
    return model


def cnn() -> onnx.ModelProto:
    """Conv+Relu+GlobalAveragePool+Flatten+Gemm(transB): 10 class scores (weights large
    enough that int8 storage outweighs the added scales and zero points)."""
    rng = np.random.default_rng(0)
    inits = {"w1": rng.normal(0, 0.3, (32, 3, 3, 3)), "b1": rng.normal(0, 0.1, 32),
             "wg": rng.normal(0, 0.3, (10, 32)), "bg": rng.normal(0, 0.1, 10)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("GlobalAveragePool", ["r1"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], name="fc", transB=1)]
    return _model(nodes, inits, ["N", 3, 8, 8], ["N", 10])


def mlp() -> onnx.ModelProto:
    """MatMul+Add+Relu+MatMul with 64-wide weights (big enough that int8 shrinks the file)."""
    rng = np.random.default_rng(1)
    inits = {"w1": rng.normal(0, 0.2, (32, 64)), "b1": rng.normal(0, 0.1, 64), "w2": rng.normal(0, 0.2, (64, 10))}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
             helper.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
             helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
             helper.make_node("MatMul", ["r1", "w2"], ["y"], name="mm2")]
    return _model(nodes, inits, ["N", 32], ["N", 10])


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("quantize")
    rng = np.random.default_rng(7)
    onnx.save(cnn(), root / "cnn.onnx")
    onnx.save(mlp(), root / "mlp.onnx")
    (root / "calib").mkdir()
    for k in range(6):  # 6 batches: 5 calibrate, 1 (20 %) held out
        np.savez(root / "calib" / f"batch{k}.npz", x=rng.standard_normal((16, 3, 8, 8)).astype(np.float32))
    np.savez(root / "mlp_calib.npz", x=rng.standard_normal((40, 32)).astype(np.float32))  # cut into 10 batches
    return {"root": root, "cnn": root / "cnn.onnx", "mlp": root / "mlp.onnx", "calib": root / "calib",
            "mlp_calib": root / "mlp_calib.npz"}


def _cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main(["quantize", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def cnn_run(files: dict[str, Path]) -> dict[str, Any]:
    """One static run of the CNN with --json (module-scoped: ep-cpu compiles its conv once)."""
    out = files["root"] / "cnn.int8.onnx"
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):  # capsys is function-scoped
        code = main(["quantize", str(files["cnn"]), "-o", str(out), "--calibration", str(files["calib"]), "--json"])
    return {"code": code, "report": json.loads(buffer.getvalue()), "path": out}


def test_static_cnn_writes_a_model_both_runtimes_load(cnn_run: dict[str, Any], files: dict[str, Path]) -> None:
    assert cnn_run["code"] == 0
    x = np.random.default_rng(99).standard_normal((2, 3, 8, 8)).astype(np.float32)
    y0 = InferenceSession(str(files["cnn"]), providers=["cpu"]).run(None, {"x": x})[0]
    y_epoxy = InferenceSession(str(cnn_run["path"]), providers=["cpu"]).run(None, {"x": x})[0]
    y_ort = ort.InferenceSession(str(cnn_run["path"]), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.linalg.norm(y_epoxy - y0) / np.linalg.norm(y0) < MAX_REL_ERROR
    np.testing.assert_allclose(y_epoxy, y_ort, rtol=1e-3, atol=1e-3)
    ops = [n.op_type for n in onnx.load(str(cnn_run["path"])).graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops


def test_static_cnn_json_report_fields(cnn_run: dict[str, Any]) -> None:
    r = cnn_run["report"]
    assert r["mode"] == "static"
    assert r["size"]["after"] < r["size"]["before"]
    assert (r["calibration_batches"], r["held_out_batches"]) == (5, 1)
    (acc,) = r["accuracy"]
    assert acc["output"] == "y" and 0 < acc["rel_error"] < MAX_REL_ERROR
    assert acc["cosine"] > 0.999 and acc["max_abs"] >= acc["mean_abs"] > 0
    assert acc["top1_agreement"] is not None and acc["top1_agreement"] >= 0.75
    assert r["latency"]["fp32_ms"] > 0 and r["latency"]["quantized_ms"] > 0 and "rough" in r["latency"]["note"]
    assert set(r["nodes"]["int8"]) == {"conv1", "gap", "flatten", "fc"}  # the cpu default: the whole int8 chain
    assert "relu1" in r["nodes"]["float32"] and r["nodes"]["summary"]["QuantizeLinear"] >= 2
    assert r["checks"] == ["onnx-checker", "epoxy (cpu)", "onnxruntime"]
    assert sum(r["partition"]["cpu"].values()) > 0
    assert "activation" in r["scheme"] and "reduce_range" in r["scheme"]


def test_mlp_one_npz_file_text_report(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    out = files["root"] / "mlp.int8.onnx"
    code, stdout, _ = _cli(capsys, files["mlp"], "-o", out, "--calibration", files["mlp_calib"], "--held-out", 2,
                           "--per-tensor", "--method", "percentile", "--quiet")
    assert code == 0 and out.exists()
    assert "calibration: 8 batches, 2 held out" in stdout
    assert "per-tensor" in stdout and "set by flags" in stdout  # --per-tensor overrides the target default
    rel = float(stdout.split("rel error ")[1].split("%")[0]) / 100
    assert 0 < rel < MAX_REL_ERROR
    x = np.random.default_rng(3).standard_normal((5, 32)).astype(np.float32)
    ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})


def test_missing_calibration_is_a_clear_error(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    out = files["root"] / "none.onnx"
    code, _, err = _cli(capsys, files["mlp"], "-o", out)
    assert code == 1 and not out.exists()
    assert "needs calibration data" in err and "--calibration" in err


def test_random_calibration_warns(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    out = files["root"] / "random.onnx"
    code, stdout, _ = _cli(capsys, files["mlp"], "-o", out, "--random-calibration", 4, "--json")
    report = json.loads(stdout)
    assert code == 0 and out.exists()
    assert any("random" in w and "little" in w for w in report["warnings"])


def _broken_at_fc(model: onnx.ModelProto, stats: Any, options: schemes.SchemeOptions) -> schemes.SchemeResult:
    """A scheme whose output fails the checker: fc reads a tensor nothing produces."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    fc = next(n for n in out.graph.node if n.name == "fc")
    fc.input[0] = "nowhere"
    return out, []


def _fails_at_run(model: onnx.ModelProto, stats: Any, options: schemes.SchemeOptions) -> schemes.SchemeResult:
    """A scheme whose output passes the checker but fails to run: a Gather past the end."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.output[0].name = "y_all"
    for node in out.graph.node:
        node.output[:] = ["y_all" if o == "y" else o for o in node.output]
    out.graph.initializer.append(numpy_helper.from_array(np.array([50], np.int64), "past_end"))
    out.graph.node.append(helper.make_node("Gather", ["y_all", "past_end"], ["picked"], name="pick", axis=1))
    out.graph.node.append(helper.make_node("Identity", ["picked"], ["y_all_out"], name="ident"))
    out.graph.output[0].CopyFrom(helper.make_tensor_value_info("y_all_out", TensorProto.FLOAT, ["N", 1]))
    return out, []


@pytest.mark.parametrize(("scheme", "node"), [(_broken_at_fc, "fc"), (_fails_at_run, "pick")])
def test_check_failure_writes_nothing_and_names_the_node(files: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch, scheme: Any,
                                                         node: str) -> None:
    monkeypatch.setitem(schemes.SCHEMES, "static", schemes.SchemeInfo("static", scheme, True, "broken"))
    out = files["root"] / f"broken_{node}.onnx"
    code, _, err = _cli(capsys, files["mlp"] if node == "pick" else files["cnn"], "-o", out,
                        "--random-calibration", 3, "--quiet")
    assert code == 1 and not out.exists()
    assert f"node {node!r}" in err and "not written" in err


def test_auto_keeps_a_candidate_within_budget_and_explains(files: dict[str, Path],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = files["root"] / "mlp.auto.onnx"
    code, stdout, _ = _cli(capsys, files["mlp"], "-o", out, "--mode", "auto", "--calibration", files["mlp_calib"],
                           "--max-rel-error", 0.05, "--json")
    report = json.loads(stdout)
    assert code == 0 and out.exists()
    table = {row["scheme"]: row for row in report["auto"]}
    assert {"static per-channel", "static per-tensor", "fp32 (unchanged)"} <= set(table)
    fp32_ms = table["fp32 (unchanged)"]["ms"]
    chosen = [row for row in report["auto"] if row["verdict"].startswith("chosen")]
    if chosen:  # the winner obeys the rule, and it is the fastest that does
        (win,) = chosen
        assert win["rel_error"] <= 0.05 and win["ms"] <= fp32_ms * auto.MIN_GAIN
        assert "confirmed interleaved with fp32" in win["verdict"]
        fits = [r for r in report["auto"] if r["rel_error"] is not None and r["rel_error"] <= 0.05
                and r["ms"] is not None and r["ms"] <= fp32_ms * auto.MIN_GAIN and r["scheme"] != "fp32 (unchanged)"]
        assert win["ms"] == min(r["ms"] for r in fits)
        assert report["rel_error"] <= 0.05
    else:  # none qualified: fp32 kept, written unchanged, and every row says why
        assert report["mode"] == "auto -> fp32" and "kept" in table["fp32 (unchanged)"]["verdict"]
        assert all(r["verdict"].startswith(("rejected", "failed")) for r in report["auto"][:-1])
        assert onnx.load(str(out)).graph.node[0].op_type == "MatMul"


def test_auto_rule() -> None:
    measured = [auto.Measured("a", 0.01, 2.0), auto.Measured("b", 0.01, 1.0), auto.Measured("c", 0.5, 0.5),
                auto.Measured("d", 0.01, 9.0), auto.Measured("e", None, None, "boom"),
                auto.Measured("tie", 0.01, 2.9), auto.Measured("same", 0.0, 0.1, changed=False)]
    winner, rows = auto.choose(measured, fp32_ms=3.0, max_rel_error=0.02)
    assert winner == "b"
    verdicts = {r.scheme: r.verdict for r in rows}
    assert verdicts["c"].startswith("rejected: error") and verdicts["d"].startswith("rejected: not faster")
    assert verdicts["a"].startswith("within budget") and verdicts["e"].startswith("failed: boom")
    # within 5 % of fp32 is timing noise; a scheme that changed no compute node never wins, however fast
    assert verdicts["tie"].startswith("rejected: not faster") and "no compute node" in verdicts["same"]
    assert auto.choose(measured[2:], fp32_ms=3.0, max_rel_error=0.02)[0] is None


def test_fp16_mode_without_data_uses_random_inputs(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    out = files["root"] / "mlp.fp16.onnx"
    code, stdout, _ = _cli(capsys, files["mlp"], "-o", out, "--mode", "fp16", "--json")
    report = json.loads(stdout)
    assert code == 0 and report["nodes"]["summary"]["float16/bfloat16"] >= 3
    assert report["size"]["after"] < report["size"]["before"] and report["rel_error"] < 0.01
    assert any("random inputs" in w for w in report["warnings"])


@pytest.mark.parametrize(("mode", "module", "category"), [
    ("dynamic", "dynamic", "int8"), ("weight-int8", "weight_only", "int8 weights, float compute")])
def test_lazily_registered_modes(files: dict[str, Path], capsys: pytest.CaptureFixture[str], mode: str, module: str,
                                 category: str) -> None:
    """dynamic / weight-only modes, when their modules are installed (another piece of issue 19)."""
    pytest.importorskip(f"epoxy.quantization.{module}")
    out = files["root"] / f"mlp.{mode}.onnx"
    code, stdout, _ = _cli(capsys, files["mlp"], "-o", out, "--mode", mode, "--calibration", files["mlp_calib"],
                           "--json")
    report = json.loads(stdout)
    assert code == 0 and report["size"]["after"] < report["size"]["before"]
    assert report["calibration_batches"] == 0 and report["rel_error"] < MAX_REL_ERROR
    assert report["nodes"]["summary"][category] == 2  # mm1 and mm2
    x = np.random.default_rng(5).standard_normal((3, 32)).astype(np.float32)
    ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})


@pytest.mark.parametrize("argv", [["--mode", "int3"], ["--max-rel-error", "-1"], ["--held-out", "0"],
                                  ["--calibration", "c", "--random-calibration", "2"], ["--method", "median"]])
def test_bad_flags_are_argparse_errors(files: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                       argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["quantize", str(files["mlp"]), "-o", str(files["root"] / "bad.onnx"), *argv])
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_unknown_excluded_node_names_it(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, files["mlp"], "-o", files["root"] / "x.onnx", "--random-calibration", 3,
                        "--exclude-node", "mm9", "--quiet")
    assert code == 1 and "mm9" in err


def test_help_shows_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["quantize", "--help"])
    assert "example:" in capsys.readouterr().out


@pytest.mark.parametrize(("providers", "flags", "expected"), [
    (("cpu",), {"avx2", "avx512f", "avx512_vnni"}, ("uint8", False, "AVX512-VNNI")),
    (("cpu",), {"avx2", "avxvnni"}, ("uint8", False, "AVX-VNNI")),
    (("cpu",), {"avx2", "fma"}, ("uint8", True, "no VNNI")),
    (("cpu",), {"asimd", "asimddp"}, ("int8", False, "signed")),
    (("openvino", "cpu"), {"avx2"}, ("uint8", False, "OpenVINO")),
])
def test_target_defaults(providers: tuple[str, ...], flags: set[str], expected: tuple[str, bool, str]) -> None:
    d = schemes.target_defaults(providers, frozenset(flags))
    assert (d.activation_dtype, d.reduce_range) == expected[:2]
    assert expected[2] in d.line() and d.line().startswith(f"activation {d.activation_dtype} / weight int8")


def test_count_nodes_tells_int8_from_float() -> None:
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["q", "s"], ["d"], name="dq"),
         helper.make_node("Relu", ["d"], ["r"], name="relu_on_dq"),
         helper.make_node("Add", ["r", "x"], ["y"], name="add_mixed")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array([1, 2], np.int8), "q"),
         numpy_helper.from_array(np.array(0.5, np.float32), "s")])
    counts = count_nodes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert counts.int8 == ("relu_on_dq",) and counts.float32 == ("add_mixed",) and counts.int8_weights == ()
    assert counts.plumbing == {"DequantizeLinear": 1}


def test_locate_bisects_to_the_first_failing_node() -> None:
    """For errors that name no node: the first prefix of the graph that fails ends at it."""
    from epoxy.quantization.checks import locate

    model = mlp()
    seen: list[int] = []

    def fails(prefix: onnx.ModelProto) -> bool:
        seen.append(len(prefix.graph.node))
        return any(n.name == "relu1" for n in prefix.graph.node)

    assert locate(model, fails) == "relu1"
    assert len(seen) <= 3  # log2(4) + 1 prefixes, not one run per node
    assert locate(model, lambda prefix: False) is None


def test_onnxruntime_gate_names_the_node(files: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """With epoxy's gate passed (stubbed), the broken Gather is caught by onnxruntime's."""
    from epoxy.quantization import checks

    monkeypatch.setitem(schemes.SCHEMES, "static", schemes.SchemeInfo("static", _fails_at_run, True, "broken"))
    monkeypatch.setattr(checks, "check_epoxy", lambda model, feed, providers: [])
    out = files["root"] / "broken_ort.onnx"
    code, _, err = _cli(capsys, files["mlp"], "-o", out, "--random-calibration", 3, "--quiet")
    assert code == 1 and not out.exists()
    assert "onnxruntime check at node 'pick' (Gather)" in err


def test_auto_flag_is_mode_auto(files: dict[str, Path]) -> None:
    from epoxy.cli.main import build_parser

    parser, _ = build_parser()
    args = parser.parse_args(["quantize", str(files["mlp"]), "-o", "x.onnx", "--auto"])
    assert args.mode == "auto"


def test_auto_winner_path_with_stubbed_timing(files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Timing stubbed (QDQ models "twice as fast"), so the winner path is deterministic: the
    fastest within budget is written and the table says why; the budget then rules it out."""
    from epoxy.quantization import quantize_model, tool

    def fake_ms(session: Any, feed: Any, runs: int) -> float:
        ops = {n.op_type for n in onnx.load_from_string(session._model_bytes).graph.node}
        return 0.5 if "QuantizeLinear" in ops else 1.0

    def timed_by_model(model: onnx.ModelProto, providers: Any) -> Any:
        session = InferenceSession(model, providers=list(providers))
        session._model_bytes = model.SerializeToString()  # type: ignore[attr-defined]
        return session

    monkeypatch.setattr(tool, "_median_ms", fake_ms)
    monkeypatch.setattr(tool, "_session", timed_by_model)
    monkeypatch.setattr(tool, "_interleaved_ms",
                        lambda sessions, feed, runs: [fake_ms(s, feed, runs) for s in sessions])
    model, report = quantize_model(str(files["mlp"]), mode="auto", calibration=files["mlp_calib"], max_rel_error=0.05)
    assert report.mode == "auto -> static"
    assert "QuantizeLinear" in {n.op_type for n in model.graph.node}
    chosen = [t for t in report.auto if t.verdict.startswith("chosen")]
    assert [t.scheme for t in chosen] == ["static per-channel"] and "2.00x fp32" in chosen[0].verdict
    assert "per-channel" in report.scheme  # the winner's precision line, not the fp32 one

    model, report = quantize_model(str(files["mlp"]), mode="auto", calibration=files["mlp_calib"],
                                   max_rel_error=1e-6)
    assert report.mode == "auto -> fp32" and model.graph.node[0].op_type == "MatMul"

    # the sequential timing said 2x, timed in alternation it is a tie: fp32 is kept, and said why
    monkeypatch.setattr(tool, "_interleaved_ms", lambda sessions, feed, runs: [1.0 for _ in sessions])
    model, report = quantize_model(str(files["mlp"]), mode="auto", calibration=files["mlp_calib"], max_rel_error=0.05)
    assert report.mode == "auto -> fp32" and model.graph.node[0].op_type == "MatMul"
    # fp32 kept means the model as given, not its pre-processed copy
    assert model.SerializeToString() == onnx.load(str(files["mlp"])).SerializeToString()
    verdicts = {t.scheme: t.verdict for t in report.auto}
    assert verdicts["static per-channel"].startswith("rejected: timed in alternation")
    assert verdicts["fp32 (unchanged)"].startswith("kept")


def test_api_progress_and_report(files: dict[str, Path]) -> None:
    from epoxy.quantization import QuantizationReport, quantize_model

    seen: list[tuple[int, int]] = []
    model, report = quantize_model(onnx.load(str(files["cnn"])), calibration=files["calib"],
                                   progress=lambda done, total: seen.append((done, total)))
    assert isinstance(report, QuantizationReport) and seen == [(k, 5) for k in range(1, 6)]
    assert report.rel_error is not None and report.rel_error < MAX_REL_ERROR
    assert "accuracy y: rel error" in report.format()


def test_random_inputs_the_model_cannot_take_ask_for_real_ones(tmp_path: Path) -> None:
    """A model whose integer input indexes a one-row table: made-up inputs (0 or 1) go out of
    range, and the tool says to pass real inputs instead of failing inside a node."""
    from epoxy.quantization import quantize_model
    from epoxy.quantization.tool import CalibrationRequiredError

    table = numpy_helper.from_array(np.ones((1, 8), np.float32), "table")
    weight = numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"]), helper.make_node("MatMul", ["rows", "w"], ["y"])],
        "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 4])], [table, weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(CalibrationRequiredError, match="random inputs.*pass --calibration with real inputs"):
        quantize_model(model, mode="dynamic")
    real = [{"ids": np.zeros(16, np.int64)} for _ in range(2)]
    quantized, report = quantize_model(model, mode="dynamic", calibration=real)  # real inputs: it works
    assert report.checks


@pytest.mark.parametrize(("mode", "fmt", "int_ops"), [
    ("static", "qoperator", {"QLinearConv"}), ("dynamic", "qdq", set()), ("dynamic", "qoperator", {"MatMulInteger"})])
def test_format_flag_picks_the_integer_op_form(files: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                               mode: str, fmt: str, int_ops: set[str]) -> None:
    """--format reaches the writer: QOperator ops instead of QDQ pairs (and back for dynamic,
    whose default is qoperator); the written model runs on both runtimes and they agree."""
    source = files["cnn"] if mode == "static" else files["mlp"]
    out = files["root"] / f"{mode}.{fmt}.onnx"
    code, _, err = _cli(capsys, source, "-o", out, "--mode", mode, "--format", fmt, "--calibration", files["calib"]
                        if mode == "static" else files["mlp_calib"], "--json")
    assert code == 0, err
    model = onnx.load(str(out))
    ops = {n.op_type for n in model.graph.node}
    assert int_ops <= ops
    if fmt == "qoperator":
        assert "QuantizeLinear" not in ops or mode == "static"  # static keeps the entry/exit Q/DQ
        assert "DequantizeLinear" not in ops or mode == "static"
    else:
        assert "MatMulInteger" not in ops and "DequantizeLinear" in ops
    name = model.graph.input[0].name
    shape = [d.dim_value or 2 for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    y_epoxy = InferenceSession(str(out), providers=["cpu"]).run(None, {name: x})[0]
    # onnxruntime's default optimizer turns int8 weight DQ + MatMul into MatMulNBits, which also
    # quantizes the activations: compare with the model as written, then check the default loads
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    y_ort = ort.InferenceSession(str(out), plain, providers=["CPUExecutionProvider"]).run(None, {name: x})[0]
    np.testing.assert_allclose(y_epoxy, y_ort, rtol=1e-3, atol=1e-3 * float(np.abs(y_ort).max()))
    optimized = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert optimized.run(None, {name: x})[0].shape == y_ort.shape


@pytest.mark.parametrize("flags", [{"avx2"}, {"avx2", "avx512f", "avx512_vnni"}], ids=["no-vnni", "vnni"])
def test_dynamic_weight_only_ignores_the_targets_reduce_range(monkeypatch: pytest.MonkeyPatch, flags: set[str]) -> None:
    """Without VNNI the target's defaults take 7-bit weights for u8s8 kernels; a weight-only
    model (dynamic, qdq) has none, so the default does not apply to it (it once refused every
    such call on an AVX2 CPU); asked for explicitly, reduce_range is still refused there."""
    monkeypatch.setattr(schemes, "cpu_features", lambda: frozenset(flags))
    model = mlp()
    quantized, _ = quantize_model(model, mode="dynamic", format="qdq")
    assert "DequantizeLinear" in {n.op_type for n in quantized.graph.node}
    codes = [numpy_helper.to_array(i) for i in quantized.graph.initializer if i.data_type == onnx.TensorProto.INT8]
    assert codes and max(int(np.abs(c.astype(np.int32)).max()) for c in codes) == 127  # all 8 bits
    with pytest.raises(ValueError, match="reduce_range is for the u8s8 integer kernels"):
        quantize_model(model, mode="dynamic", format="qdq", reduce_range=True)
    integer, _ = quantize_model(model, mode="dynamic", format="qoperator")
    codes = [numpy_helper.to_array(i) for i in integer.graph.initializer if i.data_type == onnx.TensorProto.INT8]
    assert max(int(np.abs(c.astype(np.int32)).max()) for c in codes) == (127 if "avx512_vnni" in flags else 64)


def test_format_is_refused_for_modes_without_integer_ops(files: dict[str, Path],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, files["mlp"], "-o", files["root"] / "x.onnx", "--mode", "fp16", "--format", "qdq")
    assert code == 1 and "format='qdq'" in err and "fp16" in err
