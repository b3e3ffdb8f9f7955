"""Peak RSS of load + first run, session-creation time and the first run's time: epoxy vs onnxruntime.

Creation is load + optimize + partition + plan (imports timed separately; epoxy imports onnx
and onnx_ir at its first session, so their import lands in creation). The first run is timed
too: in a fresh process it loads the compiled kernels a model uses from the kernel cache
(numba's start and its cached kernels: ~0.3 s of squeezenet's first result; bench/README.md,
sessions 40-41). "First result" is import + creation + first run: what a new process waits for.
A child imports numpy alone before its timers start (its feeds are made here and handed over as
an .npz), so neither runtime's figures hide an import the other never pays.

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
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

CHILD = r"""
import json, resource, sys, time
import numpy as np
runtime, path, feeds_path, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with np.load(feeds_path) as stored:
    feeds = {{name: stored[name] for name in stored.files}}
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
    sess = epoxy.InferenceSession(path, providers=["cpu"],
                                  sess_options=epoxy.SessionOptions(intra_op_num_threads=threads))
else:
    so = ort.SessionOptions(); so.intra_op_num_threads = threads; so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
created = time.perf_counter() - imported
sess.run(None, feeds)
first_run = time.perf_counter() - imported - created
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"create_s": created, "first_run_s": first_run, "import_s": imported - start,
                  "peak_mb": peak / 1024, "import_base_mb": base / 1024}}))
"""


def measure(runtime: str, path: str, feeds_path: str, threads: int) -> dict[str, float]:
    code = CHILD.format()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads)}
    # an installed package has its bytecode compiled (pip does it at install time); an
    # editable checkout under PYTHONDONTWRITEBYTECODE=1 would recompile every module in
    # every child (~0.1-0.25 s of "creation" that no user pays)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run([sys.executable, "-c", code, runtime, path, feeds_path, str(threads)], capture_output=True,
                         text=True, env=env, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def store_feeds(name: str, folder: Path) -> tuple[str, str]:
    """(model path, .npz of its feeds): made here, so a child imports numpy alone before its
    timers (reading a model's inputs takes onnx, whose import epoxy pays and onnxruntime never does)."""
    import numpy as np
    from models import select_models

    model = select_models(name)[0]
    feeds_path = folder / f"{model.name}.npz"
    np.savez(feeds_path, **model.make_feeds(np.random.default_rng(0)))
    return str(model.path), str(feeds_path)


def first_result(sample: dict[str, float]) -> float:
    """Seconds from a fresh process's first import to its first outputs (the feeds ready)."""
    return sample["import_s"] + sample["create_s"] + sample["first_run_s"]


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
        "| first run s epoxy / ort | create + first run ratio | import s epoxy / ort "
        "| first result s epoxy / ort | first result ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    folder = Path(tempfile.mkdtemp(prefix="epoxy-memory-"))
    for name in names:
        path, feeds_path = store_feeds(name, folder)
        samples: dict[str, list[dict[str, float]]] = {"epoxy": [], "onnxruntime": []}
        for runtime in samples:  # warm-up child: writes bytecode, fills the page cache
            measure(runtime, path, feeds_path, args.threads)
        for _ in range(args.repeat):
            for runtime in samples:
                samples[runtime].append(measure(runtime, path, feeds_path, args.threads))
        med = {rt: {k: statistics.median(s[k] for s in v) for k in v[0]} for rt, v in samples.items()}
        e, o = med["epoxy"], med["onnxruntime"]
        print(f"| {name} | {e['peak_mb']:.0f} | {o['peak_mb']:.0f} | {e['peak_mb'] / o['peak_mb']:.2f} | "
              f"{e['create_s']:.2f} | {o['create_s']:.2f} | {e['create_s'] / o['create_s']:.2f} | "
              f"{e['first_run_s']:.2f} / {o['first_run_s']:.2f} | "
              f"{(e['create_s'] + e['first_run_s']) / (o['create_s'] + o['first_run_s']):.2f} | "
              f"{e['import_s']:.2f} / {o['import_s']:.2f} | {first_result(e):.2f} / {first_result(o):.2f} | "
              f"{first_result(e) / first_result(o):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
