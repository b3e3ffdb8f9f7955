"""``epoxy compile MODEL -o OUT.onnx``: a model that starts without compiling its groups again."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

from ._console import Console, console_for
from ._format import providers_arg

EXAMPLE = """example:
  epoxy compile model.onnx -o model.compiled.onnx --providers openvino,cpu
  epoxy compile model.onnx -o out.onnx --providers openvino,cpu --external --option openvino.precision=f32"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path to an .onnx model")
    parser.add_argument("-o", "--output", required=True, help="path of the compiled .onnx model to write")
    parser.add_argument("--providers", help="comma-separated, priority order (default: all available)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--embed", dest="embed", action="store_true", default=None,
                       help="blobs inside the model (default: up to 16 MiB of blobs in all, side files past that)")
    where.add_argument("--external", dest="embed", action="store_false",
                       help="one side file per compiled group, beside the model")
    parser.add_argument("--device", type=int, default=None, help="device index for every provider (default 0)")
    parser.add_argument("--option", action="append", default=[], metavar="PROVIDER.KEY=VALUE",
                        help="a provider option, e.g. openvino.precision=f32 (repeatable)")
    parser.add_argument("--optimization", choices=["disable", "basic", "extended", "all"], default="all",
                        help="graph optimization level written into the model (default all; a session whose "
                             "first provider is cpu fuses into ep-cpu's own ops, which onnxruntime cannot load)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def _provider_options(names: list[str] | None, args: argparse.Namespace) -> dict[str, dict[str, object]] | None:
    from ..errors import InvalidArgumentError

    options: dict[str, dict[str, object]] = {}
    for item in args.option:
        key, eq, value = item.partition("=")
        provider, dot, option = key.partition(".")
        if not (eq and dot and provider and option):
            raise InvalidArgumentError(f"--option {item!r}: expected PROVIDER.KEY=VALUE, e.g. openvino.precision=f32")
        options.setdefault(provider, {})[option] = value
    if args.device is not None:
        for name in names or []:
            options.setdefault(name, {})["device_index"] = args.device
    return options or None


class GroupLog:
    """The compile progress callback: a line per group on stderr as it starts and ends (the
    group count is known only once the session is built, so no bar: the lines also leave a
    record of what each group cost)."""

    def __init__(self, err: Console) -> None:
        self.err = err

    def __call__(self, event: str, provider: str, label: str, nodes: int, seconds: float | None) -> None:
        if event == "compile":
            self.err.line(f"compiling {label} on {provider} ({nodes} nodes)...", kind="info")
        elif seconds is not None:
            self.err.line(f"  {label}: done in {seconds:.2f} s", kind="ok")


LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
          "all": "ORT_ENABLE_ALL"}


def run(args: argparse.Namespace) -> int:
    from ..aot.compile import compile_model
    from ..options import GraphOptimizationLevel, SessionOptions

    names = providers_arg(args.providers)
    options = SessionOptions()
    options.graph_optimization_level = GraphOptimizationLevel[LEVELS[args.optimization]]
    out = console_for(args)
    err = Console(sys.stderr, as_json=out.as_json)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = compile_model(args.model, args.output, providers=names, sess_options=options,
                                provider_options=_provider_options(names, args), embed=args.embed,
                                progress=None if args.quiet or args.json else GroupLog(err))
    if args.json:
        out.json({"output": str(summary.output), "seconds": round(summary.seconds, 3),
                  "groups": summary.groups, "kept": summary.kept,
                  "nodes": summary.report.summary(), "files": [str(f) for f in summary.files],
                  "warnings": [str(w.message) for w in caught]})
    else:
        for w in caught:
            err.line(f"warning: {w.message}", kind="warn")
        print_summary(out, summary)
    return 0


def print_summary(out: Console, summary: Any) -> None:
    """What was written: its own text when plain, else the groups as a table."""
    if out.plain:
        out.line(summary.format())
        return
    out.line(f"wrote {summary.output} in {summary.seconds:.2f} s: {len(summary.groups)} compiled group(s)", kind="ok")
    if summary.groups:
        out.table(["group", "provider", "version", "nodes", "bytes", "where", "format", "target"],
                  [[g["label"], g["provider"], g["provider_version"], g["nodes"], g["blob_bytes"], g["where"],
                    g["format"], g["target"] or "-"] for g in summary.groups], numeric=(3, 4))
    for g in summary.kept:
        out.line(f"  {g['label']}: {g['provider']}, {g['nodes']} nodes kept as plain nodes: {g['reason']}",
                 kind="warn")
    counts = ", ".join(f"{p} {n}" for p, n in sorted(summary.report.summary().items(), key=lambda kv: -kv[1]))
    out.line(f"  nodes per provider: {counts}")
    for note in summary.notes:
        out.line(f"  note: {note}", kind="info")
