"""``epoxy providers`` shows each provider's options (its optional ``options()``); a factory
without it, or whose ``options()`` is broken, is still listed and never breaks the command."""

from __future__ import annotations

import json
import time

import pytest
from fakes import Factory, mini_factory
from models import chain

from epoxy import InferenceSession, PluginLoadError, plugins
from epoxy.cli.main import main
from epoxy.options import CORE_PROVIDER_OPTIONS

SPEED_HELP = "fast | slow (default fast)"


class Described(Factory):
    def options(self):  # type: ignore[no-untyped-def]
        return {"speed": SPEED_HELP, "tile": "int > 0 (default 32)"}


class Raising(Factory):
    def options(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("options table missing")


class NotStr(Factory):
    def options(self):  # type: ignore[no-untyped-def]
        return {"speed": 3}


class Hanging(Factory):
    def options(self):  # type: ignore[no-untyped-def]
        time.sleep(2)
        return {}


def _kernels(name):  # type: ignore[no-untyped-def]
    return mini_factory(name).make


@pytest.fixture
def registry(make_registry, monkeypatch):  # type: ignore[no-untyped-def]
    """The default registry (what the CLI reads) holding one factory of each kind."""
    reg = make_registry(
        Described("described", _kernels("described"), 30),
        Factory("plain", _kernels("plain"), 20),
        Raising("raising", _kernels("raising"), 10),
        NotStr("notstr", _kernels("notstr"), 5),
    )
    monkeypatch.setattr(plugins, "_default_registry", reg)
    return reg


def _run(capsys, *args: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    code = main(["providers", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _row(out: str, *cells: str) -> bool:
    return any(line.split(None, len(cells) - 1) == list(cells) for line in out.splitlines())


def test_default_output_names_options_per_provider(registry, capsys):
    code, out, _ = _run(capsys)
    assert code == 0
    providers, options = out.split("\noptions (", 1)
    assert all(name in providers for name in ("described", "plain", "raising", "notstr", "cpu"))
    assert "epoxy providers --options" in options  # where the help is
    assert _row(options, "described", "speed, tile")
    assert _row(options, "plain", "-")
    assert _row(options, "raising", "? (see --options)")
    assert _row(options, "notstr", "? (see --options)")
    assert _row(options, "(all)", "device_index, device_id")
    assert SPEED_HELP not in out  # the compact view stays compact


def test_options_flag_prints_the_help(registry, capsys):
    code, out, _ = _run(capsys, "--options")
    assert code == 0
    assert _row(out, "described", "speed", SPEED_HELP)
    assert _row(out, "raising", "?", "options() failed: RuntimeError: options table missing")
    assert _row(out, "notstr", "?", "options() failed: TypeError: names and help must be str; not for ['speed']")
    assert _row(out, "(all)", "device_index", f"{CORE_PROVIDER_OPTIONS['device_index']} [core]")
    assert "plain" not in out  # describes nothing: no rows
    assert "package" not in out  # only the options table


def test_options_for_one_provider(registry, capsys):
    code, out, _ = _run(capsys, "--options", "described")
    assert code == 0 and "speed" in out and "raising" not in out
    code, _, err = _run(capsys, "--options", "nope")
    assert code == 1 and "unknown provider 'nope'" in err and "described" in err


def test_json_has_options_per_provider(registry, capsys):
    code, out, _ = _run(capsys, "--json")
    assert code == 0
    data = json.loads(out)
    by_name = {p["name"]: p for p in data["providers"]}
    assert by_name["described"]["options"] == {"speed": SPEED_HELP, "tile": "int > 0 (default 32)"}
    assert by_name["described"]["options_error"] is None
    assert by_name["plain"]["options"] == {} and by_name["plain"]["options_error"] is None
    assert by_name["raising"]["options"] == {}
    assert by_name["raising"]["options_error"] == "options() failed: RuntimeError: options table missing"
    assert "TypeError" in by_name["notstr"]["options_error"]
    assert data["core_options"] == CORE_PROVIDER_OPTIONS


def test_broken_options_never_break_the_provider(registry):
    entry = registry.get("raising")
    assert entry.options() == {} and "options table missing" in entry.options_error
    assert not registry.failures  # the plugin loaded; only its description is missing
    session = InferenceSession(chain(["Relu"]), providers=["raising"], registry=registry)
    assert session.get_providers()[0] == "raising"


def test_options_are_asked_once(make_registry):
    calls = []

    class Counting(Factory):
        def options(self):  # type: ignore[no-untyped-def]
            calls.append(1)
            return {"a": "b"}

    entry = make_registry(Counting("counting", _kernels("counting"), 10)).get("counting")
    assert entry.options() == entry.options() == {"a": "b"}
    assert len(calls) == 1


def test_hanging_options_time_out(make_registry, monkeypatch):
    monkeypatch.setenv("EPOXY_DEVICE_TIMEOUT", "0.05")
    entry = make_registry(Hanging("hanging", _kernels("hanging"), 10)).get("hanging")
    assert entry.options() == {} and "did not return within" in entry.options_error


def test_strict_mode_reraises_broken_options(make_registry, monkeypatch):
    monkeypatch.setenv("EPOXY_STRICT_PLUGINS", "1")
    entry = make_registry(Raising("raising", _kernels("raising"), 10)).get("raising")
    with pytest.raises(PluginLoadError, match="options table missing"):
        entry.options()
