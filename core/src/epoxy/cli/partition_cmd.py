"""``epoxy partition MODEL --providers a,b``: which node goes where, summary and per node."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

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
    if targets:
        from ..pictures import write_pictures

        for written in write_pictures(session, targets, title=Path(args.model).name):
            print(f"wrote {written.path} ({written.nodes} nodes, layout {written.layout_seconds:.2f} s)",
                  file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.format(per_node=not args.summary))
        print(f"\nplanned peak memory: {session.planned_peak_bytes / 1e6:.2f} MB (activations; weights "
              f"{session.memory_plan()['constant_bytes'] / 1e6:.2f} MB)")
    return 0
