"""``jit/direct.py``: a kernel's compiled overload looked up once for a prepared call, one
overload for read-only and writable arrays alike (a second compile of the same kernel cost
seconds of a cold first run)."""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from epoxy_ep_cpu.jit import direct, native_shares  # noqa: E402


@numba.njit(nogil=True)
def _scaled_into(x, scale, out, first, last):  # pragma: no cover - compiled
    for i in range(first, last):
        out[i] = x[i] * scale[i]


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def test_a_read_only_input_shares_the_writable_inputs_overload():
    x = np.arange(6, dtype=np.float32)
    scale = _read_only(np.full(6, 2.0, np.float32))  # as a bias viewing a model's bytes is
    out = np.zeros(6, np.float32)
    types = direct.argument_types((x, scale, out, 0, 6))
    assert all(t.mutable for t in types[:3])
    fn = direct.overload(_scaled_into, (x, scale, out, 0, 6))
    fn(x, scale, out, 0, 6)
    np.testing.assert_array_equal(out, x * 2)
    again = direct.overload(_scaled_into, (x, np.full(6, 3.0, np.float32), out, 0, 6))
    again(x, np.full(6, 3.0, np.float32), out, 0, 6)
    np.testing.assert_array_equal(out, x * 3)
    assert len(_scaled_into.overloads) == 1  # one compile for both


def test_a_share_address_is_the_same_overload():
    x = _read_only(np.arange(4, dtype=np.float32))
    out = np.zeros(4, np.float32)
    direct.overload(_scaled_into, (x, x, out, 0, 4))
    before = len(_scaled_into.overloads)
    assert native_shares.compiled_address(_scaled_into, (x, x, out)) > 0
    assert len(_scaled_into.overloads) == before


def test_an_array_of_another_dtype_is_still_refused():
    x = np.arange(4, dtype=np.float32)
    out = np.zeros(4, np.float32)
    fn = direct.overload(_scaled_into, (x, x, out, 0, 4))
    with pytest.raises(TypeError):
        fn(x.astype(np.float64), x, out, 0, 4)
