"""The partition report: for every node, the provider chosen and why others declined.

A control-flow node is the core's (provider ``core``); the providers that ran its bodies
are listed apart, per body (``NodeDecision.bodies``), never credited with the node.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from .partitioner import NodeDecision


@dataclass
class PartitionReport:
    """What ran where. ``str(report)`` prints a summary and a per-node table."""

    providers: list[str]
    nodes: list[NodeDecision]
    groups: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: compiled group label -> what became of its blob, for a compiled model (``epoxy compile``)
    artifacts: dict[str, str] = field(default_factory=dict)
    #: the selection policy that chose the providers (``ProviderSelection.to_dict()``), or None
    selection: dict[str, Any] | None = None

    def summary(self) -> dict[str, int]:
        """Node count per provider."""
        return dict(Counter(d.provider for d in self.nodes))

    def to_dict(self) -> dict[str, Any]:
        return {
            "providers": self.providers,
            "summary": self.summary(),
            "groups": self.groups,
            "notes": self.notes,
            "artifacts": self.artifacts,
            "selection": self.selection,
            "nodes": [asdict(d) for d in self.nodes],
        }

    def format(self, *, per_node: bool = True) -> str:
        """The summary, then (``per_node``) one row per node. Column widths follow the
        longest entry (a ``provider [group]`` label can be long), so rows stay aligned."""
        lines = ["providers (priority order): " + ", ".join(self.providers)]
        if self.selection is not None:
            chosen = ", ".join(f"{c['provider']} on {c['device']}" for c in self.selection["chosen"])
            lines.append(f"  chosen by policy {self.selection['policy']} ({self.selection['source']}): {chosen}")
            lines.extend(f"    {note}" for note in self.selection["notes"])
        total = len(self.nodes)
        summary = sorted(self.summary().items(), key=lambda kv: -kv[1])
        name_width = max([len(p) for p, _ in summary] + [12])
        for provider, count in summary:
            lines.append(f"  {provider:<{name_width}} {count:>5} / {total} nodes")
        for label, members in self.groups.items():
            lines.append(f"  fused group {label}: {len(members)} nodes")
        for label, status in self.artifacts.items():
            lines.append(f"  compiled group {label}: {status}")
        for note in self.notes:
            lines.append(f"  note: {note}")
        if per_node:
            rows: list[tuple[str, str, str, str, NodeDecision]] = []
            for d in self.nodes:
                why = "; ".join(f"{p}: {r}" for p, r in d.declined) or "-"
                where = d.provider + (f" [{d.fused_group}]" if d.fused_group else "")
                rows.append((d.node, d.op_type, where, why, d))
            widths = [
                max([len(cast(str, r[k])) for r in rows] + [len(h)]) for k, h in enumerate(("node", "op", "provider"))
            ]
            widths[1] = max(widths[1], 20)  # the widths the table always had, as a minimum
            widths[2] = max(widths[2], 12)

            def row(cells: tuple[str, str, str, str]) -> str:
                return "  ".join(c.ljust(w) for c, w in zip(cells[:3], widths)) + "  " + cells[3]

            lines.append("")
            lines.append(row(("node", "op", "provider", "why not earlier providers")))
            for node, op, where, why, d in rows:
                lines.append(row((node, op, where, why)).rstrip())
                for attr, counts in d.bodies.items():  # a control-flow node: where its bodies ran
                    ran = ", ".join(f"{n} on {p}" for p, n in counts.items()) or "no nodes"
                    lines.append(f"{'':<{widths[0]}}    {attr}: {ran}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()
