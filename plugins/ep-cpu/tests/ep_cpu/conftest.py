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
    the layers ``jit/kernels_conv_small`` and ``jit/kernels_conv_rows`` would take stay on them
    (their own tests: test_jit_conv_small.py, test_jit_conv_rows.py). Without numba there is
    nothing to turn off."""
    try:
        from epoxy_ep_cpu.jit import kernels_conv_rows, kernels_conv_small
    except ImportError:
        return
    monkeypatch.setattr(kernels_conv_small, "gains", lambda *args, **kwargs: False)
    monkeypatch.setattr(kernels_conv_rows, "gains", lambda *args, **kwargs: False)


@pytest.fixture(params=["native", "executor"])
def split_recorder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """``record(module)``: the (total, shares) of every split pass the jit kernels of ``module``
    run from now on (``threads.Split``), with every pass split from one element a thread
    (``GRAIN`` and ``SHARE_GRAIN`` 1, and the products from one multiply-add); once with the
    native pool's helpers, once with the sleeping executor's (``threads.native`` off)."""
    from epoxy_ep_cpu.jit import native_shares, threads

    monkeypatch.setattr(threads, "GRAIN", 1)
    monkeypatch.setattr(threads, "SHARE_GRAIN", 1)
    monkeypatch.setattr(threads, "MIN_SPLIT_MACS", 1)  # products split too (native pool only)
    monkeypatch.setattr(native_shares, "MIN_SPLIT_DEPTH", 1)
    if request.param == "executor":
        monkeypatch.setattr(threads, "_NATIVE", False)
    elif not threads.native():
        pytest.skip("the native pool needs numpy's OpenBLAS with its own threads")
    shares: list[tuple[int, int]] = []

    class Spy(threads.Split):
        __slots__ = ()

        def __call__(self, *args):  # type: ignore[no-untyped-def]
            shares.append((self._total, self._count))
            return super().__call__(*args)

    def record(module):  # type: ignore[no-untyped-def]
        monkeypatch.setattr(module, "Split", Spy)
        return shares

    return record
