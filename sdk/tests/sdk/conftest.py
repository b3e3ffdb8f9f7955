"""The kit's tests run pytest in process with conftests that swap the process-wide provider
registry; put the real one back after each test so later suites in the same run see it."""

from __future__ import annotations

import pytest
from epoxy import plugins


@pytest.fixture(autouse=True)
def _restore_default_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plugins, "_default_registry", plugins._default_registry)
