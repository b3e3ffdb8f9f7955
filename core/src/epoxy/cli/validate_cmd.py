"""``epoxy validate MODEL --providers openvino,cpu``: compare every intermediate value with a
reference and name the first node that diverges; exit 0 all match, 1 divergence or error."""

from __future__ import annotations

import argparse
import io
import sys

from ._console import Console, console_for
from ._format import providers_arg

EXAMPLE = """example:
  epoxy validate model.onnx --providers openvino,cpu --reference onnxruntime --random 3
  epoxy validate model.onnx --providers openvino,cpu --inputs x=x.npy --rtol 1e-2 --json

exit status: 0 every compared value matches, 1 a value diverges (or a run fails), 2 usage error"""


def add_inputs_arguments(parser: argparse.ArgumentParser) -> None:
    """Inputs, reference and tolerances: what validate and reduce share."""
    from ..debug.compare import DEFAULT_ATOL, DEFAULT_RTOL
    from ..debug.references import REFERENCES

    parser.add_argument("model", help="path to an .onnx model")
    parser.add_argument("--providers", required=True, help="comma-separated providers under test, priority order")
    parser.add_argument("--reference", default="cpu", choices=sorted(REFERENCES),
                        help="what to compare with (default cpu: epoxy's cpu provider alone)")
    given = parser.add_mutually_exclusive_group()
    given.add_argument("--inputs", nargs="+", default=None, metavar="NAME=FILE.npy|FILE.npz",
                       help="input values (a .npz holds several, by name)")
    given.add_argument("--random", type=int, default=None, metavar="N",
                       help="N runs on seeded random inputs from the declared types (default 1)")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                        help="value of a symbolic dim for random inputs (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--rtol", type=float, default=DEFAULT_RTOL,
                        help=f"relative tolerance (default {DEFAULT_RTOL:g}); a value passes where "
                        "|a - ref| <= atol + rtol * |ref|")
    parser.add_argument("--atol", type=float, default=DEFAULT_ATOL,
                        help=f"absolute tolerance (default {DEFAULT_ATOL:g})")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_inputs_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON")


def _num(x: float) -> str:
    return f"{x:.3g}"


def _row(v: object) -> list[str]:
    from ..debug.validate import ValueDiff

    assert isinstance(v, ValueDiff)
    s = v.stats
    return [v.name, v.node, v.op_type, v.provider, _num(s.max_abs), _num(s.max_rel), f"{s.cosine:.6f}",
            "ok" if s.passed else "DIVERGES"]


HEADERS = ["value", "node", "op", "provider", "max abs", "max rel", "cosine", ""]
#: the statistics columns, right-aligned on a terminal
NUMERIC = (4, 5, 6)


def format_report(report: object, limit: int = 10) -> str:
    """The verdict, the first divergence with its statistics, the drift after it, as plain text."""
    text = io.StringIO()
    print_report(Console(text, plain=True), report, limit)
    return text.getvalue().rstrip("\n")


def print_report(out: Console, report: object, limit: int = 10) -> None:
    """:func:`format_report` drawn on ``out``: the verdict coloured, tables boxed on a terminal."""
    from ..debug.validate import ValidationReport

    assert isinstance(report, ValidationReport)
    r = report
    out.line(f"{r.model}: {', '.join(r.providers)} vs reference {r.reference} (rtol {r.rtol:g}, atol {r.atol:g}, "
             f"{r.runs} run{'s' if r.runs != 1 else ''})")
    out.line(f"compared {len(r.values)} values ({r.not_compared} only on one side), "
             f"{sum(not v.stats.passed for v in r.values)} diverge")
    if r.error:
        out.line(f"ERROR {r.error}", kind="error")
    first = r.first
    if first is not None:
        s = first.stats
        group = f" in group {first.group}" if first.group else ""
        out.line()
        out.line(f"first divergence: value {first.name!r} {first.shape} from node {first.node!r} "
                 f"({first.op_type}) on provider {first.provider!r}{group}", kind="error")
        out.line(f"  max abs {_num(s.max_abs)}  mean abs {_num(s.mean_abs)}  max rel {_num(s.max_rel)}  "
                 f"cosine {s.cosine:.6f}  NaN {s.nan} (ref {s.ref_nan})  Inf {s.inf} (ref {s.ref_inf})  "
                 f"{s.mismatches}/{s.size} elements out of tolerance" + (f"  ({s.reason})" if s.reason else ""))
        drift = [v for v in r.drift if not v.is_output][:limit] + [v for v in r.drift if v.is_output]
        if drift:
            out.line()
            out.line(f"drift ({len(r.drift)} values computed from it; outputs last):")
            out.table(HEADERS, [_row(v) for v in drift], numeric=NUMERIC)
    elif r.outputs:
        out.line()
        out.table(HEADERS, [_row(v) for v in r.outputs], numeric=NUMERIC)
    out.line()
    out.line("PASS" if r.passed else "FAIL", kind="ok" if r.passed else "error")


def run(args: argparse.Namespace) -> int:
    from ..debug.feeds import load_inputs, parse_dims
    from ..debug.validate import validate
    from ..errors import InvalidArgumentError

    out = console_for(args)
    try:
        report = validate(args.model, providers_arg(args.providers) or [], reference=args.reference,
                          feeds=load_inputs(args.inputs) if args.inputs else None, random=args.random,
                          rtol=args.rtol, atol=args.atol, seed=args.seed, dims=parse_dims(args.dim))
    except InvalidArgumentError as exc:  # bad arguments or files: a usage error, like argparse's
        Console(sys.stderr, as_json=out.as_json).line(f"epoxy validate: error: {exc}", kind="error")
        return 2
    if args.json:
        out.json(report.to_dict())
    else:
        print_report(out, report)
    return 0 if report.passed else 1
