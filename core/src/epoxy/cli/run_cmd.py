"""``epoxy run MODEL --input name=file.npy``: run once, print or save the outputs."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from ._console import Console, console_for
from ._format import providers_arg

EXAMPLE = """example:
  epoxy run model.onnx --input x=x.npy
  epoxy run model.onnx --input x=x.npy --providers openvino,cpu -o outputs/"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path to an .onnx model")
    parser.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy",
                        help="an input (repeat), or a FILE.npz holding several")
    parser.add_argument("--providers", help="comma-separated, priority order (default: all available)")
    parser.add_argument("--output-dir", "-o", help="save each output as NAME.npy here instead of printing")


def parse_inputs(specs: list[str]) -> dict[str, np.ndarray]:
    """``--input name=file.npy`` (or a ``file.npz`` of several), read as every command reads input files."""
    from ..debug.feeds import load_inputs

    return load_inputs(specs, flag="--input")


def run(args: argparse.Namespace) -> int:
    from ..session import InferenceSession  # loads onnx_ir: only for commands that run a model

    session = InferenceSession(args.model, providers=providers_arg(args.providers))
    feeds = parse_inputs(args.input)
    start = time.perf_counter()
    outputs = session.run(None, feeds)
    elapsed = (time.perf_counter() - start) * 1e3
    names = [o.name for o in session.get_outputs()]
    out = console_for(args)
    if args.output_dir:
        out_dir = Path(args.output_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, value in zip(names, outputs):
            path = out_dir / f"{name.replace('/', '_')}.npy"
            np.save(path, np.asarray(value))
            out.line(f"{name}: saved {path}", kind="ok")
    else:
        print_outputs(out, names, outputs)
    out.line(f"ran in {elapsed:.2f} ms on {', '.join(session.get_providers())}", kind="info")
    return 0


def print_outputs(out: Console, names: list[str], outputs: list[object]) -> None:
    """Each output's dtype and shape, then its values (numpy's summary of long arrays)."""
    with np.printoptions(threshold=50, edgeitems=3, precision=5):
        for name, value in zip(names, outputs):
            if isinstance(value, np.ndarray):
                out.line(f"{name}: {value.dtype} {list(value.shape)}\n{value}")
            else:
                out.line(f"{name}: {value!r}")
