"""Tree-ensemble throughput: a 100-tree, depth-8 forest on 10,000 rows, epoxy against onnxruntime.

    .venv/bin/python bench/ml_trees.py                         # 1 and 2 threads
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/ml_trees.py   # the measurement of record
    .venv/bin/python bench/ml_trees.py --source skl2onnx       # a fitted RandomForestRegressor instead

The model is one ``ai.onnx.ml`` TreeEnsembleRegressor (ml opset 1, the form skl2onnx and
onnxmltools write), built with ``onnx.helper`` from a random forest structure with a fixed
seed: every node down to depth 8 splits (``BRANCH_LEQ`` on a random feature of 20, random
threshold, NaN going left for half of the nodes) except that below depth 2 a node becomes a
leaf with probability 0.1; each leaf holds one weight. ``--source skl2onnx`` fits
``sklearn.ensemble.RandomForestRegressor(n_estimators=100, max_depth=8)`` on random data and
converts it (needs scikit-learn and skl2onnx; optional). Input: ``[10000, 20]`` float32
N(0, 1), ``--nan`` of the values NaN (default 0).

Timing reuses ``compare.time_interleaved``: runtimes interleaved in blocks, the first call of
each block dropped, order rotated, a short settle before each block. Reported: median ms per
runtime and the epoxy/onnxruntime ratio, with the largest output difference.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import first_line, limit_thread_env, loadavg, log, machine_note, time_interleaved


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--nan", type=float, default=0.0, help="fraction of input values set to NaN")
    ap.add_argument("--source", choices=("helper", "skl2onnx"), default="helper")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--block", type=int, default=3)
    ap.add_argument("--budget", type=float, default=4.0)
    ap.add_argument("--settle", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.thread_list = [int(t) for t in args.threads.split(",") if t.strip()]
    return args


def build_forest(n_trees: int, depth: int, n_features: int, seed: int):
    """A TreeEnsembleRegressor with a random forest's shape (fixed seed)."""
    import numpy as np
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    a: dict[str, list] = {k: [] for k in (
        "nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
        "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true",
        "target_treeids", "target_nodeids", "target_ids", "target_weights")}
    for tree in range(n_trees):
        queue = [(0, 0)]
        next_id = 1
        while queue:
            node, level = queue.pop(0)
            a["nodes_treeids"].append(tree)
            a["nodes_nodeids"].append(node)
            if level < depth and (level < 2 or rng.random() > 0.1):
                a["nodes_featureids"].append(int(rng.integers(n_features)))
                a["nodes_modes"].append("BRANCH_LEQ")
                a["nodes_values"].append(float(rng.normal(0.0, 0.7)))
                a["nodes_truenodeids"].append(next_id)
                a["nodes_falsenodeids"].append(next_id + 1)
                a["nodes_missing_value_tracks_true"].append(int(rng.random() < 0.5))
                queue += [(next_id, level + 1), (next_id + 1, level + 1)]
                next_id += 2
            else:
                a["nodes_featureids"].append(0)
                a["nodes_modes"].append("LEAF")
                a["nodes_values"].append(0.0)
                a["nodes_truenodeids"].append(0)
                a["nodes_falsenodeids"].append(0)
                a["nodes_missing_value_tracks_true"].append(0)
                a["target_treeids"].append(tree)
                a["target_nodeids"].append(node)
                a["target_ids"].append(0)
                a["target_weights"].append(float(rng.normal()))
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml",
                            n_targets=1, aggregate_function="SUM", **a)
    graph = helper.make_graph(
        [node], "forest", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, n_features])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 8
    return model


def build_sklearn(n_trees: int, depth: int, n_features: int, seed: int):
    """A fitted RandomForestRegressor converted by skl2onnx (optional dependencies)."""
    import numpy as np
    from skl2onnx import to_onnx
    from sklearn.ensemble import RandomForestRegressor

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(5000, n_features)).astype(np.float32)
    y = np.sin(x[:, 0]) + x[:, 1] * x[:, 2] + 0.1 * rng.normal(size=5000)
    forest = RandomForestRegressor(n_estimators=n_trees, max_depth=depth, random_state=seed).fit(x, y)
    return to_onnx(forest, x[:1], target_opset={"": 17, "ai.onnx.ml": 1})


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    limit_thread_env(max(args.thread_list))

    import warnings

    import numpy as np

    warnings.filterwarnings("ignore", category=RuntimeWarning, module="epoxy")
    info = machine_note()
    print(f"# tree ensemble benchmark — {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"cpu: {info.get('cpu', '?')} ×{info['cpus']}; " +
          ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v))
    print(f"load average at start: {loadavg()}")
    try:
        model = (build_sklearn if args.source == "skl2onnx" else build_forest)(
            args.trees, args.depth, args.features, args.seed)
    except ImportError as exc:
        print(f"cannot build the {args.source} model: {first_line(exc)}")
        return 1
    attrs = {a.name: a for a in model.graph.node[-1].attribute}
    n_nodes = len(attrs["nodes_nodeids"].ints)
    rng = np.random.default_rng(args.seed + 1)
    x = rng.normal(size=(args.rows, args.features)).astype(np.float32)
    if args.nan:
        x[rng.random(x.shape) < args.nan] = np.nan
    feeds = {model.graph.input[0].name: x}
    print(f"model: {args.source}, {args.trees} trees, depth {args.depth}, {n_nodes} nodes; "
          f"input [{args.rows}, {args.features}] float32, NaN fraction {args.nan}")
    data = model.SerializeToString()

    import onnxruntime as ort
    from threadpoolctl import threadpool_limits

    import epoxy

    print()
    print("| threads | epoxy ms | onnxruntime ms | epoxy/ort | max abs diff |")
    print("|---|---|---|---|---|")
    for threads in args.thread_list:
        log(f"threads {threads}")
        with threadpool_limits(threads):
            sess = epoxy.InferenceSession(data, providers=["cpu"],
                                          sess_options=epoxy.SessionOptions(intra_op_num_threads=threads))
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            so.log_severity_level = 3
            osess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
            fns = {"epoxy": lambda f, s=sess: s.run(None, f), "onnxruntime": lambda f, s=osess: s.run(None, f)}
            got, ref = fns["epoxy"](feeds), fns["onnxruntime"](feeds)
            diff = max(float(np.max(np.abs(g.astype(np.float64) - r))) for g, r in zip(got, ref))
            medians, _, errors = time_interleaved(fns, feeds, runs=args.runs, block=args.block, warmup=2,
                                                  budget=args.budget, min_runs=3, settle=args.settle)
        if errors:
            print(f"| {threads} | errors: {errors} | | | |")
            continue
        e, o = medians["epoxy"] * 1e3, medians["onnxruntime"] * 1e3
        print(f"| {threads} | {e:.1f} | {o:.1f} | {e / o:.2f} | {diff:.1e} |")
    print(f"\nload average at end: {loadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
