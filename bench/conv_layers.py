"""One convolution layer at a time, in sessions: ep-cpu's route without a path (``--path``:
the implicit GEMM or the small-layer kernel), that path forced, ep-cpu's route as it stands,
and onnxruntime, timed alternately.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/conv_layers.py --threads 1
    ... bench/conv_layers.py --threads 2 --layers "16,16,32,32,3,2;1,64,28,64,3,1"
    ... bench/conv_layers.py --path small --layers "1,8,8,8,3,1;8,16,4,16,3,1"

Each layer is a Conv + Relu model (pads kernel // 2 unless a 7th number gives them) of input
``n, c, h, h``, ``m`` output channels, a ``k x k`` kernel and stride ``s``, random weights with
a fixed seed. Printed per layer, in us (best of ``--rounds`` alternated blocks): the route and
time ep-cpu takes without the path (its grid GEMM, Winograd or direct kernel), the path
forced (its thresholds lifted), the route it takes now, onnxruntime, and the largest
difference from onnxruntime. The data behind ``kernels_conv_implicit.gains`` and
``ops/conv.implicit_over_winograd`` (bench/README.md, "Session 28") and
``kernels_conv_small.gains`` ("Session 29").
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import epoxy

#: the session-28 table's layers: n, c, h, m, k, s (bench CNN, exporter-size and ImageNet-size)
LAYERS = [(16, 16, 32, 32, 3, 2), (8, 16, 32, 32, 3, 2), (1, 3, 224, 64, 7, 2), (1, 64, 56, 64, 3, 2),
          (16, 3, 32, 16, 3, 1), (8, 8, 32, 16, 3, 1), (8, 16, 16, 32, 3, 1), (8, 64, 4, 64, 3, 1),
          (4, 128, 14, 32, 3, 1), (1, 64, 7, 64, 3, 1), (1, 64, 28, 64, 3, 1), (1, 96, 14, 96, 3, 1)]


def conv_model(n: int, c: int, h: int, m: int, k: int, s: int, pad: int | None = None) -> bytes:
    rng = np.random.default_rng(n * 1000 + c * 10 + m)
    w = (rng.standard_normal((m, c, k, k)) * (2.0 / (c * k * k)) ** 0.5).astype(np.float32)
    b = (rng.standard_normal(m) * 0.1).astype(np.float32)
    p = k // 2 if pad is None else pad
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[p] * 4, strides=[s, s]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, h])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()


def call_classes() -> dict[Any, str]:
    """ep-cpu's prepared convolution call classes -> their route's name."""
    from epoxy_ep_cpu.jit.conv_routes import call_classes as classes

    return classes()


class Routes:
    """Which prepared conv call ran last (the jit tier's call classes, spied on)."""

    def __init__(self) -> None:
        self.last: list[str] = []
        for cls, name in call_classes().items():
            self._spy(cls, name)

    def _spy(self, cls: Any, name: str) -> None:
        real = cls.__call__
        last = self.last

        def call(inner: Any, x: np.ndarray, z: Any) -> np.ndarray:
            label = name
            if name == "winograd":
                label = "F(2,3)" if getattr(inner, "_elements", 36) == 16 else "F(4,3)"
            last.append(label)
            return real(inner, x, z)

        cls.__call__ = call

    def of(self, run: Callable[[], Any]) -> str:
        self.last.clear()
        run()
        return self.last[-1] if self.last else "numpy"


class Variants:
    """ep-cpu sessions whose routes are fixed at their first run: ``path`` ("implicit" or
    "small") off, forced, or as it stands (module globals patched around that first run only)."""

    def __init__(self, path: str) -> None:
        from epoxy_ep_cpu.jit import kernels_conv_implicit, kernels_conv_small, kernels_pointwise
        from epoxy_ep_cpu.ops import conv

        self.path = path
        self.implicit, self.small, self.pointwise, self.conv = (kernels_conv_implicit, kernels_conv_small,
                                                                kernels_pointwise, conv)
        self.real = {"gains": kernels_conv_implicit.gains, "takes": kernels_pointwise.takes_implicit,
                     "f43": conv.use_f43_jit, "f23": conv.use_f23_jit, "grid": conv._grid_replaces_numpy,
                     "small": kernels_conv_small.gains}

    def session(self, data: bytes, threads: int, mode: str, feeds: dict[str, np.ndarray]) -> Any:
        options = epoxy.SessionOptions()
        options.intra_op_num_threads = threads
        sess = epoxy.InferenceSession(data, options, providers=["cpu"])
        small_fits = self.real["small"]
        if self.path == "small":
            if mode == "off":
                self.small.gains = lambda *a, **k: False
            elif mode == "forced":
                self.small.gains = lambda n, ck, m, positions, nthreads=1, taps=9: (self.small.support() is None
                                                                                    and m <= 64)
        elif mode == "off":
            self.implicit.gains = lambda *a, **k: False
            self.pointwise.takes_implicit = lambda *a, **k: False
        elif mode == "forced":
            self.small.gains = lambda *a, **k: False
            self.implicit.gains = lambda *a, **k: True
            self.conv.use_f43_jit = self.conv.use_f23_jit = lambda *a, **k: False
            self.conv._grid_replaces_numpy = lambda *a, **k: True
        try:
            sess.run(None, feeds)  # the first run prepares the layer's call: its route is fixed now
        finally:
            self.implicit.gains, self.pointwise.takes_implicit = self.real["gains"], self.real["takes"]
            self.conv.use_f43_jit, self.conv.use_f23_jit = self.real["f43"], self.real["f23"]
            self.conv._grid_replaces_numpy = self.real["grid"]
            self.small.gains = small_fits
        return sess


#: pause before each timed block: onnxruntime's workers spin ~30 ms after a run (an epoxy
#: block right after one took 1.3-2.7x its time alone: bench/README.md, session 37)
SETTLE_SECONDS = 0.05


def best_us(runs: dict[str, Callable[[], Any]], rounds: int, seconds: float) -> dict[str, float]:
    for run in runs.values():  # warm every runner (a session's first runs build its plans)
        run()
        run()
    start = time.perf_counter()
    next(iter(runs.values()))()
    reps = max(3, int(seconds / max(time.perf_counter() - start, 1e-6)))
    best = dict.fromkeys(runs, float("inf"))
    names = list(runs)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            time.sleep(SETTLE_SECONDS)  # the previous runner's spinning threads go to sleep
            t = time.perf_counter()
            for _ in range(reps):
                runs[name]()
            best[name] = min(best[name], (time.perf_counter() - t) / reps * 1e6)
    return best


def parse_layers(text: str) -> list[tuple[int, ...]]:
    return [tuple(int(v) for v in item.split(",")) for item in text.split(";") if item.strip()] if text else LAYERS


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--layers", default="", help='"n,c,h,m,k,s[,pad];..." (default: the session-28 table)')
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--seconds", type=float, default=0.02, help="time of one timed block")
    ap.add_argument("--path", choices=("implicit", "small"), default="implicit",
                    help="the path compared: the implicit GEMM or the small-layer kernel")
    args = ap.parse_args(argv)
    routes, variants = Routes(), Variants(args.path)
    print(f"threads {args.threads}, us (best of {args.rounds} alternated blocks)\n")
    print(f"| layer (n, c, h, m, k, s) | without {args.path} | {args.path} forced | now | onnxruntime | now / without "
          "| now / ort |")
    print("|---|---|---:|---|---:|---:|---:|")
    for layer in parse_layers(args.layers):
        data = conv_model(*layer)
        n, c, h = layer[:3]
        feeds = {"x": np.random.default_rng(0).standard_normal((n, c, h, h)).astype(np.float32)}
        sessions = {mode: variants.session(data, args.threads, mode, feeds) for mode in ("off", "forced", "now")}
        ort_options = ort.SessionOptions()
        ort_options.intra_op_num_threads = args.threads
        ort_options.inter_op_num_threads = 1
        oracle = ort.InferenceSession(data, ort_options, providers=["CPUExecutionProvider"])
        want = oracle.run(None, feeds)[0]
        diff = max(float(np.abs(s.run(None, feeds)[0] - want).max()) for s in sessions.values())
        runs: dict[str, Callable[[], Any]] = {m: (lambda s=s, f=feeds: s.run(None, f)) for m, s in sessions.items()}
        runs["ort"] = lambda o=oracle, f=feeds: o.run(None, f)
        took = best_us(runs, args.rounds, args.seconds)
        route = {mode: routes.of(runs[mode]) for mode in sessions}
        print(f"| {layer} | {took['off']:.1f} ({route['off']}) | {took['forced']:.1f} ({route['forced']}) | "
              f"{took['now']:.1f} ({route['now']}) | {took['ort']:.1f} | {took['now'] / took['off']:.2f} | "
              f"{took['now'] / took['ort']:.2f} |", flush=True)
        assert diff < 1e-3, f"{layer}: outputs differ from onnxruntime by {diff}"


if __name__ == "__main__":
    main()
