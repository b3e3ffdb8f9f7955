"""One dense layer at a few rows: epoxy's cpu provider against onnxruntime and numpy's ``x @ W``.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/dense_rows.py
    ... bench/dense_rows.py --k 16384 --n 1024 --threads 2 --rows 1,2,4,16

A one-node ``MatMul (M, K) @ W (K, N)`` model with a constant W and a dynamic first axis, timed in
one process at each M (best of 5 rounds of ~0.2 s, ms). ``numpy`` is ``x @ W`` on the same BLAS
threads: what epoxy ran for every M before the few-rows GEMM (``jit/kernels_sgemm.py``), which
takes 2-32 rows. The ratio column is epoxy / onnxruntime.

``--cold``: before every run a 64 MB buffer is written, so the weights come from L3 (or memory)
as inside a model, where the layers between evict them; the time is then the first quartile of
30 runs (bench/README.md, session 41: the few-rows GEMM's prefetch of its next weight block).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_limits

import epoxy


def best_ms(fn: Callable[[], object], rounds: int = 5, seconds: float = 0.2) -> float:
    fn()
    best = float("inf")
    for _ in range(rounds):
        start, count = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            fn()
            count += 1
        best = min(best, (time.perf_counter() - start) / count)
    return best * 1e3


_TOUCH: list[np.ndarray] = []


def cold_ms(fn: Callable[[], object], runs: int = 30) -> float:
    """First quartile of ``runs`` calls of ``fn``, each after writing 64 MB (caches evicted)."""
    if not _TOUCH:
        _TOUCH.append(np.zeros(16 << 20, dtype=np.float32))
    fn()
    times = []
    for _ in range(runs):
        _TOUCH[0] += 1.0
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[runs // 4] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rows", default="1,2,4,8,16,32,64,128")
    parser.add_argument("--cold", action="store_true", help="weights evicted before every run (see above)")
    args = parser.parse_args()
    timed = cold_ms if args.cold else best_ms
    k, n, threads = args.k, args.n, args.threads
    w = (np.random.default_rng(0).standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "dense",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", n])],
                              [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "dense.onnx")
        onnx.save(model, path)
        ort_options = ort.SessionOptions()
        ort_options.intra_op_num_threads = threads
        reference = ort.InferenceSession(path, ort_options, providers=["CPUExecutionProvider"])
        options = epoxy.SessionOptions()
        options.intra_op_num_threads = threads
        session = epoxy.InferenceSession(path, options, providers=["cpu"])
        print(f"(M, {k}) @ ({k}, {n}), {threads} thread(s), {'cold, first quartile' if args.cold else 'best'} ms")
        print("| M | epoxy | onnxruntime | numpy | epoxy / onnxruntime |\n|---:|---:|---:|---:|---:|")
        for m in (int(r) for r in args.rows.split(",")):
            x = np.random.default_rng(m).standard_normal((m, k)).astype(np.float32)
            ours = timed(lambda x=x: session.run(None, {"x": x}))
            theirs = timed(lambda x=x: reference.run(None, {"x": x}))
            with threadpool_limits(threads):
                plain = timed(lambda x=x: x @ w)
            print(f"| {m} | {ours:.3f} | {theirs:.3f} | {plain:.3f} | {ours / theirs:.2f} |")


if __name__ == "__main__":
    main()
