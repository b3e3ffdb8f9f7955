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


@pytest.fixture
def no_small_conv(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests of the other convolution paths (direct kernel, grid and implicit GEMMs, Winograd):
    the small layers ``jit/kernels_conv_small`` would take stay on them (its own tests:
    test_jit_conv_small.py). Without numba there is nothing to turn off."""
    try:
        from epoxy_ep_cpu.jit import kernels_conv_small
    except ImportError:
        return
    monkeypatch.setattr(kernels_conv_small, "gains", lambda *args, **kwargs: False)
