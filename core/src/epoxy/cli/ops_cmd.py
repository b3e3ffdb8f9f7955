"""``epoxy ops --provider NAME``: supported ops and the opset ranges each kernel serves.

A factory lists its ops with the optional ``supported_ops()`` (ops it runs node by node, or
every op it takes) and/or ``group_ops()`` (ops it runs only inside the fused groups it
compiles: a compiling provider's capability claims them in groups, never as single nodes).
Entries are :class:`epoxy.kit.OpSupport` objects, or op names (``"Relu"``,
``"com.microsoft::FusedGemm"``) when the provider does not track opset versions.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgumentError
from ..plugins import default_registry
from ._console import console_for

#: the ``runs`` column: how the provider runs an op
NODES, GROUPS_ONLY = "nodes", "in groups only"


EXAMPLE = """example:
  epoxy ops --provider cpu
  epoxy ops --provider openvino --json"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--provider", required=True, help="provider name, e.g. cpu")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def opset_ranges(since: Sequence[int]) -> list[str]:
    """``[7, 13, 14]`` -> ``["7-12", "13", "14+"]``: the opsets each kernel version serves."""
    out = []
    for i, v in enumerate(since):
        if i + 1 < len(since):
            end = since[i + 1] - 1
            out.append(str(v) if end == v else f"{v}-{end}")
        else:
            out.append(f"{v}+")
    return out


@dataclass
class OpRow:
    """One op as ``epoxy ops`` shows it."""

    domain: str  # as displayed: "ai.onnx" for the default domain
    op: str
    since: tuple[int, ...]  # empty: the provider does not say which opsets
    runs: str  # NODES or GROUPS_ONLY

    @property
    def opsets(self) -> list[str]:
        return opset_ranges(self.since) if self.since else ["any"]


def _row(entry: Any, runs: str) -> OpRow:
    """An ``OpSupport``-like object or an op name (``"Op"`` / ``"domain::Op"``) as a row."""
    if isinstance(entry, str):
        domain, _, op = entry.rpartition("::")
        return OpRow(domain or "ai.onnx", op, (), runs)
    domain = getattr(entry, "display_domain", None) or getattr(entry, "domain", "") or "ai.onnx"
    since = tuple(int(v) for v in getattr(entry, "since_versions", ()) or ())
    return OpRow(str(domain), str(entry.op_type), since, runs)


def collect_ops(factory: object) -> list[OpRow] | None:
    """Every op the factory lists, marked by how it runs it; None when it lists none (no
    ``supported_ops`` and no ``group_ops``). An op in both lists counts as run by nodes."""
    listers = [(getattr(factory, "supported_ops", None), NODES), (getattr(factory, "group_ops", None), GROUPS_ONLY)]
    if all(lister is None for lister, _ in listers):
        return None
    rows: dict[tuple[str, str], OpRow] = {}
    for lister, runs in listers:
        if lister is None:
            continue
        entries: Iterable[object] = lister() or ()
        for entry in entries:
            row = _row(entry, runs)
            rows.setdefault((row.domain, row.op), row)
    return list(rows.values())  # in the provider's order


def run(args: argparse.Namespace) -> int:
    registry = default_registry()
    entry = registry.resolve(args.provider)  # its name or an alias
    if entry is None:
        raise InvalidArgumentError(f"unknown provider {args.provider!r}; installed: {registry.describe_names()}")
    rows = collect_ops(entry.factory)
    if rows is None:
        print(f"provider {args.provider!r} does not list its ops (it decides per graph; "
              f"`epoxy partition MODEL --providers {args.provider}` shows what it takes)")
        return 0
    if args.json:
        print(json.dumps([{"domain": r.domain, "op": r.op, "since": list(r.since), "opsets": r.opsets,
                           "runs": r.runs} for r in rows], indent=2))
        return 0
    grouped = sum(r.runs == GROUPS_ONLY for r in rows)
    headers = ["domain", "op", "opsets"] + (["runs"] if grouped else [])
    cells = [[r.domain, r.op, ", ".join(r.opsets)] + ([r.runs] if grouped else []) for r in rows]
    console_for(args).table(headers, cells)
    print(f"\n{len(rows)} ops" + (f" ({grouped} run only inside fused groups)" if grouped else ""))
    return 0
