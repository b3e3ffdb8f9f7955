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


def test_registry_with_holds_just_the_given_factories():
    import numpy as np
    from fakes import mini_factory, sim_factory
    from models import chain

    from epoxy import InferenceSession
    from epoxy.testing import registry_with

    registry = registry_with(sim_factory(), mini_factory())
    assert [e.name for e in registry.entries()] == ["sim", "cpu"]
    session = InferenceSession(chain(["Relu", "Neg"]), providers=["sim", "cpu"], registry=registry)
    assert session.partition_report().summary() == {"sim": 2}
    x = np.array([[-1.0, 2.0, 0.5], [3.0, -4.0, 0.0]], np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], -np.maximum(x, 0))


def test_registry_with_applies_the_registrys_checks():
    from fakes import Factory

    from epoxy.testing import registry_with

    registry = registry_with(Factory("old", lambda d, o: None, sdk_api="0.9"))
    assert registry.get("old") is None and registry.failures[0].stage == "sdk-version"
