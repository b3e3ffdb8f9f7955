"""``epoxy sdk``: the core imports the SDK only when the subcommand runs, and says what to
install when it is missing (the core never depends on epoxy-sdk)."""

from __future__ import annotations

import sys

import pytest

from epoxy.cli.main import build_parser, main


def test_missing_sdk_is_a_clear_error(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "epoxy_sdk.scaffold", None)  # import fails as if not installed
    assert main(["sdk", "new-provider", "npu", "--dir", str(tmp_path / "npu")]) == 1
    err = capsys.readouterr().err
    assert "the epoxy SDK is not installed (pip install epoxy-sdk)" in err
    assert not (tmp_path / "npu").exists()


def test_parser_does_not_import_the_sdk(monkeypatch):
    monkeypatch.delitem(sys.modules, "epoxy_sdk.scaffold", raising=False)
    build_parser()
    assert "epoxy_sdk.scaffold" not in sys.modules


def test_sdk_without_subcommand_prints_help(capsys):
    assert main(["sdk"]) == 2
    assert "new-provider" in capsys.readouterr().out


@pytest.mark.parametrize("args", [["--kernels", "--compiler"], []])
def test_new_provider_arguments(args, capsys):
    if args:
        with pytest.raises(SystemExit):  # one style at most
            build_parser()[0].parse_args(["sdk", "new-provider", "npu", *args])
        assert "not allowed with argument" in capsys.readouterr().err
    else:
        parsed = build_parser()[0].parse_args(["sdk", "new-provider", "npu"])
        assert (parsed.name, parsed.style, parsed.dir) == ("npu", "kernels", None)
