"""Peak RSS of load + first run, session-creation time and the first run's time: epoxy vs onnxruntime.

Creation is load + optimize + partition + plan (imports timed separately: onnx_ir pulls
in sympy, ~0.15 s, which is not session creation). The first run is timed too: in a fresh
process it loads the compiled kernels a model uses from the kernel cache (numba's start and its
cached kernels: ~0.4 s of squeezenet's first result; bench/README.md, session 40), so creation
plus first run is what a new process waits for its first result.

Each measurement runs in a fresh process (peak RSS is per process), alternating runtimes,
and reports the median of ``--repeat`` processes and the ratio epoxy / onnxruntime.

    python bench/memory.py --models resnet50,bert --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

CHILD = r"""
import json, resource, sys, time
import numpy as np
sys.path.insert(0, {bench!r})
from models import select_models
runtime, name, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
model = select_models(name)[0]
feeds = model.make_feeds(np.random.default_rng(0))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
if runtime == "epoxy":
    import epoxy
    from epoxy.plugins import default_registry
    default_registry()
else:
    import onnxruntime as ort
imported = time.perf_counter()
if runtime == "epoxy":
    sess = epoxy.InferenceSession(str(model.path), providers=["cpu"],
                                  sess_options=epoxy.SessionOptions(intra_op_num_threads=threads))
else:
    so = ort.SessionOptions(); so.intra_op_num_threads = threads; so.log_severity_level = 3
    sess = ort.InferenceSession(str(model.path), so, providers=["CPUExecutionProvider"])
created = time.perf_counter() - imported
sess.run(None, feeds)
first_run = time.perf_counter() - imported - created
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"create_s": created, "first_run_s": first_run, "import_s": imported - start,
                  "peak_mb": peak / 1024, "import_base_mb": base / 1024}}))
"""


def measure(runtime: str, model: str, threads: int) -> dict[str, float]:
    code = CHILD.format(bench=str(Path(__file__).resolve().parent))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads)}
    # an installed package has its bytecode compiled (pip does it at install time); an
    # editable checkout under PYTHONDONTWRITEBYTECODE=1 would recompile every module in
    # every child (~0.1-0.25 s of "creation" that no user pays)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run([sys.executable, "-c", code, runtime, model, str(threads)], capture_output=True,
                         text=True, env=env, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,bert")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from models import ensure_bert

    names = [n.strip() for n in args.models.split(",") if n.strip()]
    if any("bert" in n for n in names):
        ensure_bert()
    print(
        "| model | epoxy peak MB | ort peak MB | RSS ratio | epoxy create s | ort create s | create ratio "
        "| first run s epoxy / ort | create + first run ratio | import s epoxy / ort |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        samples: dict[str, list[dict[str, float]]] = {"epoxy": [], "onnxruntime": []}
        for runtime in samples:  # warm-up child: writes bytecode, fills the page cache
            measure(runtime, name, args.threads)
        for _ in range(args.repeat):
            for runtime in samples:
                samples[runtime].append(measure(runtime, name, args.threads))
        med = {rt: {k: statistics.median(s[k] for s in v) for k in v[0]} for rt, v in samples.items()}
        e, o = med["epoxy"], med["onnxruntime"]
        print(f"| {name} | {e['peak_mb']:.0f} | {o['peak_mb']:.0f} | {e['peak_mb'] / o['peak_mb']:.2f} | "
              f"{e['create_s']:.2f} | {o['create_s']:.2f} | {e['create_s'] / o['create_s']:.2f} | "
              f"{e['first_run_s']:.2f} / {o['first_run_s']:.2f} | "
              f"{(e['create_s'] + e['first_run_s']) / (o['create_s'] + o['first_run_s']):.2f} | "
              f"{e['import_s']:.2f} / {o['import_s']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
