"""The coreml factory declares onnxruntime's name for it (``CoreMLExecutionProvider``)."""

from __future__ import annotations

import sys

import pytest

import epoxy
from epoxy.plugins import ProviderRegistry
from epoxy_ep_coreml.factory import CoreMLProviderFactory

ALIAS = "CoreMLExecutionProvider"


def test_factory_declares_its_onnxruntime_name():
    assert CoreMLProviderFactory.aliases == (ALIAS,)


def test_installed_provider_answers_to_it():
    registry = ProviderRegistry()
    assert registry.resolve(ALIAS) is registry.get("coreml") is not None
    assert not [f for f in registry.failures if f.stage == "alias"], registry.failures


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the non-macOS behaviour")
def test_listed_but_not_available_off_macos(monkeypatch):
    from epoxy import plugins

    monkeypatch.setattr(plugins, "_default_registry", ProviderRegistry())
    assert ALIAS in epoxy.get_all_providers() and ALIAS not in epoxy.get_available_providers()
