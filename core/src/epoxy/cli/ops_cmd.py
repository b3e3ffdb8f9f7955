"""``epoxy ops --provider NAME``: supported ops and the opset ranges each kernel serves."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from ..errors import InvalidArgumentError
from ..plugins import default_registry
from ._format import table


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


def run(args: argparse.Namespace) -> int:
    registry = default_registry()
    entry = registry.resolve(args.provider)  # its name or an alias
    if entry is None:
        raise InvalidArgumentError(f"unknown provider {args.provider!r}; installed: {registry.describe_names()}")
    lister = getattr(entry.factory, "supported_ops", None)
    if lister is None:
        print(f"provider {args.provider!r} does not list its ops (it decides per graph)")
        return 0
    ops = lister()
    if args.json:
        print(json.dumps([{"domain": o.display_domain, "op": o.op_type, "since": list(o.since_versions),
                           "opsets": opset_ranges(o.since_versions)} for o in ops], indent=2))
        return 0
    print(table(["domain", "op", "opsets"], [[o.display_domain, o.op_type, ", ".join(opset_ranges(o.since_versions))] for o in ops]))
    print(f"\n{len(ops)} ops")
    return 0
