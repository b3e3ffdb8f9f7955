"""Helpers for test suites of epoxy and its providers (no pytest import here).

``registry_with(*factories)``: a provider registry holding just these factories (no entry
points), what a test passes as ``InferenceSession(..., registry=...)``; instead of a plugin
class with an ``epoxy_register_providers`` hook written again in every test file.

``RandomStarts``: test modules often draw inputs from module-level generators
(``RNG = np.random.default_rng(7)``). Shared by a module's tests, a test's data then depends
on which tests its pytest-xdist worker ran before it, and an ill-conditioned draw fails now
and then (it did, in CI). A conftest records each generator's state once collection is done
and restores it, in place (aliases in helper modules follow), before every test::

    from epoxy.testing import RandomStarts

    _starts = RandomStarts()
    pytest_collection_finish = _starts.record

    @pytest.fixture(autouse=True)
    def _random_data_independent_of_test_order() -> None:
        _starts.restore()

``watch_constant_buffers(monkeypatch)``: weak references to the buffers behind the constants
a session reads, to test that weights are released or freed. ``measure_drop(make, feeds)``:
what ``del`` of a session frees, and what is left for the garbage collector.
"""

from __future__ import annotations

import gc
import tracemalloc
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .hookspecs import HOOK_NAMES, hookimpl
from .plan.gc_pause import collector_paused
from .plugins import ProviderRegistry


class RandomStarts:
    """The collected test modules' numpy generators and their states at collection time."""

    def __init__(self) -> None:
        self._starts: dict[int, tuple[np.random.Generator, Mapping[str, Any]]] = {}

    def record(self, session: Any) -> None:
        """``pytest_collection_finish``: note every generator bound at module level."""
        modules = {item.module for item in session.items if getattr(item, "module", None) is not None}
        for module in modules:
            for value in vars(module).values():
                if isinstance(value, np.random.Generator):
                    self._starts.setdefault(id(value), (value, value.bit_generator.state))

    def restore(self) -> None:
        """Put every recorded generator back to its collection-time state."""
        for generator, state in self._starts.values():
            generator.bit_generator.state = state


class _Factories:
    """A plugin object registering given factories (what an entry point would load)."""

    def __init__(self, factories: tuple[Any, ...]) -> None:
        self.factories = factories

    @hookimpl
    def epoxy_register_providers(self, register: Any) -> None:
        for factory in self.factories:
            register(factory)


def _is_plugin(obj: Any) -> bool:
    """A plugin object implements some epoxy hook; anything else is taken as a factory."""
    return any(hasattr(obj, hook) for hook in HOOK_NAMES)


def registry_with(*providers: Any, installed: bool = False, plugin_name: str = "tests") -> ProviderRegistry:
    """A registry holding these providers, each checked as an installed provider's would be
    (sdk_api, names, aliases). ``providers``: factories, or plugin objects/modules implementing epoxy hooks
    (``epoxy_ep_cpu.plugin``, a plugin registering policies). ``installed``: also load the
    installed entry points (else none are)."""
    registry = ProviderRegistry(autoload=installed)
    plugins = [p for p in providers if _is_plugin(p)]
    factories = tuple(p for p in providers if not _is_plugin(p))
    for index, plugin in enumerate(plugins):
        registry.add_plugin(plugin, name=getattr(plugin, "__name__", f"{plugin_name}-plugin-{index}"))
    if factories:
        registry.add_plugin(_Factories(factories), name=plugin_name)
    return registry


def watch_constant_buffers(monkeypatch: Any) -> dict[str, Callable[[], np.ndarray | None]]:
    """Weak references, by constant name, to the buffer behind every constant array the graph
    spec reads from now on (the base array, not a view of it); ``monkeypatch``: pytest's, which
    undoes the spy. A reference that still resolves means something holds that weight."""
    from .graph import graph_spec

    refs: dict[str, Callable[[], np.ndarray | None]] = {}
    real = graph_spec._constant_array

    def spy(name: str, value: Any) -> np.ndarray:
        array = real(name, value)
        base = array
        while isinstance(base.base, np.ndarray):
            base = base.base
        refs[name] = weakref.ref(base)
        return array

    monkeypatch.setattr(graph_spec, "_constant_array", spy)
    return refs


def measure_drop(make_session: Callable[[], Any], feeds: Mapping[str, Any],
                 check: Callable[[Any], None] | None = None) -> tuple[int, int]:
    """Build a session with ``make_session``, run ``feeds`` once (``check`` sees it then),
    and drop it with the garbage collector off: (bytes the ``del`` freed, bytes that then
    waited for a collection), as tracemalloc counts them (numpy's buffers included). A session
    in a reference cycle, or weights only a cycle holds, show in the second figure."""
    tracemalloc.start()
    try:
        session = make_session()
        session.run(None, dict(feeds))
        if check is not None:
            check(session)
        gc.collect()  # what building the session left for the collector
        held = tracemalloc.get_traced_memory()[0]
        with collector_paused():
            del session
            after_del = tracemalloc.get_traced_memory()[0]
            gc.collect()
            after_collection = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return held - after_del, after_del - after_collection
