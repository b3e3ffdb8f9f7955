"""``epoxy quantize --mode auto`` never slower than fp32 (issue #19), checked on the bench models.

For each model and provider set: the fp32 model (``quantization.fp32_model``: random weights for
the light models) goes through ``quantize_model(mode="auto")`` with seeded random calibration
images; the model auto keeps (a quantized one, or fp32 unchanged) is written, loaded on epoxy and
on onnxruntime (the tool's promise: every model it writes loads in both), and timed against the
fp32 model interleaved on the same providers, independently of auto's own timing. A ratio above
1.0 beyond the noise is a failure of auto's rule.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/quantize_auto.py \\
        --models squeezenet,resnet50,shufflenet --providers cpu,openvino+cpu --threads 2
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import first_line, log, time_interleaved  # noqa: E402
from models import select_models  # noqa: E402
from quantization import fp32_model  # noqa: E402


def _session(path: Path, providers: list[str], threads: int) -> Any:
    import epoxy

    # ep-openvino's default precision is f32 (this CPU would pick bf16): the same as auto measured
    options = [{"num_threads": threads} if p == "openvino" else {} for p in providers]
    return epoxy.InferenceSession(str(path), sess_options=epoxy.SessionOptions(intra_op_num_threads=threads),
                                  providers=providers, provider_options=options)


def _loads_on_onnxruntime(path: Path, feeds: dict[str, np.ndarray]) -> str:
    import onnxruntime as ort

    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
        return "yes"
    except Exception as exc:  # the row says why; the run goes on
        return f"NO: {first_line(exc)}"


def bench(bm: Any, providers: list[str], work: Path, args: argparse.Namespace) -> dict[str, Any]:
    import onnx

    from epoxy.quantization.tool import quantize_model

    rng = np.random.default_rng(args.seed)
    calib = [bm.make_feeds(rng) for _ in range(args.calib)]
    fp32 = fp32_model(bm)
    fp32_path = work / f"{bm.name}.fp32.onnx"
    onnx.save(fp32, str(fp32_path))
    log(f"{bm.name} on {'+'.join(providers)}: quantize --mode auto")
    model, report = quantize_model(fp32_path, mode="auto", calibration=calib, providers=providers,
                                   max_rel_error=args.max_rel_error)
    chosen = work / f"{bm.name}.{'-'.join(providers)}.auto.onnx"
    onnx.save(model, str(chosen))
    feeds = calib[-1]
    row: dict[str, Any] = {"model": bm.name, "providers": "+".join(providers), "auto": report.mode,
                           "ort_loads": _loads_on_onnxruntime(chosen, feeds)}
    fns = {}
    for kind, path in (("fp32", fp32_path), ("auto", chosen)):
        sess = _session(path, providers, args.threads)
        fns[kind] = lambda f, s=sess: s.run(None, f)
    medians, _, errors = time_interleaved(fns, feeds, runs=args.runs, block=3, warmup=2, budget=args.budget,
                                          min_runs=3, settle=0.2)
    row.update({f"{k}_ms": v * 1e3 for k, v in medians.items()}, errors=errors)
    if "fp32" in medians and "auto" in medians:
        row["ratio"] = medians["auto"] / medians["fp32"]
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="squeezenet,shufflenet,resnet50", help="comma-separated filter")
    ap.add_argument("--providers", default="cpu,openvino+cpu", help="comma-separated provider sets, '+' inside one")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calib", type=int, default=6)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--budget", type=float, default=3.0)
    ap.add_argument("--max-rel-error", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for bm in select_models(args.models):
            for spec in args.providers.split(","):
                try:
                    rows.append(bench(bm, spec.split("+"), Path(tmp), args))
                except Exception as exc:  # one model's failure is a row
                    rows.append({"model": bm.name, "providers": spec, "auto": f"error: {first_line(exc)}"})
    print("| model | providers | auto kept | loads on onnxruntime | fp32 ms | auto ms | auto / fp32 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ms = [f"{r[k]:.2f}" if k in r else "-" for k in ("fp32_ms", "auto_ms")]
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else "-"
        cells = [r["model"], r["providers"], r["auto"], r.get("ort_loads", "-"), *ms, ratio]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
