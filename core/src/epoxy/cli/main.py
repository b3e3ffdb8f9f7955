"""Entry point of the ``epoxy`` CLI: a registry of subcommands, each in its own module."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib import import_module

from ..errors import EpoxyError
from ..version import __version__

#: subcommand -> (module, one-line help); each module defines ``add_arguments`` and ``run``.
COMMANDS: dict[str, tuple[str, str]] = {
    "providers": ("providers_cmd", "list installed providers, their devices and failed plugins"),
    "ops": ("ops_cmd", "list the ops a provider supports, with opset ranges"),
    "partition": ("partition_cmd", "show which provider runs each node of a model, and why"),
    "compile": ("compile_cmd", "write a compiled model: provider blobs inside, so sessions start fast"),
    "quantize": ("quantize_cmd", "quantize a model (static/dynamic int8, fp16, bf16, auto), checked, with a report"),
    "inspect": ("inspect_cmd", "show a model's opsets and nodes; a compiled model's groups and blobs"),
    "run": ("run_cmd", "run a model on .npy inputs and print or save the outputs"),
    "validate": ("validate_cmd", "compare every intermediate value with a reference; name the first divergence"),
    "reduce": ("reduce_cmd", "shrink a model to the few nodes that still fail or diverge on a provider"),
    "bench": ("bench_cmd", "time a model: provider sets, onnxruntime and OpenVINO side by side; percentiles, plot"),
    "profile": ("profile_cmd", "profile a model: a Chrome/Perfetto trace and the ops taking the most time"),
    "doctor": ("doctor_cmd", "one report for bug reports: versions, CPU, BLAS, providers, environment"),
    "demo": ("demo_cmd", "classify handwritten digits with the bundled model"),
    "sdk": ("sdk_cmd", "provider-authoring tools (needs epoxy-sdk): new-provider"),
}


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Callable[[argparse.Namespace], int]]]:
    parser = argparse.ArgumentParser(prog="epoxy", description="epoxy: ONNX inference with pluggable providers")
    parser.add_argument("--version", action="version", version=f"epoxy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {}
    for name, (module_name, help_text) in COMMANDS.items():
        module = import_module(f"{__package__}.{module_name}")
        # every command shows its module's EXAMPLE under --help, laid out as written
        command_parser = sub.add_parser(name, help=help_text, description=help_text,
                                        epilog=getattr(module, "EXAMPLE", None),
                                        formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(command_parser)
        handlers[name] = module.run
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    parser, handlers = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return handlers[args.command](args)
    except EpoxyError as exc:
        print(f"epoxy {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
