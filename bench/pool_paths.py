"""Windowed MaxPool / AveragePool of the bench CNNs, one node at a time: ep-cpu's compiled
kernels (jit on), its numpy path (jit off) and onnxruntime, on the same input.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/pool_paths.py --threads 1
    .venv/bin/python bench/pool_paths.py --threads 2 --calls 400

Each row is one pool shape taken from the light models (squeezenet, resnet50, shufflenet,
inception, vgg, densenet); times are the minimum over ``--calls`` runs of a one-node session
(ms). ``same`` says whether the jit output equals the numpy path's (values, NaN where NaN)
and ``~ort`` whether it is within 1e-6 of onnxruntime's. Not a timed test: read ratios
within one run (bench/README.md)."""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

#: (op, channels, image side, window, stride, pads, ceil_mode): the light models' pools
SHAPES = [
    ("MaxPool", 96, 109, 3, 2, [0, 0, 0, 0], 1),  # squeezenet 1.0
    ("MaxPool", 64, 111, 3, 2, [0, 0, 0, 0], 1),  # squeezenet 1.1
    ("MaxPool", 128, 55, 3, 2, [0, 0, 0, 0], 1),
    ("MaxPool", 256, 27, 3, 2, [0, 0, 0, 0], 1),
    ("MaxPool", 64, 112, 3, 2, [1, 1, 1, 1], 0),  # resnet50, densenet121
    ("MaxPool", 24, 112, 3, 2, [1, 1, 1, 1], 0),  # shufflenet
    ("MaxPool", 192, 56, 3, 2, [0, 0, 1, 1], 0),  # inception_v2
    ("MaxPool", 64, 224, 2, 2, [0, 0, 0, 0], 0),  # vgg19
    ("MaxPool", 512, 28, 2, 2, [0, 0, 0, 0], 0),
    ("AveragePool", 136, 28, 3, 2, [1, 1, 1, 1], 0),  # shufflenet
    ("AveragePool", 272, 14, 3, 2, [1, 1, 1, 1], 0),
    ("AveragePool", 128, 56, 2, 2, [0, 0, 0, 0], 0),  # densenet121 transitions
    ("AveragePool", 192, 28, 3, 1, [1, 1, 1, 1], 0),  # inception_v2 branch pools
    ("AveragePool", 576, 14, 3, 1, [1, 1, 1, 1], 0),
    ("AveragePool", 1024, 7, 3, 1, [1, 1, 1, 1], 0),
    ("MaxPool", 1024, 7, 3, 1, [1, 1, 1, 1], 0),
    ("MaxPool", 320, 28, 3, 2, [0, 0, 1, 1], 0),
    ("MaxPool", 576, 14, 3, 2, [0, 0, 1, 1], 0),
    ("MaxPool", 192, 27, 3, 1, [1, 1, 1, 1], 0),  # inception_v1 branch pools
    ("MaxPool", 512, 13, 3, 1, [1, 1, 1, 1], 0),
    ("MaxPool", 832, 6, 3, 1, [1, 1, 1, 1], 0),
    ("AveragePool", 2048, 7, 7, 1, [0, 0, 0, 0], 0),  # resnet50's head
]


def _model(op: str, shape: tuple[int, ...], k: int, s: int, pads: list[int], ceil: int) -> bytes:
    from onnx import TensorProto, helper

    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[k, k], strides=[s, s], pads=pads, ceil_mode=ceil)
    graph = helper.make_graph([node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _best(fn, calls: int) -> float:
    for _ in range(10):
        fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")  # the one-node models leave the output shape out
    import onnxruntime as ort

    import epoxy

    rng = np.random.default_rng(0)
    print(f"threads {args.threads}, min of {args.calls} calls, ms")
    print("| pool | input | window | jit | numpy | onnxruntime | jit / ort | same | ~ort |")
    print("|---|---|---|---:|---:|---:|---:|---|---|")
    for op, c, side, k, s, pads, ceil in SHAPES:
        shape = (1, c, side, side)
        x = rng.standard_normal(shape, dtype=np.float32)
        model = _model(op, shape, k, s, pads, ceil)
        eo = epoxy.SessionOptions()
        eo.intra_op_num_threads = args.threads
        on = epoxy.InferenceSession(model, eo, providers=[("cpu", {"jit": True})])
        off = epoxy.InferenceSession(model, eo, providers=[("cpu", {"jit": False})])
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        ref = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        feeds = {"x": x}
        a, b, r = on.run(None, feeds)[0], off.run(None, feeds)[0], ref.run(None, feeds)[0]
        t_on, t_off, t_ort = (_best(lambda sess=sess, feeds=feeds: sess.run(None, feeds), args.calls)
                              for sess in (on, off, ref))
        window = f"{k}x{k} s{s} pads {pads}" + (" ceil" if ceil else "")
        print(f"| {op} | {list(shape[1:])} | {window} | {t_on:.3f} | {t_off:.3f} | {t_ort:.3f} | {t_on / t_ort:.2f} "
              f"| {np.array_equal(a, b, equal_nan=True)} | {np.allclose(a, r, atol=1e-6)} |")


if __name__ == "__main__":
    main()
