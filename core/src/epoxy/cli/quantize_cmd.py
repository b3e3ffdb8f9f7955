"""``epoxy quantize MODEL -o OUT.onnx``: quantize, check, report; write only what passed."""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from typing import Any

from ._console import Advance, Console, console_for
from ._format import providers_arg

EXAMPLE = """example:
  epoxy quantize model.onnx -o model.int8.onnx --calibration calib/ --method entropy
  epoxy quantize model.onnx -o model.best.onnx --mode auto --calibration calib.npz --max-rel-error 0.01
calibration data: a folder of .npz files (one feed dict each) or <input>_<k>.npy files, or one
.npz file (arrays <input>_<k>, or <input> cut along axis 0 into batches); the last --held-out
batches measure the report's accuracy. The model is written only after it passes the onnx
checker, one run on epoxy and one on onnxruntime (when installed)."""

_MODES = ("static", "dynamic", "fp16", "bf16", "weight-int8", "weight-int4", "auto")


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path to a float32 .onnx model")
    parser.add_argument("-o", "--output", required=True, help="path of the quantized .onnx model to write")
    parser.add_argument("--mode", choices=_MODES, default="static",
                        help="static (QDQ int8, needs calibration), dynamic, fp16, bf16, weight-int8, "
                             "weight-int4, or auto: the fastest within --max-rel-error (default static)")
    parser.add_argument("--auto", dest="mode", action="store_const", const="auto", help="same as --mode auto")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--calibration", metavar="DIR_OR_NPZ", help="calibration feeds (see below)")
    source.add_argument("--random-calibration", type=_positive_int, metavar="N",
                        help="N seeded random batches instead of data: a smoke test, the accuracy means little")
    parser.add_argument("--method", choices=["minmax", "percentile", "entropy", "mse"], default="minmax",
                        help="activation range from the calibration histograms (default minmax)")
    parser.add_argument("--format", choices=["qdq", "qoperator"],
                        help="int8 as QDQ pairs (static's default, read by every runtime) or QOperator ops "
                             "(QLinearConv, MatMulInteger...: dynamic's default)")
    parser.add_argument("--per-tensor", action="store_true", help="one weight scale per tensor, not per channel")
    parser.add_argument("--activation-dtype", choices=["uint8", "int8"],
                        help="override the target's choice (u8s8 on x86, s8s8 elsewhere)")
    parser.add_argument("--reduce-range", action=argparse.BooleanOptionalAction, default=None,
                        help="7-bit weights (default: on for x86 CPUs without VNNI)")
    parser.add_argument("--providers", default="cpu", help="comma-separated, priority order (default cpu)")
    parser.add_argument("--include-op", action="append", metavar="OP",
                        help="op types to quantize (repeatable; default: what the first provider runs in int8, "
                             "the whole chain between convolutions for cpu and openvino)")
    parser.add_argument("--exclude-node", action="append", default=[], metavar="NODE",
                        help="a node name to keep in float (repeatable)")
    parser.add_argument("--max-rel-error", type=_positive_float, default=0.02,
                        help="--mode auto's accuracy budget: ||y-y0||/||y0|| on held-out data (default 0.02)")
    parser.add_argument("--held-out", type=_positive_int, metavar="N",
                        help="calibration batches kept for the report (default 20%%, at least 1)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


class CalibrationBar:
    """``progress(done, total)`` for :func:`quantize_model`, drawn as the console's progress
    bar on stderr. The bar opens at the first batch (the total is known only then) and
    closes at the last, or when the ``with`` block ends (an error mid-calibration)."""

    def __init__(self, out: Console, label: str = "calibrating") -> None:
        self.out, self.label = out, label
        self._stack = ExitStack()
        self._advance: Advance | None = None
        self._done = 0

    def __call__(self, done: int, total: int) -> None:
        if self._advance is None:
            self._advance = self._stack.enter_context(self.out.progress(self.label, total))
            self._done = 0
        self._advance(done - self._done)
        self._done = done
        if done >= total:
            self.close()

    def close(self) -> None:
        self._stack.close()
        self._advance = None

    def __enter__(self) -> CalibrationBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: how a report line starting so is coloured on a terminal
LINE_KINDS = {"warning:": "warn", "note:": "info", "checks passed": "ok"}


def kind_of(line: str) -> str | None:
    """The note kind of one line of the quantization report (None: an ordinary line)."""
    return next((kind for prefix, kind in LINE_KINDS.items() if line.startswith(prefix)), None)


def print_report(out: Console, report: Any, output: str) -> None:
    """The report, its notes and warnings coloured on a terminal, and where the model went."""
    for line in report.format().splitlines():
        out.line(line, kind=kind_of(line))
    out.line(f"written: {output}", kind="ok")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import onnx

    from ..errors import InvalidArgumentError
    from ..quantization.tool import quantize_model

    if Path(args.output).resolve() == Path(args.model).resolve():
        raise InvalidArgumentError(f"-o {args.output!r} would overwrite the model itself")
    out = console_for(args)
    with CalibrationBar(out) as bar:  # a no-op off a terminal and with --json
        model, report = quantize_model(
            args.model, mode=args.mode, calibration=args.calibration, random_calibration=args.random_calibration,
            method=args.method, per_channel=False if args.per_tensor else None,
            activation_dtype=args.activation_dtype, reduce_range=args.reduce_range,
            providers=providers_arg(args.providers) or ["cpu"], op_types=args.include_op,
            nodes_to_exclude=args.exclude_node, held_out=args.held_out, max_rel_error=args.max_rel_error,
            progress=None if args.quiet else bar, format=args.format)
    onnx.save(model, args.output)
    if args.json:
        out.json({"output": args.output, **report.to_dict()})
    else:
        print_report(out, report, args.output)
    return 0
