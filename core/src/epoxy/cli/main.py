"""Entry point of the ``epoxy`` CLI: a registry of subcommands, each in its own module."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib import import_module
from importlib.metadata import entry_points
from types import ModuleType

from ..errors import EpoxyError
from ..version import __version__

#: subcommand -> (module, one-line help); each module defines ``add_arguments`` and ``run``.
COMMANDS: dict[str, tuple[str, str]] = {
    "providers": ("providers_cmd", "list installed providers, their devices and failed plugins"),
    "devices": ("devices_cmd", "list the devices providers can drive (each once) and the selection policies"),
    "tune": ("tune_cmd", "measure which provider set runs a model fastest here; cache the pick"),
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


#: entry-point group where other packages add subcommands (epoxy-serve adds ``serve``); the value
#: names a module with the same ``add_arguments``/``run``/``HELP``/``EXAMPLE`` as the ones above
COMMAND_GROUP = "epoxy.commands"
#: commands other packages provide: what to install when one is typed but missing
PACKAGED_COMMANDS: dict[str, str] = {"serve": "epoxy-serve (pip install ./serve)"}


def _packaged_commands() -> dict[str, ModuleType]:
    """Subcommands installed packages add; one that fails to import is reported and skipped so the
    other commands keep working."""
    found: dict[str, ModuleType] = {}
    for ep in entry_points(group=COMMAND_GROUP):
        if ep.name in COMMANDS:
            continue  # a package cannot replace a core command
        try:
            found[ep.name] = import_module(ep.value)
        except Exception as exc:  # a broken package must not take the CLI down
            print(f"epoxy: command {ep.name!r} from {ep.value} failed to load, skipped: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr)
    return found


def _missing_command(package: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        print(f"epoxy {args.command}: this command comes with {package}, which is not installed", file=sys.stderr)
        return 2
    return run


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
    packaged = _packaged_commands()
    for name, module in packaged.items():
        help_text = getattr(module, "HELP", f"(from {module.__name__})")
        command_parser = sub.add_parser(name, help=help_text, description=help_text,
                                        epilog=getattr(module, "EXAMPLE", None),
                                        formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(command_parser)
        handlers[name] = module.run
    for name, package in PACKAGED_COMMANDS.items():
        if name not in packaged:
            missing = sub.add_parser(name, help=f"(needs {package})", add_help=False)
            missing.add_argument("rest", nargs=argparse.REMAINDER)
            handlers[name] = _missing_command(package)
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
