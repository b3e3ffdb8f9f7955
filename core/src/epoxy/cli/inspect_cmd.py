"""``epoxy inspect MODEL``: opsets and nodes; for a compiled model its groups and blobs."""

from __future__ import annotations

import argparse
from typing import Any

from ._console import Console, console_for

EXAMPLE = """example:
  epoxy inspect model.compiled.onnx
  epoxy inspect model.onnx --json"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path to an .onnx model (compiled or not)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from ..aot.inspect import inspect_model

    info = inspect_model(args.model)
    out = console_for(args)
    if args.json:
        out.json(info)
    else:
        print_inspection(out, info)
    bad = [g for g in info["groups"] if g.get("status") != "ok"]
    return 1 if bad else 0


def print_inspection(out: Console, info: dict[str, Any]) -> None:
    """The model and its compiled groups: the library's text when plain, else the groups as a
    table whose status column says which blobs a session would compile again."""
    from ..aot.inspect import format_inspection

    if out.plain or not info["compiled"]:
        out.line(format_inspection(info))
        return
    by = info["compiled_by"] or {}
    out.line(f"{info['model']}: IR {info['ir_version']}, {info['nodes']} nodes, opsets "
             + ", ".join(f"{d} {v}" for d, v in info["opsets"].items()))
    out.line(f"compiled by epoxy {by.get('epoxy_version')} (SDK API {by.get('sdk_api')}) for "
             f"{', '.join(by.get('providers') or [])}; optimization {by.get('optimization_level')}")
    if info["partition"]:
        out.line("partition: " + ", ".join(f"{p} {n} nodes" for p, n in info["partition"].items()))
    out.table(["group", "provider", "version", "nodes", "bytes", "blob", "format", "target", "signed", "status"],
              [_group_row(g) for g in info["groups"]], numeric=(3, 4))
    bad = [g["label"] for g in info["groups"] if g.get("status") != "ok"]
    if bad:
        out.line(f"{len(bad)} group(s) would be compiled again: {', '.join(bad)}", kind="error")
    else:
        out.line("every compiled group is ok", kind="ok")


def _group_row(g: dict[str, Any]) -> list[object]:
    if "provider" not in g:  # a context node too broken to read its record
        return [g["label"], "?", "", "", "", "", "", "", "", g["status"]]
    signed = "yes" if g["signed_by_this_user"] else "not by this user's key"
    return [g["label"], g["provider"], g["provider_version"], g["kept_nodes"], g["blob_bytes"], g["blob"],
            g["format"], g["target"] or "-", signed, g["status"]]
