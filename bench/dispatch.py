"""Per-node dispatch overhead: a chain of N tiny ``Add`` nodes ([1,16] float32).

    /work/venv/bin/python bench/dispatch.py                 # 1000 nodes, 1 thread
    /work/venv/bin/python bench/dispatch.py --nodes 2000 --runs 30 --no-reference

Each node adds a constant [1,16] initializer to the previous result, so the arithmetic is
negligible and the time per node is what a runtime spends deciding, fetching, calling and
storing. Reported: median µs per node for epoxy (cpu provider), onnxruntime (CPU EP, 1
thread), a bare Python loop calling ``np.add`` (the floor for any numpy-per-node design), and
onnx.reference (the pure-Python interpreter; ``--no-reference`` skips it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

SHAPE = (1, 16)


def build_chain(n_nodes: int, opset: int = 17):
    from onnx import TensorProto, helper, numpy_helper

    const = np.linspace(-1.0, 1.0, num=SHAPE[1], dtype=np.float32).reshape(SHAPE) * 1e-3
    nodes = []
    prev = "x"
    for i in range(n_nodes):
        out = "y" if i == n_nodes - 1 else f"t{i}"
        nodes.append(helper.make_node("Add", [prev, "c"], [out], name=f"add{i}"))
        prev = out
    graph = helper.make_graph(
        nodes,
        "add_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(SHAPE))],
        initializer=[numpy_helper.from_array(const, "c")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model, const


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def median_seconds(fn, runs: int, warmup: int = 3) -> tuple[float, float]:
    import gc

    for _ in range(warmup):
        fn()
    gc.collect()
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), min(samples)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--no-reference", action="store_true", help="skip onnx.reference")
    args = ap.parse_args(argv)

    import warnings

    warnings.filterwarnings("ignore", category=RuntimeWarning, module="epoxy")
    from threadpoolctl import threadpool_limits

    model, const = build_chain(args.nodes)
    data = model.SerializeToString()
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    expected = x.copy()
    for _ in range(args.nodes):
        expected = np.add(expected, const)

    rows: list[tuple[str, float | None, float | None, str]] = []

    def record(label, make_fn):
        try:
            fn, check = make_fn()
            got = check()
            diff = float(np.abs(np.asarray(got) - expected).max())
            med, best = median_seconds(fn, args.runs)
            rows.append((label, med, best, f"max|Δ| {diff:.1e}"))
        except Exception as exc:
            rows.append((label, None, None, first_line(exc)))

    def epoxy_fn(level):
        def make():
            import epoxy

            opts = epoxy.SessionOptions(graph_optimization_level=level, intra_op_num_threads=1)
            sess = epoxy.InferenceSession(data, providers=["cpu"], sess_options=opts)
            feeds = {"x": x}
            return (lambda: sess.run(None, feeds)), (lambda: sess.run(None, feeds)[0])

        return make

    def ort_make():
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        feeds = {"x": x}
        return (lambda: sess.run(None, feeds)), (lambda: sess.run(None, feeds)[0])

    def numpy_make():
        n = args.nodes

        def loop():
            y = x
            for _ in range(n):
                y = np.add(y, const)
            return y

        return loop, loop

    def reference_make():
        from onnx.reference import ReferenceEvaluator

        ref = ReferenceEvaluator(model)
        feeds = {"x": x}
        return (lambda: ref.run(None, feeds)), (lambda: ref.run(None, feeds)[0])

    with threadpool_limits(limits=1):
        record("epoxy (cpu, opt basic)", epoxy_fn("basic"))
        record("epoxy (cpu, opt disable)", epoxy_fn("disable"))
        record("onnxruntime (1 thread)", ort_make)
        record("python loop of np.add", numpy_make)
        if not args.no_reference:
            record("onnx.reference", reference_make)

    print(f"### Dispatch: chain of {args.nodes} Add nodes, [1,16] float32, median of {args.runs} calls")
    print("| runner | µs per node (median) | µs per node (min) | ms per call | check |")
    print("|---|---|---|---|---|")
    for label, med, best, note in rows:
        if med is None:
            print(f"| {label} | FAIL | - | - | {note} |")
        else:
            n = args.nodes
            print(f"| {label} | {med / n * 1e6:.2f} | {best / n * 1e6:.2f} | {med * 1e3:.2f} | {note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
