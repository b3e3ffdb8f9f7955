"""Fixtures for core tests: registries built from test factories only (no entry points)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epoxy.testing import RandomStarts

sys.path.insert(0, str(Path(__file__).parent))

from fakes import mini_factory  # noqa: E402

from epoxy.plugins import ProviderRegistry  # noqa: E402
from epoxy.testing import registry_with  # noqa: E402


@pytest.fixture
def make_registry() -> Callable[..., ProviderRegistry]:
    """Build a registry holding the given factories (plus the mini cpu unless told not to)."""

    def build(*factories: Any, with_cpu: bool = True) -> ProviderRegistry:
        return registry_with(*factories, *([mini_factory()] if with_cpu else []), plugin_name="test-plugins")

    return build


# -- every test starts from the same random data, however pytest-xdist orders the tests --------
_starts = RandomStarts()
pytest_collection_finish = _starts.record


@pytest.fixture(autouse=True)
def _random_data_independent_of_test_order() -> None:
    _starts.restore()
