"""``epoxy partition MODEL --providers a,b``: which node goes where, summary and per node."""

from __future__ import annotations

import argparse
import json

from ._format import providers_arg


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path to an .onnx model")
    parser.add_argument("--providers", help="comma-separated, priority order (default: all available)")
    parser.add_argument("--summary", action="store_true", help="only the per-provider summary")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from ..session import InferenceSession  # loads onnx_ir: only for commands that run a model

    session = InferenceSession(args.model, providers=providers_arg(args.providers))
    report = session.partition_report()
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.format(per_node=not args.summary))
        print(f"\nplanned peak memory: {session.planned_peak_bytes / 1e6:.2f} MB (activations; weights "
              f"{session.memory_plan()['constant_bytes'] / 1e6:.2f} MB)")  # type: ignore[operator]
    return 0
