"""sympy loaded on its first use instead of whenever onnx_ir is imported.

Why: onnx_ir imports sympy at its top (and evaluates ``sympy.Max`` & co. in its expression
parser's module) for symbolic-dimension arithmetic (``SymbolicDim`` +, *, parsing "N*2") that
epoxy never performs. Importing sympy costs every epoxy process about 33 MB of memory and
0.2 s (1.4 s where no bytecode is written), a large share of a small model's footprint and of
a serving replica's start.

How: before onnx_ir is imported, ``sympy`` and ``onnx_ir._symbolic_shapes`` are registered in
``sys.modules`` as :class:`DeferredModule` objects: modules with their real spec, file and
path, whose code runs at the first access of an attribute they do not have yet. So
``import sympy`` still succeeds everywhere (the import system only reads ``__spec__``), and a
program that uses sympy, directly or through onnx_ir's arithmetic, gets the real module, with
the same object identity, at its first ``sympy.<name>``. ``importlib.util.LazyLoader`` cannot
do this on Python 3.11: an ``import`` statement's ``__spec__`` check triggers its load.

``EPOXY_EAGER_SYMPY=1`` turns this off. Nothing is deferred when sympy or onnx_ir is already
imported, or when either cannot be found.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import threading
import types
from typing import Any

#: modules deferred, in the order they are registered
DEFERRED = ("sympy", "onnx_ir._symbolic_shapes")

_lock = threading.RLock()
#: names of registered modules whose code has not run yet, and of those running it now
_pending: set[str] = set()
_loading: set[str] = set()


class DeferredModule(types.ModuleType):
    """A module whose code runs when an attribute it lacks is first read."""

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes not in the module's dict: before the load, everything but
        # the import system's own metadata.
        state = self.__dict__
        own = state["__name__"]
        if name.startswith("__") and name.endswith("__") and name != "__all__":
            raise AttributeError(f"module {own!r} has no attribute {name!r}")
        with _lock:
            if own in _pending and own not in _loading:
                _loading.add(own)
                try:
                    state["__spec__"].loader.exec_module(self)
                    _pending.discard(own)
                finally:
                    _loading.discard(own)
        if name in state:
            return state[name]
        raise AttributeError(f"module {own!r} has no attribute {name!r}")


def is_deferred(name: str) -> bool:
    """True while ``sys.modules[name]`` is a deferred module whose code has not run yet."""
    return isinstance(sys.modules.get(name), DeferredModule) and name in _pending


def _register(name: str, spec: importlib.machinery.ModuleSpec) -> None:
    module = DeferredModule(name)
    module.__spec__ = spec
    module.__loader__ = spec.loader
    module.__package__ = spec.parent
    if spec.origin and spec.has_location:
        module.__file__ = spec.origin
    if spec.submodule_search_locations is not None:
        module.__path__ = list(spec.submodule_search_locations)
    _pending.add(name)
    sys.modules[name] = module


def defer_sympy() -> bool:
    """Register sympy and onnx_ir's expression parser as deferred; True when done."""
    if os.environ.get("EPOXY_EAGER_SYMPY", "").strip() not in ("", "0"):
        return False
    with _lock:
        if any(name in sys.modules for name in ("sympy", "onnx_ir", *DEFERRED)):
            return False
        sympy_spec = importlib.util.find_spec("sympy")
        ir_spec = importlib.util.find_spec("onnx_ir")  # a top-level find imports nothing
        if sympy_spec is None or ir_spec is None or not ir_spec.submodule_search_locations:
            return False
        parser_spec = importlib.machinery.PathFinder.find_spec(
            "onnx_ir._symbolic_shapes", list(ir_spec.submodule_search_locations)
        )
        if parser_spec is None or sympy_spec.loader is None or parser_spec.loader is None:
            return False
        _register("sympy", sympy_spec)
        _register("onnx_ir._symbolic_shapes", parser_spec)
        return True


def lazy_attribute(package: str, table: dict[str, str], namespace: dict[str, Any], name: str) -> Any:
    """A package's module ``__getattr__``: attribute ``name`` from submodule ``table[name]`` of
    ``package``, imported now and kept in ``namespace`` (the package's globals), so that
    importing the package does not import what only some uses need."""
    from importlib import import_module

    module = table.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", package), name)
    namespace[name] = value
    return value
