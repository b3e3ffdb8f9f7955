"""``epoxy reduce MODEL --providers X``: shrink the model to a few nodes that still fail or
still diverge on X, fed with the real intermediate values; write them and say how to rerun."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._console import Console, console_for
from ._format import providers_arg
from .validate_cmd import add_inputs_arguments

EXAMPLE = """example:
  epoxy reduce model.onnx --providers openvino --diverges -o repro/
  epoxy validate repro/reduced.onnx --providers openvino --inputs repro/feeds.npz

without --fails/--diverges: --fails when the model raises on the providers, else --diverges.
exit status: 0 a reduced case was written, 1 an error, 2 usage error (or nothing to reduce)"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_inputs_arguments(parser)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--fails", dest="mode", action="store_const", const="fails",
                      help="keep the nodes that make the providers raise")
    mode.add_argument("--diverges", dest="mode", action="store_const", const="diverges",
                      help="keep the nodes whose values diverge from the reference")
    parser.add_argument("-o", "--output-dir", default="reduced", help="where reduced.onnx and feeds.npz go "
                        "(default ./reduced)")
    parser.add_argument("--max-tries", type=int, default=200, help="candidate models to try at most (default 200)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    from ..debug.feeds import load_inputs, parse_dims
    from ..debug.reduce import reduce
    from ..errors import InvalidArgumentError

    out = console_for(args)
    told = Console(sys.stderr, as_json=out.as_json)  # notes and errors: stdout stays the result
    if args.random is not None and args.random != 1:
        told.line("epoxy reduce: note: reduce uses one random input set (--random is taken as 1)", kind="warn")
    try:
        case = reduce(args.model, providers_arg(args.providers) or [], mode=args.mode,
                      feeds=load_inputs(args.inputs) if args.inputs else None, reference=args.reference,
                      rtol=args.rtol, atol=args.atol, seed=args.seed, dims=parse_dims(args.dim),
                      max_tries=args.max_tries)
    except InvalidArgumentError as exc:
        told.line(f"epoxy reduce: error: {exc}", kind="error")
        return 2
    case.save(args.output_dir)
    if args.json:
        out.json({**case.to_dict(), "rerun": case.rerun_command()})
    else:
        print_case(out, case)
    return 0


def print_case(out: Console, case: Any) -> None:
    """What was kept, why it still fails, where it was written and how to rerun it."""
    out.line(f"reduced {case.original_nodes} nodes to {len(case.nodes)} in {case.tries} tries ({case.mode} on "
             f"{', '.join(case.providers)}):")
    for name, op in zip(case.nodes, case.op_types):
        out.line(f"  {name} ({op})")
    out.line(f"{case.detail}", kind="warn")
    out.line(f"wrote {case.written['model']} and {case.written['feeds']}", kind="ok")
    out.line(f"rerun:\n  {case.rerun_command()}\nor:\n  {case.rerun_python()}")
