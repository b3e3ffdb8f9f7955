"""``ProviderNames``: the list ``epoxy.get_available_providers()`` returns, whose ``in`` also
knows providers' onnxruntime aliases."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class ProviderNames(list[str]):
    """Provider names as epoxy calls them (``["cuda", "cpu"]``), which also answer to their aliases.

    It is a plain list of epoxy's own (canonical) provider names: iterating, indexing,
    printing, ``==``, ``index()``, ``count()`` and passing it as ``providers=`` see only those
    names, never an alias. The one difference from a list: ``in`` is also True for an alias of
    a provider in the list, so onnxruntime code such as
    ``if "CUDAExecutionProvider" in ort.get_available_providers()`` works unchanged. The
    answer follows the list's current content (remove ``"cuda"`` and its alias is gone too).
    Slices and copies are plain lists. A session's list also says which selection policy
    chose it (``selection``).
    """

    def __init__(self, names: Iterable[str] = (), aliases: Mapping[str, str] | None = None) -> None:
        """``aliases``: alias -> canonical name (``ProviderRegistry.aliases()``)."""
        super().__init__(names)
        self.aliases: dict[str, str] = dict(aliases or {})
        #: for a session's list: the :class:`epoxy.devices.ProviderSelection` that chose it
        #: (``.policy``, ``.chosen``, ``.notes``), ``None`` when the providers were named
        self.selection: Any = None

    def __contains__(self, name: object) -> bool:
        if list.__contains__(self, name):
            return True
        canonical = self.aliases.get(name) if isinstance(name, str) else None
        return canonical is not None and list.__contains__(self, canonical)
