"""``epoxy inspect MODEL``: opsets and nodes; for a compiled model its groups and blobs."""

from __future__ import annotations

import argparse
import json

EXAMPLE = """example:
  epoxy inspect model.compiled.onnx
  epoxy inspect model.onnx --json"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path to an .onnx model (compiled or not)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from ..aot.inspect import format_inspection, inspect_model

    info = inspect_model(args.model)
    print(json.dumps(info, indent=1) if args.json else format_inspection(info))
    bad = [g for g in info["groups"] if g.get("status") != "ok"]
    return 1 if bad else 0
