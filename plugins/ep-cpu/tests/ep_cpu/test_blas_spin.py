"""OpenBLAS's idle workers put to sleep during epoxy's own parallel regions (jit/blas_spin.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from epoxy_ep_cpu.jit import blas_spin, threads


def test_the_symbol_reader_finds_openblas_timeout_or_refuses_cleanly(tmp_path) -> None:
    path = blas_spin._openblas_path()
    if path is not None:
        found = blas_spin._symbols(path, {"thread_timeout", "blas_thread_init", "no_such_symbol"})
        assert "no_such_symbol" not in found
        if "thread_timeout" in found:
            assert found["thread_timeout"][1] == 4  # a C unsigned int
    not_elf = tmp_path / "x.so"
    not_elf.write_bytes(b"not an ELF file at all" * 8)
    assert blas_spin._symbols(str(not_elf), {"thread_timeout"}) == {}


@pytest.mark.skipif(not blas_spin.available(), reason="numpy's BLAS is not OpenBLAS with its pthreads server here")
def test_parked_sets_the_minimum_timeout_and_the_last_region_puts_it_back() -> None:
    cell = blas_spin._timeout()
    before = cell.value
    assert before >= blas_spin.PARKED and before & (before - 1) == 0
    a = np.ones((256, 256), np.float32)
    a @ a  # OpenBLAS's workers were just used
    with blas_spin.parked():
        assert cell.value == blas_spin.PARKED
        with blas_spin.parked():  # nested (or another thread's) region
            assert cell.value == blas_spin.PARKED
        assert cell.value == blas_spin.PARKED  # still inside the outer one
    assert cell.value == before


@pytest.mark.skipif(not blas_spin.available(), reason="numpy's BLAS is not OpenBLAS with its pthreads server here")
def test_shares_on_two_threads_run_with_openblas_parked_and_one_share_does_not_park() -> None:
    cell = blas_spin._timeout()
    before = cell.value
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def share(first: int, last: int) -> None:
        with lock:
            seen.append((first, cell.value))

    threads.run_shares(share, (), 8, 2)
    assert sorted(seen) == [(0, blas_spin.PARKED), (4, blas_spin.PARKED)]
    seen.clear()
    threads.run_shares(share, (), 8, 1)
    assert seen == [(0, before)]
    assert cell.value == before


def test_without_openblas_parking_is_a_no_op(monkeypatch) -> None:
    monkeypatch.setattr(blas_spin, "_timeout", lambda: None)
    assert not blas_spin.available()
    with blas_spin.parked():
        pass
