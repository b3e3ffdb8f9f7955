"""PackedParams: a kernel's scalar parameters are packed once for the session's read-only
constants, and again whenever other arrays, or writable ones whose values may have changed,
come in."""

from __future__ import annotations

import numpy as np

from epoxy_ep_cpu.ops._packed_params import PackedParams


def _frozen(value):
    array = np.array(value, np.float32)
    array.setflags(write=False)
    return array


def test_read_only_arrays_are_packed_once():
    calls = []
    packed = PackedParams(lambda *a: calls.append(a) or float(sum(float(x) for x in a)))
    s, z = _frozen(0.5), _frozen(2.0)
    assert packed(s, z) == 2.5 and packed(s, z) == 2.5
    assert len(calls) == 1
    other = _frozen(0.5)  # equal values, another array: packed again (identity, not equality)
    assert packed(other, z) == 2.5 and len(calls) == 2


def test_writable_arrays_are_packed_on_every_call():
    calls = []
    packed = PackedParams(lambda *a: calls.append(a) or float(sum(float(x) for x in a)))
    s, z = np.array(0.5, np.float32), _frozen(2.0)
    assert packed(s, z) == 2.5
    s[...] = 1.5  # a feed changed in place between runs
    assert packed(s, z) == 3.5 and len(calls) == 2
