"""``options()`` (what ``epoxy providers`` shows) and the options ``create`` accepts are one
table: every described option is accepted and takes effect, any other name is refused."""

from __future__ import annotations

from dataclasses import fields

import pytest

from epoxy.errors import InvalidArgumentError
from epoxy.plugins import default_registry
from epoxy_ep_cpu.factory import CpuProviderFactory
from epoxy_ep_cpu.settings import CHOICES, OPTIONS, CpuSettings

#: a valid value, other than the default, for every option (a new option needs one here)
SAMPLES = {"conv_winograd": "f23", "conv_algo_search": "measure", "jit": False, "jit_threads": 1,
           "fuse_elementwise": True, "heap_arrays": False}


def _is_the_table(described: dict[str, str]) -> bool:
    """The table's lines, the ``jit`` one followed by whether the tier runs here (``heap_arrays``
    by what this process did)."""
    return set(described) == set(OPTIONS) and all(described[k].startswith(OPTIONS[k]) for k in OPTIONS)


def test_described_options_are_the_settings():
    assert _is_the_table(dict(CpuProviderFactory().options()))
    assert set(OPTIONS) == {f.name for f in fields(CpuSettings)} == set(SAMPLES)


def test_entry_point_factory_describes_them():
    entry = default_registry().get("cpu")
    assert _is_the_table(dict(entry.options())) and entry.options_error is None


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_every_described_option_is_accepted(name):
    factory = CpuProviderFactory()
    provider = factory.create(factory.devices()[0], {name: SAMPLES[name]})
    assert getattr(provider.settings, name) == SAMPLES[name] != getattr(CpuSettings(), name)


def test_unknown_option_names_the_known_ones():
    factory = CpuProviderFactory()
    with pytest.raises(InvalidArgumentError, match=r"cpu provider: unknown options \['threads'\]; "
                                                   r"known options: \['conv_algo_search', 'conv_winograd', "
                                                   r"'fuse_elementwise', 'heap_arrays', 'jit', 'jit_threads'\]"):
        factory.create(factory.devices()[0], {"threads": 2})


@pytest.mark.parametrize("name", sorted(CHOICES))
def test_help_names_every_value_and_the_default(name):
    text = OPTIONS[name]
    assert all(value in text for value in CHOICES[name])
    assert f"(default {getattr(CpuSettings(), name)})" in text


def test_values_ignore_case_and_spaces():
    """The kit's rule for every provider's enums (``epoxy.kit.OptionTable``)."""
    factory = CpuProviderFactory()
    provider = factory.create(factory.devices()[0], {"conv_winograd": " F23 ", "conv_algo_search": "Measure"})
    assert (provider.settings.conv_winograd, provider.settings.conv_algo_search) == ("f23", "measure")
