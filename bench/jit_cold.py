"""What ep-cpu's jit tier costs the first time: compile seconds per model with an empty cache.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/jit_cold.py               # light set + bert
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /tmp/tvenv/bin/python bench/jit_cold.py --set exporter

numba compiles a kernel at its first call (never at import or session creation) and keeps
it in its on-disk cache. For each model, three child processes each create a session and
run it once: with the jit tier on and an empty cache directory (cold: compiles), again with
the same directory (warm: loads from the cache), and with the tier off (the numpy path).
Reported: session creation and first-run seconds of each; "compile s" is the cold
creation + first run minus the warm ones; then each model's costliest compilations (the jit
tier's INFO log, ``--kernels N``), which say where a cold first run goes. Children, so that
nothing compiled earlier in this process counts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent

CHILD = r"""
import json, logging, sys, time
sys.path.insert(0, {bench!r})
import numpy as np
t0 = time.perf_counter()
import epoxy
compiled = []  # (kernel, seconds) of each compilation the jit tier logs (jit/compile_notice.py)
class Grab(logging.Handler):
    def emit(self, record):
        if record.msg.startswith("ep-cpu: compiled ") and len(record.args) == 2:
            compiled.append((str(record.args[0]).removeprefix("epoxy_ep_cpu.jit."), float(record.args[1])))
jit_log = logging.getLogger("epoxy_ep_cpu.jit")
jit_log.setLevel(logging.INFO)
jit_log.addHandler(Grab())
spec = {spec!r}
if spec["set"] == "exporter":
    import exporter_models as em
    model = next(m for m in em.exporter_models(spec["name"]) if m.name == spec["name"])
else:
    import models
    model = next(m for m in models.select_models(spec["name"]) if m.name == spec["name"])
feeds = model.make_feeds(np.random.default_rng(0))
t1 = time.perf_counter()
sess = epoxy.InferenceSession(str(model.path), providers=[("cpu", {{"jit": spec["jit"]}})])
t2 = time.perf_counter()
sess.run(None, feeds)
t3 = time.perf_counter()
sess.run(None, feeds)
t4 = time.perf_counter()
print(json.dumps({{"create": t2 - t1, "first": t3 - t2, "second": t4 - t3, "compiled": compiled}}))
"""


def child(name: str, set_name: str, jit: bool, cache: str) -> dict[str, float]:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache}
    code = CHILD.format(bench=str(BENCH_DIR), spec={"name": name, "set": set_name, "jit": jit})
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{name}: child failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def names(set_name: str, filter_spec: str | None) -> list[str]:
    sys.path.insert(0, str(BENCH_DIR))
    if set_name == "exporter":
        import exporter_models as em

        return [m.name for m in em.exporter_models(filter_spec) if "-b1" in m.name or filter_spec]
    import models

    return [m.name for m in models.select_models(filter_spec)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=("light", "exporter"), default="light")
    ap.add_argument("--models", default=None, help="comma-separated filter (exporter: batch-1 points by default)")
    ap.add_argument("--kernels", type=int, default=8, metavar="N",
                    help="after the table, each model's N costliest compilations (0: none)")
    args = ap.parse_args(argv)
    print("| model | jit cold: create s | first run s | jit warm: create s | first run s "
          "| jit off: create s | first run s | compile s |")
    print("|---|---|---|---|---|---|---|---|")
    costliest: dict[str, list[tuple[str, float]]] = {}
    for name in names(args.set, args.models):
        with tempfile.TemporaryDirectory(prefix="epoxy-jit-cold-") as cache:
            cold = child(name, args.set, True, cache)
            warm = child(name, args.set, True, cache)
            plain = child(name, args.set, False, cache)
        compiled = cold["create"] + cold["first"] - warm["create"] - warm["first"]
        costliest[name] = sorted(cold["compiled"], key=lambda k: -k[1])
        print(f"| {name} | {cold['create']:.2f} | {cold['first']:.2f} | {warm['create']:.3f} | {warm['first']:.3f} "
              f"| {plain['create']:.3f} | {plain['first']:.3f} | {max(0.0, compiled):.2f} |", flush=True)
    if args.kernels:
        print("\nCostliest compilations, s (a kernel's own seconds include the functions it compiles inside it):")
        for name, kernels in costliest.items():
            shown = ", ".join(f"{kernel} {seconds:.2f}" for kernel, seconds in kernels[:args.kernels])
            print(f"- {name} ({len(kernels)} compilations): {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
