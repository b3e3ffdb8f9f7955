"""``epoxy doctor``: the report's sections, its environment list, plain text off a terminal."""

from __future__ import annotations

import io
import json
import re

import pytest

from epoxy import plugins
from epoxy.cli import doctor_cmd
from epoxy.cli._console import Console
from epoxy.cli.main import build_parser, main
from epoxy.diagnostics import cpu, env
from epoxy.hookspecs import hookimpl

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class BrokenPlugin:
    @hookimpl
    def epoxy_register_providers(self, register):  # type: ignore[no-untyped-def]
        raise RuntimeError("driver library missing")


@pytest.fixture
def registry(make_registry, monkeypatch):  # type: ignore[no-untyped-def]
    """The default registry: the mini cpu, plus a plugin that fails to load."""
    reg = make_registry()
    reg.add_plugin(BrokenPlugin(), name="broken-plugin", distribution="epoxy-ep-broken")
    monkeypatch.setattr(plugins, "_default_registry", reg)
    return reg


def _doctor(capsys, *args: str) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    code = main(["doctor", *args])
    return code, capsys.readouterr().out


def test_json_has_every_section_and_a_set_epoxy_variable(registry, capsys, monkeypatch):
    monkeypatch.setenv("EPOXY_CHECK_OUTPUTS", "1")
    monkeypatch.setenv("EPOXY_CHEK_OUTPUTS", "1")  # misspelled: still listed, marked unknown
    code, out = _doctor(capsys, "--json")
    assert code == 0
    data = json.loads(out)
    assert {"epoxy_version", "platform", "packages", "cpu", "thread_pools", "providers", "failed_plugins",
            "environment"} <= set(data)
    assert "epoxy-core" in data["packages"]["epoxy"]
    assert data["packages"]["dependencies"]["numpy"] == np_version()
    assert set(data["packages"]["dependencies"]) >= {"onnx", "onnx-ir", "numba", "openvino", "onnxruntime",
                                                      "ml_dtypes", "pluggy"}
    assert data["platform"]["python"].split()[-1].count(".") == 2
    assert data["cpu"]["logical_cores"] >= 1
    assert any(p["user_api"] == "blas" for p in data["thread_pools"])  # numpy's BLAS is always there
    assert [p["name"] for p in data["providers"]] == ["cpu"] and data["providers"][0]["devices"]
    assert data["failed_plugins"][0]["plugin"] == "broken-plugin"
    assert "driver library missing" in data["failed_plugins"][0]["reason"]
    envs = {e["name"]: e for e in data["environment"]}
    assert envs["EPOXY_CHECK_OUTPUTS"]["value"] == "1" and envs["EPOXY_CHECK_OUTPUTS"]["effect"]
    assert envs["EPOXY_CHEK_OUTPUTS"]["effect"] is None
    assert "HOME" not in envs


def np_version() -> str:
    import numpy

    return numpy.__version__


def test_plain_report_has_no_ansi_codes_off_a_terminal(registry, capsys, monkeypatch):
    monkeypatch.setenv("EPOXY_STRAIGHT_LINE", "0")
    code, out = _doctor(capsys)  # capsys's stdout is not a TTY
    assert code == 0
    assert not ANSI.search(out)
    for section in ("packages", "cpu", "thread pools", "providers", "environment variables"):
        assert f"\n{section}" in out
    assert "broken-plugin" in out and "driver library missing" in out
    assert re.search(r"^EPOXY_STRAIGHT_LINE\s+0\s+", out, re.M)


def test_a_section_that_breaks_is_reported_not_fatal(registry, capsys, monkeypatch):
    import epoxy.diagnostics as diagnostics

    def broken() -> None:
        raise OSError("no /proc here")

    monkeypatch.setattr(diagnostics, "cpu_info", broken)
    code, out = _doctor(capsys)
    assert code == 0 and "could not gather: OSError: no /proc here" in out and "providers" in out


def test_terminal_output_is_drawn_by_rich_unless_no_color(registry, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    report = doctor_cmd.collect()
    drawn = io.StringIO()
    doctor_cmd.print_report(Console(drawn, plain=False), report)
    assert ANSI.search(drawn.getvalue())  # the rich path really colours
    monkeypatch.setenv("NO_COLOR", "1")

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    plain = Tty()
    doctor_cmd.print_report(Console(plain), report)
    assert not ANSI.search(plain.getvalue()) and "packages" in plain.getvalue()


def test_cpuinfo_parsing_reads_features():
    text = ("processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu sse4_2 avx2 avx512f avx512_vnni amx_tile\n\n"
            "processor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n")
    info = cpu.cpu_info(text)
    assert info["model"] == "Test CPU 9000"
    assert info["features"]["avx2"] and info["features"]["avx512_vnni"] and info["features"]["amx"]
    assert not info["features"]["amx_int8"] and not info["features"]["avx_vnni"]
    assert cpu.cpu_info("")["features"] is None  # unknown, not "no"


def test_environment_lists_known_and_prefixed_names_only():
    listed = env.environment({"OMP_NUM_THREADS": "4", "PATH": "/bin", "NUMBA_WHATEVER": "x", "EPOXY_PROVIDERS": "cpu"})
    assert [e["name"] for e in listed] == ["EPOXY_PROVIDERS", "NUMBA_WHATEVER", "OMP_NUM_THREADS"]
    assert listed[1]["effect"] is None and listed[2]["effect"]


def test_help_shows_an_example():
    parser, _ = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["doctor"]  # type: ignore[union-attr]
    assert "example:" in sub.format_help() and "epoxy doctor --json" in sub.format_help()



def test_every_epoxy_variable_the_code_reads_is_known():
    """A variable the core or a bundled plugin reads but the doctor calls unknown would send a
    user chasing a misspelling that is not one: every ``"EPOXY_..."`` literal in their sources."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    sources = [root / "core" / "src", *sorted((root / "plugins").glob("*/src")), root / "serve" / "src"]
    named = {m for src in sources if src.is_dir() for path in src.rglob("*.py")
             for m in re.findall(r"[\"'](EPOXY_[A-Z0-9_]+)[\"']", path.read_text(encoding="utf-8"))}
    assert "EPOXY_SESSION_CACHE_DIR" in named  # the scan found the sources
    assert sorted(named - set(env.KNOWN)) == []
