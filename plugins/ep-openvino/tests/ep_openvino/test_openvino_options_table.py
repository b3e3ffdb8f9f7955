"""``options()`` (what ``epoxy providers`` shows) and the options ``create`` accepts are one
table: every described option is accepted and takes effect, any other name is refused."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from epoxy.errors import InvalidArgumentError
from epoxy_ep_openvino.factory import OpenVINOProviderFactory
from epoxy_ep_openvino.options import HINTS, OPTIONS, OpenVINOOptions

#: a valid value, other than the default, for every option (a new option needs one here)
SAMPLES = {
    "device": "CPU", "performance_hint": "THROUGHPUT", "num_threads": 2, "num_streams": 2, "precision": "f16",
    "cache_dir": "CACHE", "min_group_cost": 5.0, "float16": True, "config": {"ENABLE_CPU_PINNING": False},
    "specialize_shapes": False, "max_shape_specializations": 3, "one_thread_below_macs": 0.0,
    "dynamic_quantization_group_size": 64,
}
README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture
def factory():
    factory = OpenVINOProviderFactory()
    factory.devices()  # openvino is installed in this test environment
    return factory


def test_described_options_are_the_dataclass_fields():
    assert OpenVINOProviderFactory().options() == OPTIONS
    assert set(OPTIONS) == {f.name for f in fields(OpenVINOOptions)} == set(SAMPLES)


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_every_described_option_is_accepted(factory, name, tmp_path, monkeypatch):
    monkeypatch.delenv("EPOXY_OPENVINO_MIN_GROUP_COST", raising=False)
    value = str(tmp_path) if name == "cache_dir" else SAMPLES[name]
    provider = factory.create(factory.devices()[0], {name: value})
    assert getattr(provider.options, name) == value != getattr(OpenVINOOptions(), name)


def test_unknown_option_names_the_known_ones(factory):
    with pytest.raises(InvalidArgumentError, match=r"openvino provider: unknown options \['thread'\]") as info:
        factory.create(factory.devices()[0], {"thread": 2})
    assert all(repr(name) in str(info.value) for name in OPTIONS)


def test_help_names_the_values_and_the_defaults():
    defaults = OpenVINOOptions()
    assert all(hint in OPTIONS["performance_hint"] for hint in HINTS)
    for name in ("performance_hint", "num_threads", "precision", "min_group_cost", "float16", "specialize_shapes",
                 "max_shape_specializations"):
        value = getattr(defaults, name)
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        assert f"default {shown}" in OPTIONS[name], name


def test_readme_option_table_lists_every_option():
    """The README's option table (a row per option) says what the table does."""
    rows = [line for line in README.read_text().splitlines() if line.startswith("| `")]
    listed = {line.split("`")[1] for line in rows}
    assert listed == set(OPTIONS)
