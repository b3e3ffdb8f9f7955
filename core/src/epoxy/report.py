"""The partition report: for every node, the provider chosen and why others declined."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from .partitioner import NodeDecision


@dataclass
class PartitionReport:
    """What ran where. ``str(report)`` prints a summary and a per-node table."""

    providers: list[str]
    nodes: list[NodeDecision]
    groups: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, int]:
        """Node count per provider."""
        return dict(Counter(d.provider for d in self.nodes))

    def to_dict(self) -> dict[str, Any]:
        return {
            "providers": self.providers,
            "summary": self.summary(),
            "groups": self.groups,
            "notes": self.notes,
            "nodes": [asdict(d) for d in self.nodes],
        }

    def format(self, *, per_node: bool = True) -> str:
        lines = ["providers (priority order): " + ", ".join(self.providers)]
        total = len(self.nodes)
        for provider, count in sorted(self.summary().items(), key=lambda kv: -kv[1]):
            lines.append(f"  {provider:<12} {count:>5} / {total} nodes")
        for label, members in self.groups.items():
            lines.append(f"  fused group {label}: {len(members)} nodes")
        for note in self.notes:
            lines.append(f"  note: {note}")
        if per_node:
            width = max([len(d.node) for d in self.nodes] + [4])
            lines.append("")
            lines.append(f"{'node':<{width}}  {'op':<20} {'provider':<12} why not earlier providers")
            for d in self.nodes:
                why = "; ".join(f"{p}: {r}" for p, r in d.declined) or "-"
                where = d.provider + (f" [{d.fused_group}]" if d.fused_group else "")
                lines.append(f"{d.node:<{width}}  {d.op_type:<20} {where:<12} {why}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()
