"""GPU tests are marked ``gpu`` and skipped when no CUDA device can be driven here."""

from __future__ import annotations

import pytest
from cuda_helpers import gpu_unavailable_reason

from epoxy.testing import RandomStarts


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU, a driver and CuPy (skipped otherwise)")




def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any("gpu" in item.keywords for item in items):
        return
    reason = gpu_unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"no usable GPU: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# -- every test starts from the same random data, however pytest-xdist orders the tests --------
_starts = RandomStarts()
pytest_collection_finish = _starts.record


@pytest.fixture(autouse=True)
def _random_data_independent_of_test_order() -> None:
    _starts.restore()
