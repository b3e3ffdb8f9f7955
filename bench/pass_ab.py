"""A/B of optimizer passes: one model, sessions built with the named passes switched off and
on, timed interleaved in one process (``compare.time_interleaved``), outputs compared.

Why in one process: on this shared machine a model's time moves by up to 1.7x between
processes; two sessions side by side, their runs interleaved, see the same conditions.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/pass_ab.py MODEL.onnx \\
        --passes qdq_lookup:QDQLookupPass,qdq_lookup:QDQConcatRequantizePass,qdq_pool:QDQGlobalAveragePoolPass
    ... bench/pass_ab.py light_squeezenet --quantize onnxruntime --passes qdq_lookup:QDQConcatRequantizePass
    ... bench/pass_ab.py light_inception_v2 --quantize epoxy --passes qdq_pool:QDQAveragePoolPass --threads 1,2

``MODEL``: an .onnx path or a bench model name (``bench/models.py``). ``--quantize``: first
quantize it statically (QDQ, per channel, u8 activations / s8 weights, MinMax on seeded random
inputs) with onnxruntime's ``quantize_static`` after its pre-processing, or with epoxy's after
its own, as ``bench/quantization.py`` does; the light models get random weights first.
``--passes``: ``module:Class`` pairs under ``epoxy.optimize.passes`` whose ``rewrite`` does
nothing in the "off" session. ``--switch module:function=false``: a predicate made to answer
False in the "off" session (for a rule inside a pass).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import time_interleaved  # noqa: E402


@contextmanager
def patched(target: str, make: Callable[[Any], Any]) -> Iterator[None]:
    """``epoxy.optimize.passes.<module>:<attribute>`` replaced by ``make(original)`` inside."""
    module_name, attribute = target.split(":")
    owner: Any = importlib.import_module(f"epoxy.optimize.passes.{module_name}")
    *path, last = attribute.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, last)
    setattr(owner, last, make(original))
    try:
        yield
    finally:
        setattr(owner, last, original)


def switched_off(passes: list[str], switches: list[str]) -> ExitStack:
    """The "off" side: each pass's ``rewrite`` does nothing, each switch answers False."""
    stack = ExitStack()
    for name in passes:
        stack.enter_context(patched(f"{name}.rewrite", lambda _original: lambda *args, **kwargs: 0))
    for switch in switches:
        target, _, value = switch.partition("=")
        if value.lower() != "false":
            raise SystemExit(f"--switch {switch!r}: only '=false' is supported")
        stack.enter_context(patched(target, lambda _original: lambda *args, **kwargs: False))
    return stack


def model_and_feeds(spec: str, quantize: str | None, calib: int, folder: Path) -> tuple[str, dict[str, np.ndarray]]:
    """The model file to time and one seeded feed for it."""
    import onnx
    from models import select_models

    bm = None if Path(spec).is_file() else select_models(spec)[0]
    path = spec if bm is None else str(bm.path)
    feeds_of = None if bm is None else bm.make_feeds
    if quantize:
        from quantization import fp32_model, ort_static_qdq

        proto = fp32_model(bm) if bm is not None else onnx.load(path)
        fp32 = folder / "fp32.onnx"
        onnx.save(proto, str(fp32))
        rng = np.random.default_rng(0)
        calibration = [feeds_of(rng) if feeds_of else random_feeds(proto, rng) for _ in range(calib)]
        out = folder / f"{quantize}_qdq.onnx"
        if quantize == "onnxruntime":
            ort_static_qdq(fp32, out, calibration, "uint8")
        else:
            from epoxy.quantization import quantize_static
            from epoxy.quantization.preprocess import preprocess

            onnx.save(quantize_static(preprocess(proto)[0], calibration, activation_dtype="uint8", per_channel=True),
                      str(out))
        path = str(out)
    proto = onnx.load(path)
    rng = np.random.default_rng(1)
    return path, (feeds_of(rng) if feeds_of else random_feeds(proto, rng))


def random_feeds(proto: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Standard-normal float32 feeds for a model's non-initializer inputs (dynamic dims as 1)."""
    inits = {i.name for i in proto.graph.initializer}
    feeds = {}
    for value in proto.graph.input:
        if value.name in inits:
            continue
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="an .onnx path or a bench model name")
    parser.add_argument("--passes", default="", help="comma-separated module:Class under epoxy.optimize.passes")
    parser.add_argument("--switch", action="append", default=[], help="module:function=false (repeatable)")
    parser.add_argument("--quantize", choices=("onnxruntime", "epoxy"), help="quantize the model statically first")
    parser.add_argument("--calib", type=int, default=4, help="calibration inputs for --quantize")
    parser.add_argument("--threads", default="1", help="comma-separated intra_op_num_threads")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--budget", type=float, default=3.0, help="seconds of timed calls per session")
    args = parser.parse_args(argv)
    passes = [p for p in args.passes.split(",") if p]
    if not passes and not args.switch:
        parser.error("name at least one pass (--passes) or rule (--switch) to switch off")

    import epoxy

    with tempfile.TemporaryDirectory() as folder:
        path, feeds = model_and_feeds(args.model, args.quantize, args.calib, Path(folder))
        for threads in [int(t) for t in args.threads.split(",")]:
            options = epoxy.SessionOptions(intra_op_num_threads=threads)
            with switched_off(passes, args.switch):
                off = epoxy.InferenceSession(path, options, providers=["cpu"])
            on = epoxy.InferenceSession(path, options, providers=["cpu"])
            outputs = {name: s.run(None, feeds) for name, s in (("off", off), ("on", on))}
            equal = all(np.array_equal(a, b) for a, b in zip(outputs["off"], outputs["on"]))
            worst = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                        for a, b in zip(outputs["off"], outputs["on"]))
            runners = {"off": lambda f, s=off: s.run(None, f), "on": lambda f, s=on: s.run(None, f)}
            medians, _, errors = time_interleaved(runners, feeds, runs=args.runs, block=4, warmup=3,
                                                  budget=args.budget, min_runs=10, settle=0.2)
            if errors:
                print(f"threads {threads}: errors {errors}")
                continue
            print(f"{Path(args.model).name} threads {threads}: off {medians['off'] * 1e3:.2f} ms, "
                  f"on {medians['on'] * 1e3:.2f} ms ({medians['off'] / medians['on']:.2f}x); outputs "
                  + ("identical" if equal else f"differ by at most {worst:.3g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
