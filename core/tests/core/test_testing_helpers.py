"""epoxy.testing.RandomStarts: module-level generators restart from their collected state."""

from __future__ import annotations

import types

import numpy as np
from epoxy.testing import RandomStarts


def test_generators_are_restored_in_place():
    module = types.ModuleType("fake_test_module")
    module.RNG = np.random.default_rng(5)
    module.OTHER = 3
    alias = module.RNG  # e.g. a helper module holding the same generator
    session = types.SimpleNamespace(items=[types.SimpleNamespace(module=module), types.SimpleNamespace()])
    starts = RandomStarts()
    starts.record(session)
    first = module.RNG.random(4)
    module.RNG.random(100)  # another test drew from it
    starts.restore()
    assert np.array_equal(alias.random(4), first)


def test_nothing_recorded_restores_nothing():
    RandomStarts().restore()
