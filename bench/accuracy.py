"""Numerical check of epoxy's cpu kernels on the light models with random weights.

    /work/venv/bin/python bench/accuracy.py                 # all light models
    /work/venv/bin/python bench/accuracy.py --models resnet50,vgg19 --threads 2

The light models build every weight with one ``ConstantOfShape`` (one value everywhere), so
their outputs say nothing about accuracy (see README, "Reading the output check"). Here each
weight-building ``ConstantOfShape`` becomes a random initializer of the same shape (He-normal
for Conv / Gemm weights, small random biases, BatchNormalization statistics near identity;
seeded), the final Softmax is dropped so that logits are compared, and epoxy's outputs (default
options, and ``conv_winograd="off"``) are compared with onnxruntime's: max |diff| over max
|reference|. A check, not a benchmark; nothing here is timed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _random_value(op: str, index: int, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """A plausible random value for input ``index`` of an ``op`` node."""
    if op in ("Conv", "Gemm") and index == 1:
        fan_in = int(np.prod(shape[1:])) if op == "Conv" else int(shape[-1])
        return rng.normal(0.0, np.sqrt(2.0 / max(1, fan_in)), shape)
    if op == "BatchNormalization" and index == 1:  # scale
        return rng.uniform(0.5, 1.5, shape)
    if op == "BatchNormalization" and index == 4:  # variance
        return rng.uniform(0.5, 1.5, shape)
    return rng.normal(0.0, 0.1, shape)  # biases, BN bias and mean


def randomized(model, seed: int):  # type: ignore[no-untyped-def]
    """``model`` (light_*) with random weights and without its final Softmax."""
    import onnx
    from onnx import numpy_helper

    rng = np.random.default_rng(seed)
    graph = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    consumers: dict[str, tuple[str, int]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            consumers.setdefault(name, (node.op_type, i))
    keep = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits and node.output[0] in consumers:
            shape = tuple(int(d) for d in inits[node.input[0]].reshape(-1))
            op, index = consumers[node.output[0]]
            value = _random_value(op, index, shape, rng).astype(np.float32)
            graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
        else:
            keep.append(node)
    last = keep[-1]
    if last.op_type == "Softmax" and last.output[0] == graph.output[0].name:
        keep.pop()
        graph.output[0].name = last.input[0]
    del graph.node[:]
    graph.node.extend(keep)
    model.ir_version = max(model.ir_version, 4)  # initializers need not be graph inputs from IR 4
    onnx.checker.check_model(model)
    return model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="light")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import onnx
    import onnxruntime as ort
    from models import select_models

    import epoxy

    print("| model | logits max |ref| | epoxy (default) rel. diff | epoxy (conv_winograd=off) rel. diff |")
    print("|---|---|---|---|")
    for bm in select_models(args.models):
        if not bm.name.startswith("light_"):
            continue
        data = randomized(onnx.load(str(bm.path)), args.seed).SerializeToString()
        feeds = bm.make_feeds(np.random.default_rng(args.seed))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = args.threads
        opts.log_severity_level = 3  # old-IR models list initializers as inputs: one warning each
        want = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        scale = float(np.abs(want).max())
        cells = []
        for providers in (["cpu"], [("cpu", {"conv_winograd": "off"})]):
            sess = epoxy.InferenceSession(data, providers=providers,
                                          sess_options=epoxy.SessionOptions(intra_op_num_threads=args.threads))
            got = sess.run(None, feeds)[0]
            cells.append(f"{float(np.abs(got - want).max()) / scale:.1e}")
        print(f"| {bm.name} | {scale:.3g} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
