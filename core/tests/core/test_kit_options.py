"""``epoxy.kit.OptionTable``: one rule per kind for every provider, clear errors, and the
help ``options()`` shows derived from the same rows ``create`` parses with."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from epoxy.errors import InvalidArgumentError
from epoxy.kit import Kind, Option, OptionTable
from epoxy.kit.options import KINDS

ENV = "EPOXY_TEST_KIT_OPTIONS_COST"


def one(kind: Any, default: Any = None, **kw: Any) -> OptionTable[Any]:
    return OptionTable("demo", [Option("x", kind, default, "an option", **kw)])


def parsed(kind: Any, value: Any, **kw: Any) -> Any:
    return one(kind, **kw).parse({"x": value})["x"]


def refused(kind: Any, value: Any, **kw: Any) -> str:
    with pytest.raises(InvalidArgumentError) as info:
        one(kind, **kw).parse({"x": value})
    return str(info.value)


# -- every kind: what it takes and what it refuses ---------------------------------------------
@pytest.mark.parametrize("value, want", [
    (True, True), (False, False), (1, True), (0, False), ("1", True), ("0", False), ("true", True),
    ("True", True), ("TRUE", True), (" false ", False), ("False", False),
])
def test_bool_takes_onnxruntime_spellings(value, want):
    assert parsed("bool", value) is want


@pytest.mark.parametrize("value", ["yes", "no", "on", "off", "", 2, -1, 0.0, 1.5, "t", [True]])
def test_bool_refuses_everything_else(value):
    message = refused("bool", value)
    assert f"demo provider: option x={value!r}; expected True or False" in message


@pytest.mark.parametrize("value, want", [(4, 4), ("4", 4), (" 12 ", 12), ("-3", -3), (0, 0)])
def test_int_from_ints_and_decimal_strings(value, want):
    got = parsed("int", value)
    assert got == want and type(got) is int


@pytest.mark.parametrize("value", [True, "4.0", 4.0, "four", "", "0x10", [4]])
def test_int_refuses_non_ints(value):
    assert "expected an int" in refused("int", value)


def test_int_range_is_inclusive_and_named():
    assert parsed("int", "0", minimum=0) == 0 and parsed("int", 8, minimum=0, maximum=8) == 8
    assert refused("int", -1, minimum=0) == "demo provider: option x=-1; expected an int >= 0"
    assert refused("int", "9", minimum=1, maximum=8) == "demo provider: option x='9'; expected an int in [1, 8]"
    assert "expected an int <= 2" in refused("int", 3, maximum=2)


@pytest.mark.parametrize("value, want", [(0.5, 0.5), (2, 2.0), ("0.25", 0.25), (" 1e3 ", 1000.0)])
def test_float_from_numbers_and_strings(value, want):
    got = parsed("float", value)
    assert got == want and type(got) is float


@pytest.mark.parametrize("value", [True, "lots", "nan", float("inf"), [1.0], ""])
def test_float_refuses_non_numbers(value):
    assert "expected a number" in refused("float", value)


def test_float_range():
    assert refused("float", -0.5, minimum=0) == "demo provider: option x=-0.5; expected a number >= 0"


def test_enum_matches_any_case_and_gives_the_declared_spelling():
    assert parsed("enum", "throughput", choices=("LATENCY", "THROUGHPUT")) == "THROUGHPUT"
    assert parsed("enum", " macos14 ", choices=("iOS15", "macOS14")) == "macOS14"


@pytest.mark.parametrize("value", ["FAST", 1, 1.5, ""])
def test_enum_refuses_other_values_listing_the_allowed(value):
    message = refused("enum", value, choices=("auto", "off"))
    assert message == f"demo provider: option x={value!r}; expected one of ['auto', 'off']"


def test_aliases_are_other_spellings_of_a_value():
    kw = {"choices": ("f32", "f16"), "aliases": {"FP16": "f16", "default": None}}
    assert parsed("enum", "fp16", **kw) == "f16" and parsed("enum", "Default", **kw) is None
    # a synonym of a choice is not listed; an alias with a meaning of its own is
    assert one("enum", "f32", **kw).describe()["x"] == "an option: f32 | f16 | default (default f32)"
    assert refused("enum", "f8", **kw).endswith("expected one of ['f32', 'f16'] or one of ['default']")
    assert parsed("int", "auto", aliases={"auto": -1}) == -1  # any kind can have them


def test_str_is_stripped_and_non_empty():
    assert parsed("str", " GPU.1 ") == "GPU.1"
    assert "expected a non-empty string" in refused("str", "  ")
    assert "expected a non-empty string" in refused("str", 3)


def test_path_gives_a_pathlib_path(tmp_path):
    assert parsed("path", str(tmp_path)) == tmp_path and isinstance(parsed("path", tmp_path), Path)
    assert parsed("path", "cache", convert=os.fspath) == "cache"  # what a provider stores, if not a Path
    assert "expected a path" in refused("path", 3)
    assert "expected a path" in refused("path", "")


@pytest.mark.parametrize("value", ["Relu, Add", ["Relu", " Add "], ("Relu", "Add"), "Relu,,Add,"])
def test_list_from_comma_strings_and_sequences(value):
    assert parsed("list", value) == ("Relu", "Add")


def test_list_from_a_set_is_in_a_stable_order():
    assert parsed("list", {"Relu", "Add", "Mul"}) == ("Add", "Mul", "Relu")


@pytest.mark.parametrize("value", ["", " , ", 3, ["Relu", 3], []])
def test_list_refuses_empty_and_non_strings(value):
    assert "expected a comma-separated string or a list of strings" in refused("list", value)


def test_list_convert():
    assert parsed("list", "Relu,Add", convert=frozenset) == frozenset({"Relu", "Add"})


def test_dict_from_mappings_and_json():
    assert parsed("dict", {"NUM": 1}) == {"NUM": 1}
    assert parsed("dict", '{"ENABLE_CPU_PINNING": false}') == {"ENABLE_CPU_PINNING": False}
    for value in (["a"], '["a"]', "{not json", {1: "a"}):
        assert "expected a mapping with str keys or a JSON object string" in refused("dict", value)


def _even(value: Any, option: Option) -> int:
    number = int(value)
    if number % 2:
        raise ValueError(value)
    return number


def test_a_provider_kind():
    table = one(Kind(_even, "even int", "an even int"), 0)
    assert table.parse({"x": "4"})["x"] == 4
    assert table.describe()["x"] == "an option: even int (default 0)"
    with pytest.raises(InvalidArgumentError, match=r"option x=3; expected an even int$"):
        table.parse({"x": 3})


def test_every_registered_kind_has_help_and_an_expectation():
    for name, kind in KINDS.items():
        option = Option("x", name, None, "h", choices=("a",) if name == "enum" else ())
        assert kind.described(option) and kind.expected(option), name


# -- names, defaults, environment --------------------------------------------------------------
@dataclass(frozen=True)
class Demo:
    fuse: bool = True
    tile: int = 32
    algo: str = "auto"
    config: dict[str, Any] = field(default_factory=dict)


DEMO = OptionTable("demo", [
    Option("fuse", "bool", True, "fuse elementwise chains"),
    Option("tile", "int", 32, "tile edge", minimum=1, env=ENV),
    Option("algo", "enum", "auto", "conv algorithm", choices=("auto", "im2col"), notes="auto: 1x1 as GEMM"),
    Option("config", "dict", {}, "extra properties"),
], Demo)


def test_typed_result_with_defaults_filled(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert DEMO.parse({}) == Demo() == DEMO.parse(None)
    assert DEMO.parse({"fuse": "0", "tile": "8", "algo": "IM2COL"}) == Demo(False, 8, "im2col")
    assert DEMO.parse({"tile": None}).tile == 32  # None means the default


def test_mutable_defaults_are_not_shared():
    first = DEMO.parse({})
    first.config["A"] = 1
    assert DEMO.parse({}).config == {}


def test_without_a_result_it_is_a_read_only_mapping():
    values = one("int", 3).parse({})
    assert dict(values) == {"x": 3}
    with pytest.raises(TypeError):
        values["x"] = 4  # type: ignore[index]


def test_unknown_names_are_refused_listing_the_known():
    with pytest.raises(InvalidArgumentError) as info:
        DEMO.parse({"tiles": 4})
    assert str(info.value) == ("demo provider: unknown options ['tiles']; known options: "
                               "['algo', 'config', 'fuse', 'tile']; did you mean 'tile'?")
    with pytest.raises(InvalidArgumentError, match=r"unknown options \['a', 'b'\]; known options: \[.*\]$"):
        DEMO.parse({"b": 1, "a": 2, "fuse": True})
    with pytest.raises(InvalidArgumentError, match=r"unknown options \[3\]"):
        DEMO.parse({3: 1})


def test_environment_fills_an_option_not_given(monkeypatch):
    monkeypatch.setenv(ENV, "16")
    assert DEMO.parse({}).tile == 16 and DEMO.parse({"tile": 4}).tile == 4
    monkeypatch.setenv(ENV, "lots")
    with pytest.raises(InvalidArgumentError, match=rf"option tile from \${ENV}='lots'; expected an int >= 1"):
        DEMO.parse({})
    monkeypatch.setenv(ENV, " ")
    assert DEMO.parse({}).tile == 32


def test_the_dataclass_and_the_table_cannot_drift():
    rows = [Option("fuse", "bool", True, "h"), Option("tile", "int", 32, "h"), Option("algo", "enum", "auto", "h",
            choices=("auto",)), Option("config", "dict", {}, "h")]
    with pytest.raises(TypeError, match="fields"):
        OptionTable("demo", rows[:3], Demo)
    with pytest.raises(TypeError, match=r"Demo.tile defaults to 32, the option to 16"):
        OptionTable("demo", [*rows[:1], Option("tile", "int", 16, "h"), *rows[2:]], Demo)
    with pytest.raises(ValueError, match="declared twice"):
        OptionTable("demo", [rows[0], rows[0]])


@pytest.mark.parametrize("kw, match", [
    ({"kind": "number"}, "unknown kind 'number'"),
    ({"kind": "enum"}, "choices go with kind 'enum'"),
    ({"kind": "int", "choices": ("a",)}, "choices go with kind 'enum'"),
    ({"kind": "int", "help": "two\nlines"}, "one line"),
    ({"kind": "int", "help": " "}, "help must say"),
])
def test_bad_declarations_fail_at_import(kw, match):
    with pytest.raises(ValueError, match=match):
        Option(**{"name": "x", "default": None, "help": "h", **kw})


# -- describe ----------------------------------------------------------------------------------
def test_describe_names_allowed_values_and_default(monkeypatch):
    assert DEMO.describe() == {
        "fuse": "fuse elementwise chains: True | False (default True)",
        "tile": f"tile edge: int >= 1 (default 32 or ${ENV})",
        "algo": "conv algorithm: auto | im2col (default auto); auto: 1x1 as GEMM",
        "config": "extra properties: mapping or JSON object (default {})",
    }
    assert DEMO.names == ("fuse", "tile", "algo", "config")


@pytest.mark.parametrize("kind, default, shown", [
    ("float", 30.0, "30"), ("list", None, "none"), ("list", ("a", "b"), "a,b"), ("list", frozenset("cab"), "a,b,c"),
    ("path", Path("/c"), "/c"),
    ("bool", False, "False"),
])
def test_describe_shows_defaults_as_typed(kind, default, shown):
    assert one(kind, default).describe()["x"].endswith(f"(default {shown})")


def test_default_text_replaces_a_default_that_says_little():
    table = one("str", None, default_text="the device index picks")
    assert table.describe()["x"] == "an option: string (default the device index picks)"


def test_described_help_is_one_line_for_every_kind():
    """The conformance kit's rule (options() help is one line), for every kind's text."""
    for name in KINDS:
        option = Option("x", name, None, "h", choices=("a", "b") if name == "enum" else ())
        assert "\n" not in option.describe()
