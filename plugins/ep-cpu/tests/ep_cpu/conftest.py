"""Shared pytest set-up of the ep-cpu kernel tests."""

from __future__ import annotations

import pytest

from epoxy.testing import RandomStarts

# -- every test starts from the same random data, however pytest-xdist orders the tests --------
_starts = RandomStarts()
pytest_collection_finish = _starts.record


@pytest.fixture(autouse=True)
def _random_data_independent_of_test_order() -> None:
    _starts.restore()
