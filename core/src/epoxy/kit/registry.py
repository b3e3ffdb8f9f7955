"""Kernel registry: op -> kernel factories by opset version, picked at session creation.

A kernel factory takes a :class:`~epoxy.contract.NodeSpec` and returns the callable that
runs the node (attributes resolved once, not per run). Dispatch picks the highest
registered ``since`` version not above the model's opset for the op's domain, as ONNX
versioning intends: a version registered at 13 serves opsets 13..(next version - 1).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..contract import KernelFn, NodeSpec

KernelFactory = Callable[[NodeSpec], KernelFn]
#: Optional predicate: returns a reason string when a node cannot be handled, else None.
SupportCheck = Callable[[NodeSpec], "str | None"]


class Unsupported(Exception):
    """Raised by a kernel factory for a node it cannot handle (becomes a decline reason)."""


@dataclass(frozen=True)
class OpSupport:
    """One op a provider implements and the opset versions it has kernels for."""

    domain: str
    op_type: str
    since_versions: tuple[int, ...]

    @property
    def display_domain(self) -> str:
        return self.domain or "ai.onnx"


@dataclass(frozen=True)
class _Entry:
    since: int
    factory: KernelFactory
    check: SupportCheck | None


class KernelRegistry:
    """Maps (domain, op_type) to versioned kernel factories."""

    def __init__(self) -> None:
        self._ops: dict[tuple[str, str], list[_Entry]] = {}

    def register(
        self,
        op_type: str | Sequence[str],
        since: int | Iterable[int] = 1,
        *,
        domain: str = "",
        check: SupportCheck | None = None,
    ) -> Callable[[KernelFactory], KernelFactory]:
        """Decorator registering a factory for one or more ops and ``since`` versions."""
        ops = [op_type] if isinstance(op_type, str) else list(op_type)
        versions = [since] if isinstance(since, int) else list(since)

        def decorate(factory: KernelFactory) -> KernelFactory:
            for op in ops:
                entries = self._ops.setdefault((domain, op), [])
                for v in versions:
                    if any(e.since == v for e in entries):
                        raise ValueError(f"kernel for {domain or 'ai.onnx'}::{op} since {v} registered twice")
                    bisect.insort(entries, _Entry(v, factory, check), key=lambda e: e.since)
            return factory

        return decorate

    def lookup(self, node: NodeSpec) -> tuple[KernelFactory | None, str | None]:
        """(factory, None) for a node, or (None, reason) when no kernel fits."""
        entries = self._ops.get((node.domain, node.op_type))
        if not entries:
            return None, f"no kernel for {node.domain + '::' if node.domain else ''}{node.op_type}"
        pos = bisect.bisect_right([e.since for e in entries], node.opset) - 1
        if pos < 0:
            versions = [e.since for e in entries]
            return None, f"no kernel for {node.op_type} at opset {node.opset} (kernels from opsets {versions})"
        entry = entries[pos]
        if entry.check is not None:
            reason = entry.check(node)
            if reason:
                return None, reason
        return entry.factory, None

    def ops(self) -> list[OpSupport]:
        """Every registered op with its versions, sorted by domain and name."""
        return [
            OpSupport(domain, op, tuple(e.since for e in entries))
            for (domain, op), entries in sorted(self._ops.items())
        ]

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._ops
