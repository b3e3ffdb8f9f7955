"""GPU tests are marked ``gpu`` and skipped when no CUDA device can be driven here."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_helpers import gpu_unavailable_reason


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
# Test modules draw inputs from module-level generators (RNG = np.random.default_rng(7)); shared
# across a module's tests, a test's data depended on which tests its worker ran before it, and
# an ill-conditioned draw failed now and then. Their states are saved once collection is done
# and restored (in place, so aliases in helper modules follow) before each test.
_RNG_STARTS: dict[int, tuple[np.random.Generator, dict]] = {}


def pytest_collection_finish(session: pytest.Session) -> None:
    for module in {item.module for item in session.items if getattr(item, "module", None) is not None}:
        for value in vars(module).values():
            if isinstance(value, np.random.Generator):
                _RNG_STARTS.setdefault(id(value), (value, value.bit_generator.state))


@pytest.fixture(autouse=True)
def _random_data_independent_of_test_order() -> None:
    for generator, state in _RNG_STARTS.values():
        generator.bit_generator.state = state
