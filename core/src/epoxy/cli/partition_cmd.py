"""``epoxy partition MODEL --providers a,b``: which node goes where, summary and per node."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._console import Console, console_for
from ._format import providers_arg

EXAMPLE = """example:
  epoxy partition model.onnx --providers openvino,cpu
  epoxy partition model.onnx --providers openvino,cpu --html partition.html   # open it in a browser"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path to an .onnx model")
    parser.add_argument("--providers", help="comma-separated, priority order (default: all available)")
    parser.add_argument("--summary", action="store_true", help="only the per-provider summary")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--html", metavar="OUT.html",
                        help="also write a picture of the partition: one self-contained page (needs "
                             "epoxy-core[pictures])")
    parser.add_argument("--svg", metavar="OUT.svg", help="also write the picture as a bare SVG (no script)")


def add_warnings_to_notes(notes: list[str], messages: Sequence[str]) -> None:
    """Append each warning not already a note (the session notes most of what it warns), once."""
    for message in messages:
        if message not in notes and f"warning: {message}" not in notes:
            notes.append(f"warning: {message}")


def run(args: argparse.Namespace) -> int:
    from ..session import InferenceSession  # loads onnx_ir: only for commands that run a model

    targets = {kind: path for kind, path in (("html", args.html), ("svg", args.svg)) if path}
    if targets:
        from ..pictures import ensure_available  # the layout library is an extra: only when asked

        ensure_available()  # before the session: a missing extra should not cost a model load
    # Warnings raised while the session is built (a provider skipped, a lenient load...)
    # belong in the report: left to Python they print as raw "file:line: RuntimeWarning"
    # lines in the middle of the table.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = InferenceSession(args.model, providers=providers_arg(args.providers))
    report = session.partition_report()
    add_warnings_to_notes(report.notes, [str(w.message) for w in caught])
    out = console_for(args)
    if targets:
        from ..pictures import write_pictures

        told = Console(sys.stderr, as_json=out.as_json)  # stdout stays the report (or the JSON)
        for written in write_pictures(session, targets, title=Path(args.model).name):
            told.line(f"wrote {written.path} ({written.nodes} nodes, layout {written.layout_seconds:.2f} s)",
                      kind="ok")
    if args.json:
        out.json(report.to_dict())
        return 0
    print_report(out, report, per_node=not args.summary)
    out.line(f"\nplanned peak memory: {session.planned_peak_bytes / 1e6:.2f} MB (activations; weights "
             f"{session.memory_plan()['constant_bytes'] / 1e6:.2f} MB)", kind="info")
    return 0


def print_report(out: Console, report: Any, *, per_node: bool = True) -> None:
    """The partition report: its own text when plain (logs and diffs keep their format),
    else a summary table and a per-node table (``epoxy demo`` shows the summary too)."""
    if out.plain:
        out.line(report.format(per_node=per_node))
        return
    out.line("providers (priority order): " + ", ".join(report.providers))
    total = len(report.nodes)
    summary = sorted(report.summary().items(), key=lambda kv: -kv[1])
    out.table(["provider", "nodes", "share"], [[p, n, f"{n / total:.0%}" if total else "-"] for p, n in summary],
              numeric=(1, 2))
    for label, members in report.groups.items():
        out.line(f"  fused group {label}: {len(members)} nodes")
    for label, status in report.artifacts.items():
        out.line(f"  compiled group {label}: {status}")
    for note in report.notes:
        out.line(f"  note: {note}", kind="warn" if note.startswith("warning:") else "info")
    if per_node:
        out.table(["node", "op", "provider", "why not earlier providers"], node_rows(report))


def node_rows(report: Any) -> list[list[str]]:
    """node, op, provider [group], why the earlier providers declined; a control-flow node's
    bodies follow it as rows of their own."""
    rows = []
    for d in report.nodes:
        why = "; ".join(f"{p}: {r}" for p, r in d.declined) or "-"
        rows.append([d.node, d.op_type, d.provider + (f" [{d.fused_group}]" if d.fused_group else ""), why])
        for attr, counts in d.bodies.items():
            ran = ", ".join(f"{n} on {p}" for p, n in counts.items()) or "no nodes"
            rows.append(["", f"  {attr}", ran, ""])
    return rows
