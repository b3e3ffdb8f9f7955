"""``options()`` (what ``epoxy providers`` shows) and the options ``create`` accepts are one
table: every described option is accepted and takes effect, any other name is refused."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from epoxy.contract import Device
from epoxy.errors import InvalidArgumentError
from epoxy_ep_coreml.factory import CoreMLProviderFactory
from epoxy_ep_coreml.options import COMPUTE_PRECISIONS, COMPUTE_UNITS, DEPLOYMENT_TARGETS, OPTIONS, CoreMLOptions

DEVICE = Device("coreml", "apple")  # create() validates before it needs macOS
#: a valid value and what it parses to, other than the default, for every option
SAMPLES = {
    "compute_units": ("CPU_ONLY", "CPU_ONLY"), "compute_precision": ("fp16", "fp16"),
    "minimum_deployment_target": ("macOS14", "macOS14"), "cache_dir": ("/tmp/epoxy-coreml", Path("/tmp/epoxy-coreml")),
}


def test_described_options_are_the_dataclass_fields():
    assert CoreMLProviderFactory().options() == OPTIONS
    assert set(OPTIONS) == {f.name for f in fields(CoreMLOptions)} == set(SAMPLES)


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_every_described_option_is_accepted(name):
    value, parsed = SAMPLES[name]
    provider = CoreMLProviderFactory().create(DEVICE, {name: value})
    assert getattr(provider.options, name) == parsed != getattr(CoreMLOptions(), name)


def test_unknown_option_names_the_known_ones():
    with pytest.raises(InvalidArgumentError, match=r"coreml provider: unknown options \['compute_unit'\]") as info:
        CoreMLProviderFactory().create(DEVICE, {"compute_unit": "ALL"})
    assert all(repr(name) in str(info.value) for name in OPTIONS)


def test_help_names_the_values_and_the_defaults():
    defaults = CoreMLOptions()
    assert all(v in OPTIONS["compute_units"] for v in COMPUTE_UNITS)
    assert all(v in OPTIONS["compute_precision"] for v in COMPUTE_PRECISIONS)
    assert "iOS15-18" in OPTIONS["minimum_deployment_target"] and len(DEPLOYMENT_TARGETS) == 16
    for name in ("compute_units", "compute_precision", "minimum_deployment_target"):
        assert f"default {getattr(defaults, name)}" in OPTIONS[name], name
