"""ep-coreml tests: ``macos`` marks tests that need Core ML itself (skipped elsewhere)."""

from __future__ import annotations

import sys

import pytest

from epoxy.testing import RandomStarts


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "macos: needs Core ML (macOS); skipped on other systems")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if sys.platform == "darwin":
        return
    skip = pytest.mark.skip(reason="Core ML runs on macOS only")
    for item in items:
        if "macos" in item.keywords:
            item.add_marker(skip)


# -- every test starts from the same random data, however pytest-xdist orders the tests --------
_starts = RandomStarts()
pytest_collection_finish = _starts.record


@pytest.fixture(autouse=True)
def _random_data_independent_of_test_order() -> None:
    _starts.restore()
