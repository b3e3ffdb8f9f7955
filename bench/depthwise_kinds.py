"""Depthwise layers on ep-cpu's kernels, one kind forced at a time: the data behind
``kernels_depthwise.kernel_kind`` (bench/README.md, "Session 50").

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/depthwise_kinds.py
    ... bench/depthwise_kinds.py --kernels 7 --channels 16,32 --maps 4,8 --batch 8

Per kernel size, channel count and output map (stride 1, pads kernel // 2, no activation,
float32, one thread), the best of ``--repeat`` timings of a prepared ``DepthwiseCall`` with its
kind forced to each of ``--kinds``; printed as the ratio of the first kind's time to the
second's (below 1: the first is faster), or the microseconds with ``--us``. Each kind's output
is checked against the last kind's first. Not a timed test: read ratios within one run.
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", default="3,5", help="kernel sizes (square)")
    ap.add_argument("--channels", default="8,16,32,64,128,256")
    ap.add_argument("--maps", default="4,7,8,14,16,28", help="output map sides")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--kinds", default="channels,grid", help="two of channels, grid, small")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--us", action="store_true", help="print both times (us) instead of the ratio")
    return ap.parse_args(argv)


def prepared(kind: str, n: int, c: int, side: int, k: int, seed: int = 0) -> tuple[object, np.ndarray]:
    """A prepared call of ``kind`` for an ``n x c x side x side`` layer of a ``k x k`` kernel."""
    from epoxy_ep_cpu.jit import kernels_depthwise

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    real = kernels_depthwise.kernel_kind
    kernels_depthwise.kernel_kind = lambda *a, **kw: kind
    try:
        call = kernels_depthwise.DepthwiseCall((n, c, side, side), np.dtype(np.float32), w, b, (k // 2, k // 2),
                                               (side, side), 0, 0.0, 0.0, 1)
    finally:
        kernels_depthwise.kernel_kind = real
    return call, rng.standard_normal((n, c, side, side)).astype(np.float32)


def time_us(call: object, x: np.ndarray, repeat: int) -> tuple[float, np.ndarray]:
    y = np.empty(call.out_shape, np.float32)  # type: ignore[attr-defined]
    call(x, None, y)  # type: ignore[operator]
    number = max(20, 2000 // x.shape[0])
    best = min(timeit.repeat(lambda: call(x, None, y), number=number, repeat=repeat))  # type: ignore[operator]
    return best / number * 1e6, y


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    kinds = args.kinds.split(",")
    maps = [int(m) for m in args.maps.split(",")]
    print(f"batch {args.batch}, 1 thread, {kinds[0]} / {kinds[1]}" + (" (us)" if args.us else " (time ratio)"))
    print("| kernel | channels | " + " | ".join(f"{m}x{m}" for m in maps) + " |")
    print("|---|---|" + "---|" * len(maps))
    for k in (int(v) for v in args.kernels.split(",")):
        for c in (int(v) for v in args.channels.split(",")):
            cells = []
            for side in maps:
                times, outputs = [], []
                for kind in kinds:
                    t, y = time_us(*prepared(kind, args.batch, c, side, k), args.repeat)
                    times.append(t)
                    outputs.append(y)
                np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-4, atol=1e-4)
                cells.append(f"{times[0]:.1f} / {times[1]:.1f}" if args.us else f"{times[0] / times[1]:.2f}")
            print(f"| {k}x{k} | {c} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
