"""Time ep-cpu's convolution paths on the 3x3 stride-1 layers of the bench models.

    /work/venv/bin/python bench/conv_paths.py                  # 1 BLAS thread
    /work/venv/bin/python bench/conv_paths.py --threads 2 --models resnet50,vgg19

For every distinct (C, M, H, W) 3x3 stride-1 group-1 convolution in the models (shapes from
ONNX shape inference), times each path ep-cpu has for it on random data: im2col + GEMM,
row-shift GEMMs, Winograd F(2x2, 3x3) and F(4x4, 3x3), prints the best of ``--repeat``
calls per path in ms, which path ``conv`` picks, and the relative error of each path
against float64 im2col. Used to set the selection thresholds in ``ops/conv.py``; a tuning
aid, not a benchmark against other runtimes.
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def layer_shapes(filter_spec: str | None) -> dict[tuple[int, int, int, int], list[str]]:
    import models
    import onnx
    from onnx import helper, shape_inference

    found: dict[tuple[int, int, int, int], list[str]] = {}
    for bm in models.select_models(filter_spec):
        if not bm.name.startswith("light_"):
            continue
        m = shape_inference.infer_shapes(onnx.load(str(bm.path)))
        dims = {
            v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)
        }
        for node in m.graph.node:
            if node.op_type != "Conv":
                continue
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            if list(attrs.get("kernel_shape", [])) != [3, 3] or attrs.get("group", 1) != 1:
                continue
            if list(attrs.get("strides", [1, 1])) != [1, 1] or list(attrs.get("dilations", [1, 1])) != [1, 1]:
                continue
            xs, ys = dims.get(node.input[0]), dims.get(node.output[0])
            if not xs or not ys or len(xs) != 4:
                continue
            key = (xs[1], ys[1], xs[2], xs[3])
            found.setdefault(key, []).append(bm.name.removeprefix("light_"))
    return found


def best_ms(fn, repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="light")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)

    import threadpoolctl

    from epoxy_ep_cpu.ops import _winograd_f43 as f43
    from epoxy_ep_cpu.ops import conv

    threadpoolctl.threadpool_limits(args.threads)
    rng = np.random.default_rng(0)
    print("| C | M | HxW | models | im2col | row-shift | F(2,3) | F(4,3) | picked | err F(2,3) | err F(4,3) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (c, m, h, w), names in sorted(layer_shapes(args.models).items()):
        x = rng.standard_normal((1, c, h, w), dtype=np.float32)
        wt = rng.standard_normal((m, c, 3, 3), dtype=np.float32)
        pads, out = [1, 1], [h, w]
        ref = conv.conv_nd(x.astype(np.float64), wt.astype(np.float64), 1, (1, 1), (1, 1), pads, pads, out)
        scale = float(np.abs(ref).max())
        u2, u4, rows = conv.winograd_weights(wt), f43.f43_weights(wt), conv.row_shift_weights(wt)
        paths = {
            "im2col": partial(conv.conv_nd, x, wt, 1, (1, 1), (1, 1), pads, pads, out),
            "row-shift": partial(conv.conv_row_shift, x, rows, (3, 3), pads, pads, out),
            "F(2,3)": partial(conv.conv_winograd, x, u2, pads, out),
            "F(4,3)": partial(f43.conv_f43, x, u4, pads, out),
        }
        times = {k: best_ms(fn, args.repeat) for k, fn in paths.items()}
        err2 = float(np.abs(paths["F(2,3)"]() - ref).max()) / scale
        err4 = float(np.abs(paths["F(4,3)"]() - ref).max()) / scale
        picked = conv.pick_path(c, m, (3, 3), out, True, np.dtype(np.float32))
        cells = " | ".join(f"**{t:.2f}**" if t == min(times.values()) else f"{t:.2f}" for t in times.values())
        print(
            f"| {c} | {m} | {h}x{w} | {','.join(sorted(set(names)))} | {cells} | {picked} | {err2:.1e} | {err4:.1e} |"
        )


if __name__ == "__main__":
    main()
