"""``epoxy sdk ...``: provider-authoring tools from the epoxy-sdk package.

The core does not depend on the SDK: ``epoxy_sdk.scaffold`` is imported only when a
subcommand runs, and a missing SDK is a one-line error saying what to install.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module
from types import ModuleType

INSTALL_HINT = "pip install epoxy-sdk"


EXAMPLE = """example:
  epoxy sdk new-provider acme --kernels    # a kernel provider package, conformance test included
  epoxy sdk new-provider acme --compiler   # a provider that compiles whole subgraphs"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="sdk_command", metavar="SDK_COMMAND")
    new = sub.add_parser("new-provider", help="write a new provider package (pyproject, sources, conformance test)",
                         description="write a new provider package laid out like epoxy's own, passing the "
                                     "conformance kit's API scope as generated")
    new.add_argument("name", metavar="NAME", help="the provider's name: lowercase letters, digits, underscores")
    style = new.add_mutually_exclusive_group()
    style.add_argument("--kernels", dest="style", action="store_const", const="kernels",
                       help="a kernel provider: numpy kernels in a KernelRegistry (default)")
    style.add_argument("--compiler", dest="style", action="store_const", const="compiler",
                       help="a compiling provider: elementwise ops claimed as fused groups and compiled")
    new.set_defaults(style="kernels")
    new.add_argument("--dir", metavar="PATH", default=None,
                     help="folder to create (default: ./ep-NAME); must not exist or be empty")
    parser.set_defaults(sdk_parser=parser)


def load_scaffold() -> ModuleType | None:
    """``epoxy_sdk.scaffold``, or ``None`` (having said what to install) when the SDK is missing."""
    try:
        scaffold = import_module("epoxy_sdk.scaffold")
    except ImportError as exc:
        if exc.name not in ("epoxy_sdk", "epoxy_sdk.scaffold"):
            raise  # the SDK is there but broken: show the real error
        print(f"epoxy sdk: error: the epoxy SDK is not installed ({INSTALL_HINT})", file=sys.stderr)
        return None
    return scaffold


def new_provider(args: argparse.Namespace) -> int:
    scaffold = load_scaffold()
    if scaffold is None:
        return 1
    target = scaffold.new_provider(args.name, args.style, args.dir)  # ScaffoldError: an EpoxyError
    shown = str(target) if target.is_absolute() else f"./{target}"  # so pip reads it as a path
    print(f"wrote {shown}: the {args.style} provider {args.name!r}; next:")
    print(f"  pip install -e '{shown}[test]'")
    print(f"  epoxy providers --check {args.name}")
    print(f"  pytest {shown}/tests")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.sdk_command == "new-provider":
        return new_provider(args)
    args.sdk_parser.print_help()
    return 2
