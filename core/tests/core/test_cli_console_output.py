"""Every converted command prints through the one formatting layer: rich (ANSI codes) on a
terminal, plain text with no ANSI codes off one or with ``NO_COLOR``, and ``--json`` always
plain and parseable. The plain text itself is checked by each command's own tests."""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from aot_fakes import aot_factory
from debug_fakes import BUGGY, chain_model
from fakes import Factory, mini_factory
from models import chain

from epoxy import plugins
from epoxy.cli import quantize_cmd
from epoxy.cli._console import Console
from epoxy.cli.main import main
from epoxy.kit import KernelProvider, KernelRegistry
from epoxy.quantization.report import QuantizationReport
from epoxy.testing import registry_with

#: an ANSI escape sequence (colour, style, cursor)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Tty(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _printed(monkeypatch: pytest.MonkeyPatch, argv: list[str], *, tty: bool, no_color: bool = False) -> str:
    """What ``epoxy ARGV`` writes on a stdout that is (or is not) a terminal."""
    stream = Tty() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stdout", stream)
    monkeypatch.setenv("COLUMNS", "200")  # wide enough that rich folds no cell the test looks for
    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    else:
        monkeypatch.delenv("NO_COLOR", raising=False)
    main(argv)
    return stream.getvalue()


# -- the models and registries each command runs on ----------------------------------------------
DIGIT_OPS = KernelRegistry()


@DIGIT_OPS.register("Softmax", (13,))
def _softmax(node: Any) -> Any:
    axis = node.attr("axis", -1)

    def run(x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)

    return run


@DIGIT_OPS.register("ArgMax", (13,))
def _argmax(node: Any) -> Any:
    axis, keep = node.attr("axis", 0), node.attr("keepdims", 1)
    return lambda x: np.argmax(x, axis=axis, keepdims=bool(keep)).astype(np.int64)


def _kernels_factory(name: str, kernels: KernelRegistry) -> Factory:
    factory = Factory(name, lambda d, o: KernelProvider(name, d, kernels, o), priority=60)
    factory.supported_ops = kernels.ops  # type: ignore[method-assign]
    return factory


@pytest.fixture
def debug_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The 20-node chain with a planted wrong Relu on ``buggy``; ``digits`` runs the demo
    model's last two ops (the mini cpu the rest)."""
    registry = registry_with(_kernels_factory("buggy", BUGGY), _kernels_factory("digits", DIGIT_OPS), mini_factory(),
                             plugin_name="console")
    monkeypatch.setattr(plugins, "_default_registry", registry)
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model(), str(path))
    return path


@pytest.fixture
def compiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A 3-node chain whose Add and Relu a compiling provider compiles: (model, compiled path)."""
    monkeypatch.setenv("EPOXY_COMPILE_KEY", str(tmp_path / "compile.key"))
    monkeypatch.setattr(plugins, "_default_registry",
                        registry_with(aot_factory([["n0_add", "n1_relu"]]), mini_factory(), plugin_name="console"))
    model = chain(["Add", "Relu", "Neg"])
    model.ir_version = 8
    path, out = tmp_path / "m.onnx", tmp_path / "m.compiled.onnx"
    onnx.save(model, str(path))
    assert main(["compile", str(path), "-o", str(out), "--providers", "fuser,cpu", "--quiet",
                 "--external"]) == 0
    return path, out


# -- each command: (argv builder, what its output must name, whether it takes --json) -------------
Argv = Callable[[Path, Path], list[str]]
COMMANDS: dict[str, tuple[str, Argv, str, bool]] = {
    "partition": ("debug_model", lambda m, t: ["partition", str(m), "--providers", "buggy,cpu"], "relu_planted",
                  True),
    "validate": ("debug_model", lambda m, t: ["validate", str(m), "--providers", "buggy,cpu"], "relu_planted", True),
    "reduce": ("debug_model", lambda m, t: ["reduce", str(m), "--providers", "buggy", "--diverges", "-o",
                                            str(t / "repro")], "relu_planted (Relu)", True),
    "run": ("debug_model", lambda m, t: ["run", str(m), "--input", f"x={t / 'x.npy'}", "--providers", "buggy,cpu"],
            "ran in", False),
    "demo": ("debug_model", lambda m, t: ["demo", "--providers", "digits,cpu", "--runs", "2"], "accuracy on", False),
    "compile": ("compiled", lambda m, t: ["compile", str(m), "-o", str(t / "again.onnx"), "--providers", "fuser,cpu",
                                          "--quiet"], "compiled group", True),
    "inspect": ("compiled", lambda m, t: ["inspect", str(t / "m.compiled.onnx")], "compiled by epoxy", True),
}


@pytest.fixture(params=sorted(COMMANDS))
def command(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[list[str], str, bool]:
    fixture, argv, names, takes_json = COMMANDS[request.param]
    made = request.getfixturevalue(fixture)
    model = made[0] if isinstance(made, tuple) else made
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32))
    return argv(model, tmp_path), names, takes_json


def test_a_terminal_gets_rich_output(command: tuple[list[str], str, bool], monkeypatch: pytest.MonkeyPatch) -> None:
    argv, names, _ = command
    text = _printed(monkeypatch, argv, tty=True)
    assert ANSI.search(text), f"{argv[0]}: nothing drawn by rich on a terminal"
    assert names in ANSI.sub("", text)


@pytest.mark.parametrize("no_color", [False, True], ids=["pipe", "NO_COLOR"])
def test_plain_output_has_no_ansi_codes(command: tuple[list[str], str, bool], monkeypatch: pytest.MonkeyPatch,
                                        no_color: bool) -> None:
    argv, names, _ = command
    text = _printed(monkeypatch, argv, tty=no_color, no_color=no_color)  # NO_COLOR wins over a terminal
    assert names in text and not ANSI.search(text)


def test_json_is_plain_even_on_a_terminal(command: tuple[list[str], str, bool],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    argv, _, takes_json = command
    if not takes_json:
        with pytest.raises(SystemExit):  # the command has no --json: argparse refuses it
            _printed(monkeypatch, [*argv, "--json"], tty=True)
        return
    text = _printed(monkeypatch, [*argv, "--json"], tty=True)
    assert not ANSI.search(text)
    assert isinstance(json.loads(text), dict)


def test_inspect_on_a_terminal_marks_a_tampered_group(compiled: tuple[Path, Path],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _, out = compiled
    assert "every compiled group is ok" in ANSI.sub("", _printed(monkeypatch, ["inspect", str(out)], tty=True))
    for blob in out.parent.glob("*.blob"):
        blob.write_bytes(b"tampered")
    text = ANSI.sub("", _printed(monkeypatch, ["inspect", str(out)], tty=True))
    assert "would be compiled again" in text


# -- quantize: its report and its calibration bar ------------------------------------------------
def _report() -> QuantizationReport:
    return QuantizationReport("static", "activation uint8 / weight int8", ("cpu",), 1000, 300,
                              calibration_batches=4, held_out_batches=1, checks=["onnx checker"],
                              notes=["a note"], warnings=["a warning"])


def test_quantize_report_is_coloured_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    drawn = Tty()
    quantize_cmd.print_report(Console(drawn), _report(), "out.onnx")
    assert ANSI.search(drawn.getvalue()) and "written: out.onnx" in ANSI.sub("", drawn.getvalue())
    plain = io.StringIO()
    quantize_cmd.print_report(Console(plain), _report(), "out.onnx")
    assert plain.getvalue() == _report().format() + "\nwritten: out.onnx\n"  # the text it always was
    assert [quantize_cmd.kind_of(line) for line in ("warning: x", "note: y", "checks passed: z", "mode: m")] == [
        "warn", "info", "ok", None]


def test_calibration_bar_draws_on_a_terminal_and_closes_at_the_last_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    err = Tty()
    with quantize_cmd.CalibrationBar(Console(io.StringIO(), progress_file=err)) as bar:
        for done in range(1, 4):
            bar(done, 3)
        assert bar._advance is None  # closed at 3/3: a later calibration (auto mode) opens a new one
        bar(1, 2)
        assert bar._advance is not None
    assert bar._advance is None and ANSI.search(err.getvalue())
    quiet = io.StringIO()  # stderr not a terminal: nothing drawn, as before
    with quantize_cmd.CalibrationBar(Console(io.StringIO(), progress_file=quiet)) as bar:
        bar(1, 1)
    assert quiet.getvalue() == ""
