"""Recording what providers compile while ``epoxy compile`` builds its session.

The writer runs an ordinary session inside :func:`capturing`; :mod:`epoxy.aot.providers`
reports every compiled group here, with the provider's blob (``export_compiled``) or the
reason there is none. A context variable, not a session argument: the session's signature
stays onnxruntime's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ..contract import CompiledArtifact

#: progress callback: (event, provider, group label, node count, seconds or None)
Progress = Callable[[str, str, str, int, "float | None"], None]


@dataclass
class CapturedGroup:
    """One group a provider compiled: where, what, and its blob (or why none)."""

    provider: str
    label: str
    graph: Any  # the CoreGraph the node indices refer to (the main graph or a body's)
    nodes: tuple[int, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    artifact: CompiledArtifact | None
    reason: str = ""
    compile_seconds: float = 0.0


@dataclass
class Capture:
    """What one compile session recorded; ``compile_only`` lets a provider that only has
    compile devices (``ProviderFactory.compile_devices``) take part."""

    progress: Progress | None = None
    groups: list[CapturedGroup] = field(default_factory=list)
    compile_only: bool = True

    def say(self, event: str, provider: str, label: str, nodes: int, seconds: float | None = None) -> None:
        if self.progress is not None:
            self.progress(event, provider, label, nodes, seconds)


_ACTIVE: ContextVar[Capture | None] = ContextVar("epoxy_aot_capture", default=None)


@contextmanager
def capturing(progress: Progress | None = None, compile_only: bool = True) -> Iterator[Capture]:
    """Sessions built inside record their compiled groups into the yielded :class:`Capture`
    (``compile_only=False``: only providers that can run here take part, as in any session)."""
    capture = Capture(progress, compile_only=compile_only)
    token = _ACTIVE.set(capture)
    try:
        yield capture
    finally:
        _ACTIVE.reset(token)


def active() -> Capture | None:
    """The capture of the ``epoxy compile`` run in progress, if any."""
    return _ACTIVE.get()
