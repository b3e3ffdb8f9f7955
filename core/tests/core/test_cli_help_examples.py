"""Every ``epoxy`` subcommand's ``--help`` ends with worked examples (issue #20): the
registry in ``cli/main.py`` shows each command module's ``EXAMPLE``, so a new command
without one fails here."""

from __future__ import annotations

from importlib import import_module

import pytest

from epoxy.cli.main import COMMANDS, main


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_shows_the_modules_example(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = import_module(f"epoxy.cli.{COMMANDS[command][0]}")
    example = getattr(module, "EXAMPLE", None)
    assert isinstance(example, str) and example.startswith("example:"), f"epoxy {command}: no EXAMPLE"
    assert f"epoxy {command}" in example, f"epoxy {command}: its example does not run the command"
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    # shown as written (not re-wrapped): every example line appears whole
    for line in example.splitlines():
        assert line in shown, f"epoxy {command} --help lacks {line!r}"
