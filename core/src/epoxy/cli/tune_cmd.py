"""``epoxy tune MODEL``: measure which provider set runs this model fastest here (the
``max_performance`` policy, done explicitly), print the table, cache the decision."""

from __future__ import annotations

import argparse
import warnings

from ..devices.inventory import get_ep_devices
from ..errors import InvalidArgumentError
from ..options import SessionOptions
from ..plugins import default_registry
from ._console import console_for
from .bench_cmd import parse_dims

EXAMPLE = """example:
  epoxy tune model.onnx                       # measure, print the table, cache the pick
  epoxy tune model.onnx --dim batch=8 --budget 60
  epoxy tune bert.onnx --inputs input_ids=ids.npy --inputs attention_mask=mask.npy
  epoxy tune model.onnx --cached              # what the cache holds (measured if it holds nothing)
  epoxy run model.onnx --providers auto:max_performance   # sessions then use the cached pick"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path to an .onnx model")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                        help="value of a symbolic input dim (default 1); part of the cache key")
    parser.add_argument("--inputs", action="append", default=[], metavar="NAME=FILE.npy",
                        help="representative values for an input (repeat; or an .npz); the others are random")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="time for the whole measurement (default 30, SessionOptions.tune_budget_s)")
    parser.add_argument("--cached", action="store_true", help="use the cached decision when there is a valid one")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from ..debug.feeds import load_inputs
    from ..devices.tuning import tuned_selection
    from ..session import InferenceSession  # here, not at the top: building the CLI parser stays light

    console = console_for(args)
    options = SessionOptions()
    if args.budget is not None:
        if args.budget <= 0:
            raise InvalidArgumentError(f"--budget must be a positive number of seconds, got {args.budget}")
        options.tune_budget_s = args.budget
    registry = default_registry()
    ep_devices = get_ep_devices(registry)
    steps = 100
    with console.progress("tuning", steps) as advance, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # candidates' notes are in the table
        shown = [0]

        def progress(step: str, done: int, total: int) -> None:
            target = int(steps * done / max(total, 1))
            advance(target - shown[0])
            shown[0] = target

        selection = tuned_selection(args.model, options, registry, ep_devices, InferenceSession,
                                    dims=parse_dims(args.dim), inputs=load_inputs(args.inputs),
                                    refresh=not args.cached, progress=progress)
    if args.json:
        console.json(selection.to_dict())
        return 0
    rows = [[row["label"], ", ".join(f"{k} {v}" for k, v in row["claimed"].items()) or "-",
             "-" if row["median_ms"] is None else f"{row['median_ms']:.3f}", row["runs"],
             "-" if row["vs_cpu"] is None else f"{row['vs_cpu']:.2f}x",
             "-" if row["max_error"] is None else f"{row['max_error']:.1e}", row["dropped"] or "ok"]
            for row in selection.table]
    console.table(["providers", "nodes claimed", "median ms", "runs", "vs cpu", "max error", "status"], rows,
                  title=f"{args.model}: candidate provider sets", numeric=(2, 3, 4, 5))
    console.line(selection.summary(), "ok")
    for note in selection.notes:
        console.line(f"  {note}", "info")
    if selection.cache_path:
        console.line(f"cached in {selection.cache_path}", "info")
    return 0
