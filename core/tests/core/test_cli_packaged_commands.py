"""Subcommands other packages add through the ``epoxy.commands`` entry point: one that loads is
offered with its help and example; one that fails to import is reported and skipped while the
rest of the CLI works; a known packaged command that is not installed says what to install."""

from __future__ import annotations

import sys
import types
from importlib.metadata import EntryPoint

import pytest

from epoxy.cli import main as cli_main


def _fake_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.HELP = "say hello"  # type: ignore[attr-defined]
    module.EXAMPLE = "example:\n  epoxy hello --who you"  # type: ignore[attr-defined]
    module.add_arguments = lambda p: p.add_argument("--who", default="world")  # type: ignore[attr-defined]
    module.run = lambda args: print(f"hello {args.who}") or 0  # type: ignore[attr-defined]
    return module


@pytest.fixture
def entry_points(monkeypatch: pytest.MonkeyPatch) -> list[EntryPoint]:
    found: list[EntryPoint] = []
    monkeypatch.setattr(cli_main, "entry_points", lambda group: [e for e in found if e.group == group])
    return found


def test_a_packaged_command_runs_with_its_help(entry_points, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "fake_hello_cmd", _fake_module("fake_hello_cmd"))
    entry_points.append(EntryPoint("hello", "fake_hello_cmd", cli_main.COMMAND_GROUP))
    assert cli_main.main(["hello", "--who", "vendor"]) == 0
    assert capsys.readouterr().out == "hello vendor\n"
    with pytest.raises(SystemExit):
        cli_main.main(["hello", "--help"])
    assert "epoxy hello --who you" in capsys.readouterr().out


def test_a_broken_command_package_is_reported_and_skipped(entry_points, capsys):
    entry_points.append(EntryPoint("broken", "no_such_module_for_epoxy_tests", cli_main.COMMAND_GROUP))
    assert cli_main.main(["providers", "--json"]) == 0
    err = capsys.readouterr().err
    assert "command 'broken'" in err and "ModuleNotFoundError" in err and "skipped" in err


def test_a_package_cannot_replace_a_core_command(entry_points, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "fake_hello_cmd", _fake_module("fake_hello_cmd"))
    entry_points.append(EntryPoint("run", "fake_hello_cmd", cli_main.COMMAND_GROUP))
    _, handlers = cli_main.build_parser()
    assert handlers["run"].__module__ == "epoxy.cli.run_cmd"


def test_a_missing_packaged_command_says_what_to_install(entry_points, capsys):
    assert cli_main.main(["serve", "model.onnx", "--port", "1"]) == 2
    assert "epoxy-serve" in capsys.readouterr().err
