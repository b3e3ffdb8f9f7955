"""Every distinct convolution of a bench model: alone against onnxruntime, and inside the model.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/model_convs.py --model inception_v2
    ... bench/model_convs.py --model squeezenet --threads 2 --cold 64

Why: a model's time on ep-cpu is mostly its convolutions, and a layer timed alone in a loop
(``conv_layers.py``) keeps its weights and buffers in the caches, which a model's run does not.
On the Intel guest of session 35 inception_v2's convolutions summed to 25.7 ms alone against
onnxruntime's 25.2, and took 38.9 ms inside the model, where onnxruntime's took 24.0
(bench/README.md, session 35). This prints both sides per layer shape.

Per distinct layer (input shape, weight shape, strides, pads, group; the model's Conv nodes,
shapes from ONNX shape inference): how many the model has, the route ep-cpu takes (its prepared
call class: ``conv_layers.Routes``), the layer alone in a Conv + Relu model with seeded random
weights (us, best of alternated blocks, epoxy then onnxruntime; ``--cold MB`` touches that much
other memory before each call and subtracts the touch's own time), and the mean time of ep-cpu's
prepared calls of that shape inside the model's runs. The totals close the table.
"""

from __future__ import annotations

import argparse
import collections
import time
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from conv_layers import best_us, call_classes
from models import bert_model, light_models
from onnx import TensorProto, helper, numpy_helper, shape_inference

import epoxy

LayerKey = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], int]


def conv_layers_of(path: str) -> collections.Counter[LayerKey]:
    """The model's Conv layers by (input shape, weight shape, strides, pads, group)."""
    model = shape_inference.infer_shapes(onnx.load(path))
    shapes = {vi.name: tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
              for vi in [*model.graph.value_info, *model.graph.input]}
    shapes.update({i.name: tuple(i.dims) for i in model.graph.initializer})
    for node in model.graph.node:  # the light models make their weights with ConstantOfShape
        if node.op_type == "ConstantOfShape":
            for init in model.graph.initializer:
                if init.name == node.input[0]:
                    shapes[node.output[0]] = tuple(int(v) for v in numpy_helper.to_array(init))
    layers: collections.Counter[LayerKey] = collections.Counter()
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        x_shape, w_shape = shapes.get(node.input[0]), shapes.get(node.input[1])
        if not x_shape or not w_shape or 0 in x_shape:
            print(f"skipped {node.name}: shapes unknown ({x_shape}, {w_shape})")
            continue
        layers[(x_shape, w_shape, tuple(attrs.get("strides", (1, 1))), tuple(attrs.get("pads", (0, 0, 0, 0))),
                int(attrs.get("group", 1)))] += 1
    return layers


def layer_model(key: LayerKey) -> bytes:
    """A Conv + Relu model of one layer, seeded random weights (He-scaled) and bias."""
    x_shape, w_shape, strides, pads, group = key
    rng = np.random.default_rng(sum(w_shape))
    w = (rng.standard_normal(w_shape) * (2.0 / np.prod(w_shape[1:])) ** 0.5).astype(np.float32)
    b = (rng.standard_normal(w_shape[0]) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=list(pads), strides=list(strides), group=group),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()


class CallSpy:
    """While active, every prepared convolution call's route and time, by (input shape,
    output shape, route): F(4,3) and F(2,3) told apart by their transform's size."""

    def __init__(self) -> None:
        self.spent: dict[tuple[Any, ...], float] = collections.defaultdict(float)
        self.last = "numpy"
        self._classes = call_classes()
        self._originals = {cls: cls.__call__ for cls in self._classes}

    def __enter__(self) -> CallSpy:
        for cls, name in self._classes.items():
            cls.__call__ = self._timed(self._originals[cls], name)
        return self

    def __exit__(self, *exc: object) -> None:
        for cls, real in self._originals.items():
            cls.__call__ = real

    def _timed(self, real: Any, name: str) -> Any:
        def call(inner: Any, x: np.ndarray, z: Any) -> np.ndarray:
            label = name
            if name == "winograd":
                label = "F(2,3)" if getattr(inner, "_elements", 36) == 16 else "F(4,3)"
            start = time.perf_counter()
            y = real(inner, x, z)
            self.spent[(x.shape, y.shape, label)] += time.perf_counter() - start
            self.last = label
            return y

        return call


def in_model_times(path: str, make_feeds: Any, threads: int, runs: int) -> dict[tuple[Any, ...], float]:
    """Mean us per run of ep-cpu's prepared convolution calls inside the model, by (input
    shape, output shape, route)."""
    options = epoxy.SessionOptions()
    options.intra_op_num_threads = threads
    session = epoxy.InferenceSession(path, options, providers=["cpu"])
    feeds = make_feeds(np.random.default_rng(0))
    for _ in range(3):
        session.run(None, feeds)
    with CallSpy() as spy:
        for _ in range(runs):
            session.run(None, feeds)
    return {key: seconds / runs * 1e6 for key, seconds in spy.spent.items()}


def time_layer(key: LayerKey, args: argparse.Namespace, touch: Any) -> tuple[str, tuple[int, ...], float, float]:
    """One layer alone: ep-cpu's route, the output shape, and the best us of ep-cpu and of
    onnxruntime in alternated blocks (``touch`` called before each call, its own time
    subtracted, when given)."""
    data = layer_model(key)
    options = epoxy.SessionOptions()
    options.intra_op_num_threads = args.threads
    mine = epoxy.InferenceSession(data, options, providers=["cpu"])
    theirs_options = ort.SessionOptions()
    theirs_options.intra_op_num_threads = args.threads
    theirs = ort.InferenceSession(data, theirs_options, providers=["CPUExecutionProvider"])
    x = {"x": np.random.default_rng(1).standard_normal(key[0]).astype(np.float32)}
    with CallSpy() as spy:
        out_shape = mine.run(None, x)[0].shape
    route = spy.last
    runs = {"epoxy": lambda: mine.run(None, x), "onnxruntime": lambda: theirs.run(None, x)}
    if touch is not None:
        runs = {"epoxy": lambda: (touch(), mine.run(None, x)), "onnxruntime": lambda: (touch(), theirs.run(None, x)),
                "touch": touch}
    took = best_us(runs, args.rounds, args.seconds)
    offset = took.pop("touch", 0.0)
    return route, out_shape, took["epoxy"] - offset, took["onnxruntime"] - offset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a bench model's name or part of it (inception_v2, squeezenet...)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=10, help="model runs whose calls are timed")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.02, help="time of one timed block")
    ap.add_argument("--cold", type=int, default=0, help="MB of other memory touched before each call alone")
    args = ap.parse_args()
    found = [m for m in [*light_models(), bert_model()] if args.model in m.name]
    if not found:
        raise SystemExit(f"no bench model matches {args.model!r}")
    bench = found[0]
    layers = conv_layers_of(str(bench.path))
    inside = in_model_times(str(bench.path), bench.make_feeds, args.threads, args.runs)
    junk = np.ones(max(args.cold, 1) * 2**20 // 4, np.float32)

    def touch() -> None:
        junk[::16] += 1.0  # one float a cache line

    rows = []
    for key, count in layers.items():
        route, out_shape, alone, ort_alone = time_layer(key, args, touch if args.cold else None)
        rows.append((count, key, route, alone, ort_alone,
                     inside.get((key[0], out_shape, route), float("nan")) / count))
    rows.sort(key=lambda r: -r[0] * (r[3] - r[4]))
    print(f"\n### {bench.name}: convolutions alone and in the model, {args.threads} thread(s), us"
          f"{f' (alone after {args.cold} MB of other memory)' if args.cold else ''}")
    print("| n | input | weight | stride | pads | group | route | alone | onnxruntime alone | alone / ort |"
          " in the model (mean a call) |")
    print("|---:|---|---|---|---|---:|---|---:|---:|---:|---:|")
    totals = [0.0, 0.0, 0.0]
    for count, (x_shape, w_shape, strides, pads, group), route, alone, ort_alone, in_model in rows:
        print(f"| {count} | {list(x_shape)} | {list(w_shape)} | {list(strides)} | {list(pads)} | {group} | {route} | "
              f"{alone:.1f} | {ort_alone:.1f} | {alone / ort_alone:.2f} | {in_model:.1f} |")
        totals = [totals[0] + count * alone, totals[1] + count * ort_alone, totals[2] + count * in_model]
    print(f"\ntotal: alone {totals[0] / 1e3:.2f} ms, onnxruntime alone {totals[1] / 1e3:.2f} ms "
          f"({totals[0] / totals[1]:.2f}), ep-cpu's calls in the model {totals[2] / 1e3:.2f} ms")


if __name__ == "__main__":
    main()
