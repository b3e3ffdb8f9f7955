"""Time ep-cpu's convolution paths on the 3x3 stride-1 layers of the bench models.

    /work/venv/bin/python bench/conv_paths.py                  # 1 BLAS thread
    /work/venv/bin/python bench/conv_paths.py --threads 2 --models resnet50,vgg19

For every distinct (C, M, H, W) 3x3 stride-1 group-1 convolution in the models (shapes from
ONNX shape inference), times each path ep-cpu has for it on random data: im2col + GEMM,
row-shift GEMMs, Winograd F(2x2, 3x3) and F(4x4, 3x3), prints the best of ``--repeat``
calls per path in ms, which path ``conv`` picks, and the relative error of each path
against float64 im2col. Used to set the selection thresholds in ``ops/conv.py``; a tuning
aid, not a benchmark against other runtimes.

    /work/main/.venv/bin/python bench/conv_paths.py --jit --threads 1 --models shufflenet,squeezenet
    /work/main/.venv/bin/python bench/conv_paths.py --jit --models exporter     # the exporter CNNs at batch 1

``--jit`` times instead every distinct 2-D float Conv of the models (any group, stride,
dilation, pads >= 0; bias on) on ep-cpu's numpy paths (what the jit-off provider runs for it)
and on the jit tier's compiled direct kernel (``jit/kernels_conv.py``), and prints which one
``use_jit`` routes the layer to: the data behind that rule.
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


def all_conv_shapes(filter_spec: str | None) -> dict[tuple, list[str]]:
    """(x shape, w shape, group, strides, dilations, pads) -> model names, for every 2-D
    Conv (and FusedConv) with a static input shape; ``exporter`` reads the exporter set's
    batch-1 fixed-dims twins (built by exporter_models.py)."""
    import onnx
    from onnx import helper, shape_inference

    if filter_spec == "exporter":
        from models import CACHE_DIR

        paths = sorted(CACHE_DIR.glob("exporter-torch*/ts-*-b1-fixed.onnx"))
        named = [(p.name.removesuffix("-b1-fixed.onnx"), p) for p in paths]
    else:
        import models

        named = [(bm.name.removeprefix("light_"), bm.path) for bm in models.select_models(filter_spec)
                 if bm.name.startswith("light_")]
    found: dict[tuple, list[str]] = {}
    for name, path in named:
        m = shape_inference.infer_shapes(onnx.load(str(path)))
        dims = {
            v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)
        }
        dims.update({i.name: list(i.dims) for i in m.graph.initializer})
        for node in m.graph.node:
            if node.op_type not in ("Conv", "FusedConv"):
                continue
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            xs, ws = dims.get(node.input[0]), dims.get(node.input[1])
            if not xs or not ws or len(xs) != 4 or 0 in xs or attrs.get("auto_pad", b"NOTSET") != b"NOTSET":
                continue
            key = (tuple(xs), tuple(ws), int(attrs.get("group", 1)), tuple(attrs.get("strides", (1, 1))),
                   tuple(attrs.get("dilations", (1, 1))), tuple(attrs.get("pads", (0, 0, 0, 0))))
            found.setdefault(key, []).append(name)
    return found


def jit_table(args: argparse.Namespace) -> None:
    """Numpy paths against the compiled direct kernel, per distinct conv layer."""
    from epoxy_ep_cpu.jit import availability

    assert availability().available, availability().describe()  # configures numba before its import
    from epoxy_ep_cpu.jit import kernels_conv
    from epoxy_ep_cpu.ops import conv
    from epoxy_ep_cpu.ops._conv_util import resolve_pads

    rng = np.random.default_rng(0)
    print(f"{args.threads} thread(s); ms, best of {args.repeat}")
    print("| x | w | group | stride | dil | models | numpy | jit | jit/numpy | routed |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (xs, ws, group, strides, dilations, pads), names in sorted(all_conv_shapes(args.models).items()):
        x = rng.standard_normal(xs, dtype=np.float32)
        wt = rng.standard_normal(ws, dtype=np.float32)
        b = rng.standard_normal(ws[0], dtype=np.float32)
        out_sp, begin, end, _ = resolve_pads(xs[2:], ws[2:], strides, dilations, pads, "NOTSET")
        if min(begin) < 0 or min(end) < 0:
            continue
        pk = conv._ConvWeights(wt, b, np.dtype(np.float32), group)
        ref = conv._numpy_forward(x, pk, group, strides, dilations, begin, end, out_sp, True, ("F(4,3)", "F(2,3)"))
        got = kernels_conv.run_conv2d(x, pk.w, pk.bias_or_zeros(), None, strides, dilations, begin, out_sp, group,
                                      0, 0.0, 0.0, args.threads)
        err = float(np.abs(got - ref).max() / max(1e-30, np.abs(ref).max()))
        assert err < 1e-4, (xs, ws, err)
        t_np = best_ms(partial(conv._numpy_forward, x, pk, group, strides, dilations, begin, end, out_sp, True,
                               ("F(4,3)", "F(2,3)")), args.repeat)
        t_jit = best_ms(partial(kernels_conv.run_conv2d, x, pk.w, pk.bias_or_zeros(), None, strides, dilations,
                                begin, out_sp, group, 0, 0.0, 0.0, args.threads), args.repeat)
        routed = "jit" if conv.use_jit(xs[1], ws[0], group, tuple(ws[2:]), strides, begin, end, out_sp,
                                       np.dtype(np.float32)) else "numpy"
        print(f"| {xs} | {ws} | {group} | {strides[0]} | {dilations[0]} | {','.join(sorted(set(names)))[:40]} "
              f"| {t_np:.3f} | {t_jit:.3f} | {t_jit / t_np:.2f} | {routed} |")


def jit_grain(args: argparse.Namespace) -> None:
    """The compiled direct kernel on 1 and 2 threads, each call right after a BLAS call (as in
    a model): where a second thread starts to pay (``kernels_conv.MAC_GRAIN``)."""
    from epoxy_ep_cpu.jit import availability

    assert availability().available, availability().describe()
    from epoxy_ep_cpu.jit import kernels_conv

    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 256), dtype=np.float32)
    kernels_conv.MAC_GRAIN = 1  # the thread count asked for is the one used
    print("| channels | HxW | group | M multiply-adds | 1 thread ms | 2 threads ms |")
    print("|---|---|---|---|---|---|")
    for c, hw, group in ((32, 28, 32), (64, 56, 64), (128, 56, 128), (96, 112, 96), (16, 16, 1), (32, 28, 1)):
        x = rng.standard_normal((1, c, hw, hw), dtype=np.float32)
        w = rng.standard_normal((c, c // group, 3, 3), dtype=np.float32)
        b = np.zeros(c, np.float32)
        times = []
        for n in (1, 2):
            run = partial(kernels_conv.run_conv2d, x, w, b, None, (1, 1), (1, 1), [1, 1], [hw, hw], group, 0, 0.0,
                          0.0, n)
            best = float("inf")
            for _ in range(args.repeat + 1):
                a @ a
                t0 = time.perf_counter()
                run()
                best = min(best, time.perf_counter() - t0)
            times.append(best * 1e3)
        print(f"| {c} | {hw}x{hw} | {group} | {w.size * hw * hw / 1e6:.2f} | {times[0]:.3f} | {times[1]:.3f} |")


def winograd_table(args: argparse.Namespace) -> None:
    """The jit tier's GEMM paths on every 3x3 stride-1 layer: the grid im2col GEMM
    (``jit/kernels_conv_gemm.py``) against F(4x4, 3x3) and F(2x2, 3x3) with compiled
    transforms (``jit/kernels_winograd.py``), each call right after a BLAS matmul as in a
    model, bias and ReLU fused; and what ``_Jit.route`` picks at this thread count."""
    from epoxy_ep_cpu.jit import availability

    assert availability().available, availability().describe()
    from epoxy_ep_cpu.jit import kernels_conv_gemm, kernels_winograd
    from epoxy_ep_cpu.ops import _winograd_f43 as f43
    from epoxy_ep_cpu.ops import conv

    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 512), dtype=np.float32)
    bm = rng.standard_normal((512, 512), dtype=np.float32)
    f32 = np.dtype(np.float32)
    fast = conv._Jit(None, args.threads, None, kernels_conv_gemm, ("F(4,3)", "F(2,3)"), kernels_winograd)
    print(f"{args.threads} thread(s); ms, best of {args.repeat}, each call after a 256x512x512 matmul")
    print("| C | M | HxW | models | grid | F(4,3) jit | F(2,3) jit | numpy pick | routed |")
    print("|---|---|---|---|---|---|---|---|---|")
    shapes = layer_shapes(args.models)
    if args.shapes:  # C,M,H triples separated by ";"
        shapes = {tuple(int(v) for v in (t.split(",") + [t.split(",")[-1]])): ["--shapes"]
                  for t in args.shapes.split(";")}
    for (c, m, h, w), names in sorted(shapes.items()):
        x = rng.standard_normal((1, c, h, w), dtype=np.float32)
        wt = rng.standard_normal((m, c, 3, 3), dtype=np.float32)
        b = rng.standard_normal(m, dtype=np.float32)
        grid = kernels_conv_gemm.GridConvCall(x.shape, f32, wt, b, (1, 1), (1, 1), [1, 1], [h, w], 1, 0.0, 0.0,
                                              args.threads)
        wino = kernels_winograd.WinogradCall(x.shape, f32, f43.f43_weights(wt), b, [1, 1], [h, w], 1, 0.0, 0.0,
                                             args.threads)
        wino23 = kernels_winograd.WinogradCall(x.shape, f32, conv.winograd_weights(wt), b, [1, 1], [h, w], 1, 0.0,
                                               0.0, args.threads, tile=2)
        ref = grid(x, None)
        for call in (wino, wino23):
            err = float(np.abs(call(x, None) - ref).max() / max(1e-30, np.abs(ref).max()))
            assert err < 1e-4, (c, m, h, err)
        times = []
        for call in (grid, wino, wino23):
            best = float("inf")
            for _ in range(args.repeat + 1):
                a @ bm
                t0 = time.perf_counter()
                call(x, None)
                best = min(best, time.perf_counter() - t0)
            times.append(best * 1e3)
        pk = conv._ConvWeights(wt, b, f32)
        picked = conv.pick_path(c, m, (3, 3), [h, w], True, f32)
        routed = fast.route(x.shape, f32, pk, 1, (1, 1), (1, 1), [1, 1], [1, 1], [h, w])
        cells = " | ".join(f"**{t:.3f}**" if t == min(times) else f"{t:.3f}" for t in times)
        print(f"| {c} | {m} | {h}x{w} | {','.join(sorted(set(names)))} | {cells} | {picked} | {routed} |")


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
    ap.add_argument("--jit", action="store_true", help="numpy paths vs the compiled direct kernel, every conv")
    ap.add_argument("--jit-grain", action="store_true", help="the compiled direct kernel on 1 and 2 threads")
    ap.add_argument("--winograd", action="store_true", help="grid GEMM vs compiled F(4,3), 3x3 stride-1 layers")
    ap.add_argument("--shapes", default="", help='with --winograd: layers "C,M,H;C,M,H" instead of the models\'')
    args = ap.parse_args(argv)

    import threadpoolctl

    from epoxy_ep_cpu.ops import _winograd_f43 as f43
    from epoxy_ep_cpu.ops import conv

    threadpoolctl.threadpool_limits(args.threads)
    if args.jit:
        return jit_table(args)
    if args.jit_grain:
        return jit_grain(args)
    if args.winograd:
        return winograd_table(args)
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
