"""OpenVINO's devices in ``epoxy.get_devices()`` and the selection policies: its CPU is the
host CPU (one device with ep-cpu when that is installed), ``prefer_cpu`` puts it first, and
``max_performance`` measures it against cpu alone and caches the pick."""

from __future__ import annotations

import json

import numpy as np
import pytest
from ov_test_models import conv_net

import epoxy
from epoxy.devices import get_devices, tune_cache
from epoxy.plugins import ProviderRegistry


@pytest.fixture(scope="module")
def registry():
    return ProviderRegistry()  # the installed providers, as sessions load them


def test_openvinos_cpu_is_the_host_cpu(registry):
    cpus = [d for d in get_devices(registry) if d.kind == "cpu"]
    assert len(cpus) == 1, "one host CPU, however many providers drive it"
    assert "openvino" in cpus[0].providers
    if registry.get("cpu") is not None and registry.get("cpu").available:
        assert cpus[0].providers.index("openvino") < cpus[0].providers.index("cpu")  # by priority
    others = [d for d in get_devices(registry) if d.kind != "cpu" and "openvino" in d.providers]
    assert all(d.vendor == "Intel" for d in others)


def test_prefer_cpu_puts_openvino_first(registry):
    model = conv_net(np.random.default_rng(0)).SerializeToString()
    session = epoxy.InferenceSession(model, providers="auto:prefer_cpu", registry=registry)
    assert session.get_providers()[0] == "openvino"
    assert session.get_providers().selection.chosen[0].device.kind == "cpu"
    assert session.partition_report().summary().get("openvino", 0) > 0


def test_max_performance_measures_openvino_against_cpu_and_caches(registry, tmp_path, monkeypatch):
    if registry.get("cpu") is None or not registry.get("cpu").available:
        pytest.skip("max_performance compares with ep-cpu, which is not installed here")
    monkeypatch.setenv(tune_cache.CACHE_ENV, str(tmp_path))
    model = conv_net(np.random.default_rng(1), channels=16).SerializeToString()
    options = epoxy.SessionOptions(provider_selection_policy="max_performance", tune_budget_s=4)
    session = epoxy.InferenceSession(model, options, registry=registry)
    selection = session.provider_selection()
    rows = {row["providers"][0]: row for row in selection.table}
    assert rows["cpu"]["median_ms"] > 0 and rows["openvino"]["claimed"].get("openvino", 0) > 0
    assert rows["openvino"]["dropped"] is None or rows["openvino"]["dropped"].startswith("outputs differ")
    timed = {name: row["median_ms"] for name, row in rows.items() if row["dropped"] is None}
    fastest = min(timed, key=lambda name: timed[name])
    assert session.get_providers()[0] == fastest  # the pick is the lowest median measured
    (entry,) = tmp_path.glob("*.json")
    assert json.loads(entry.read_text())["chosen"][0][0] == fastest
    again = epoxy.InferenceSession(model, options, registry=registry)
    assert again.provider_selection().source == "cache" and again.get_providers()[0] == fastest
