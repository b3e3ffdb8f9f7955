"""``options()`` (what ``epoxy providers`` shows) and the options ``create`` accepts are one
table: every described option is accepted and takes effect, any other name is refused."""

from __future__ import annotations

from dataclasses import fields

import pytest

from epoxy.errors import InvalidArgumentError
from epoxy_ep_cuda.factory import CudaProviderFactory
from epoxy_ep_cuda.options import CONV_ALGOS, OPTIONS, CudaOptions
from epoxy_ep_cuda.testing import FAKE_DEVICE, FakeCudaFactory

#: a valid value and what it parses to, other than the default, for every option
SAMPLES = {
    "memory_limit": ("4GB", "4GB"), "fuse": ("false", False), "cuda_graph": (True, True),
    "pinned": (0, False), "conv_algo": ("im2col", "im2col"),
}


def test_described_options_are_the_dataclass_fields():
    assert CudaProviderFactory().options() == FakeCudaFactory().options() == OPTIONS
    assert set(OPTIONS) == {f.name for f in fields(CudaOptions)} == set(SAMPLES)


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_every_described_option_is_accepted(name):
    value, parsed = SAMPLES[name]
    provider = FakeCudaFactory().create(FAKE_DEVICE, {name: value})  # the real create parses the same way
    assert getattr(provider.options, name) == parsed != getattr(CudaOptions(), name)


def test_unknown_option_names_the_known_ones():
    # checked before anything touches CuPy or a GPU
    with pytest.raises(InvalidArgumentError, match=r"cuda provider: unknown options \['graphs'\]") as info:
        CudaProviderFactory().create(FAKE_DEVICE, {"graphs": True})
    assert all(repr(name) in str(info.value) for name in OPTIONS)


def test_help_names_the_values_and_the_defaults():
    defaults = CudaOptions()
    assert all(algo in OPTIONS["conv_algo"] for algo in CONV_ALGOS)
    for name in ("fuse", "cuda_graph", "pinned", "conv_algo"):
        assert f"default {getattr(defaults, name)}".lower() in OPTIONS[name].lower(), name


@pytest.mark.parametrize("value, want", [("1", True), ("True", True), ("false", False), (0, False), (True, True)])
def test_bools_follow_the_kit_rule(value, want):
    """The same spellings every provider takes (``epoxy.kit.OptionTable``)."""
    assert FakeCudaFactory().create(FAKE_DEVICE, {"cuda_graph": value}).options.cuda_graph is want


@pytest.mark.parametrize("value", ["yes", "on", "off", 2])
def test_other_bool_spellings_are_refused(value):
    # "yes"/"no"/"on"/"off" were taken before the shared table; no other provider took them
    with pytest.raises(InvalidArgumentError, match=rf"cuda provider: option fuse={value!r}; expected True or False"):
        FakeCudaFactory().create(FAKE_DEVICE, {"fuse": value})


def test_conv_algo_ignores_case_and_bad_values_name_the_allowed():
    assert FakeCudaFactory().create(FAKE_DEVICE, {"conv_algo": "IM2COL"}).options.conv_algo == "im2col"
    with pytest.raises(InvalidArgumentError, match=r"conv_algo='winograd'; expected one of \['auto', 'im2col'\]"):
        FakeCudaFactory().create(FAKE_DEVICE, {"conv_algo": "winograd"})


@pytest.mark.parametrize("value", ["lots", 0, -5, 1.5, True])
def test_bad_memory_limit_names_the_forms(value):
    with pytest.raises(InvalidArgumentError, match=rf"option memory_limit={value!r}; expected bytes \(int > 0\)"):
        FakeCudaFactory().create(FAKE_DEVICE, {"memory_limit": value})
