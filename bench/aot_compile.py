"""Session creation from an ahead-of-time compiled model (``epoxy compile``, issue #18) against
a fresh session of the source model, epoxy with providers openvino + cpu.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /work/main/.venv/bin/python bench/aot_compile.py
    ... bench/aot_compile.py --models resnet50 --repeats 3 --threads 2 --profile

Each model (``light_resnet50`` and the ``bert`` encoder of models.py by default) is compiled
once with ``epoxy.compile_model`` into ``bench/.cache/aot/`` (``--force`` compiles again).
Then, per repeat, the fresh and the compiled session are created in alternating order:

- cold: in a new child process; the modules (epoxy, its plugins, openvino, numba) are
  imported before the timer starts (importing is the same for both), and the child writes
  and reads byte-compiled modules as an installed package does (PYTHONDONTWRITEBYTECODE,
  which this machine sets, is removed for it), so it counts plugin discovery, OpenVINO's
  first device query, reading, the providers' first kernels and planning;
- warm: in this process, after one untimed creation of each.

Reported: the median seconds and fresh/compiled ratios, whether every blob was imported (a
refused blob makes the compiled session compile again, and the table says so), and whether
the two sessions' outputs are bit-identical (the cold children's and the warm sessions').
``--profile``: where the compiled session's creation time goes (cProfile, warm).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from compare import first_line, limit_thread_env, loadavg, log, machine_note  # noqa: E402

#: compare.load_epoxy_openvino's options (f32, native OpenVINO's properties); the compiled
#: model must be made with the ones it is loaded with, else openvino refuses its blobs
OV_OPTIONS = {"performance_hint": "LATENCY", "num_streams": 1, "precision": "f32"}
_MARK = "AOT-BENCH-RESULT "
#: imported by a cold child before its timer starts
_PREIMPORT = ("openvino", "onnx", "epoxy", "epoxy.session", "epoxy.aot", "epoxy_ep_cpu", "epoxy_ep_openvino.provider",
              "numba")


def providers(threads: int) -> list:
    return [("openvino", {**OV_OPTIONS, "num_threads": threads}), "cpu"]


def create(path: Path, threads: int):
    """(session, seconds, warnings raised while creating it)."""
    import warnings

    import epoxy

    opts = epoxy.SessionOptions(intra_op_num_threads=threads)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        sess = epoxy.InferenceSession(str(path), providers=providers(threads), sess_options=opts)
        seconds = time.perf_counter() - t0
    return sess, seconds, [str(w.message) for w in caught]


def blobs_used(sess) -> tuple[int, int]:
    """(blobs imported, compiled groups recorded) of a session on a compiled model."""
    status = sess.partition_report().artifacts
    return sum(s.startswith("loaded from the compiled blob") for s in status.values()), len(status)


def compiled_path(model) -> Path:
    from models import CACHE_DIR

    return Path(CACHE_DIR) / "aot" / f"{model.name}.openvino.onnx"


def ensure_compiled(model, threads: int, force: bool) -> tuple[Path, float | None]:
    """The compiled model (made now when missing or ``force``) and the compile seconds."""
    import epoxy

    out = compiled_path(model)
    if out.exists() and not force and out.stat().st_mtime >= Path(model.path).stat().st_mtime:
        return out, None
    out.parent.mkdir(parents=True, exist_ok=True)
    log(f"{model.name}: epoxy compile -> {out}")
    t0 = time.perf_counter()
    epoxy.compile_model(str(model.path), out, providers=providers(threads),
                        sess_options=epoxy.SessionOptions(intra_op_num_threads=threads))
    return out, time.perf_counter() - t0


def outputs(sess, model) -> list:
    import numpy as np

    return sess.run(None, model.make_feeds(np.random.default_rng(0)))


def identical(a: list, b: list) -> bool:
    import numpy as np

    return len(a) == len(b) and all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, b))


# -- cold: one creation per child process ------------------------------------------------------
def child_main(name: str, path: str, threads: int, save: str | None) -> None:
    limit_thread_env(threads)
    import importlib

    import numpy as np
    from models import select_models

    # modules only (nothing created): importing is the same for both kinds, and on machines
    # with PYTHONDONTWRITEBYTECODE=1 (this one) it is mostly compiling sources to bytecode
    for module in _PREIMPORT:
        try:
            importlib.import_module(module)
        except ImportError:
            pass
    model = next(m for m in select_models(name) if m.name == name)
    sess, seconds, caught = create(Path(path), threads)
    used, groups = blobs_used(sess)
    if save:
        np.savez(save, *outputs(sess, model))
    print(_MARK + json.dumps({"create_s": seconds, "used": used, "groups": groups, "warnings": caught[:3]}))


def cold(model, path: Path, threads: int, save: str | None) -> dict:
    cmd = [sys.executable, __file__, "--child", model.name, str(path), str(threads)]
    cmd += ["--save", save] if save else []
    # byte-compiled modules as any installed package has them: this machine's environment sets
    # PYTHONDONTWRITEBYTECODE, which makes every child compile the lazily imported modules again
    # (~0.2 s of builtins.compile per creation, in both the fresh and the compiled child)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    for line in done.stdout.splitlines():
        if line.startswith(_MARK):
            return json.loads(line[len(_MARK):])
    raise RuntimeError(f"child failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")


# -- where the compiled creation's time goes ---------------------------------------------------
#: phase -> (file suffix, function) whose cumulative time is the phase's
PHASES = {
    "load + check": ("epoxy/load/loader.py", "load_model"),
    "expand context nodes (blob sha256s, signature)": ("epoxy/aot/reader.py", "expand"),
    "partition (providers' capability)": ("epoxy/partition/expand.py", "partition_graph"),
    "plan (compile/import groups, kernels)": ("epoxy/plan/plan_builder.py", "build_plan"),
    "  openvino import_compiled": ("epoxy_ep_openvino/provider.py", "import_compiled"),
    "    OpenVINO Core.import_model": ("openvino/_ov_api.py", "import_model"),
}


def profile(path: Path, threads: int) -> dict[str, float]:
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    t0 = time.perf_counter()
    create(path, threads)
    total = time.perf_counter() - t0
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    found = {"total": total}
    for phase, (suffix, func) in PHASES.items():
        found[phase] = sum(cum for (file, _, name), (_, _, _, cum, _) in stats.items()
                           if name == func and file.endswith(suffix))
    return found


# -- main --------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,bert", help="models.py filter (default: resnet50,bert)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5, help="creations timed per model, kind and cold/warm")
    ap.add_argument("--force", action="store_true", help="compile the models again")
    ap.add_argument("--profile", action="store_true", help="where the compiled session's creation time goes")
    ap.add_argument("--child", nargs=3, metavar=("MODEL", "PATH", "THREADS"), help=argparse.SUPPRESS)
    ap.add_argument("--save", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def measure(model, threads: int, repeats: int, force: bool) -> dict:
    import numpy as np

    path, compile_s = ensure_compiled(model, threads, force)
    rec: dict = {"compile_s": compile_s, "blob_mb": path.stat().st_size / 1e6,
                 "source_mb": Path(model.path).stat().st_size / 1e6}
    kinds = {"fresh": Path(model.path), "compiled": path}
    times: dict = {(k, w): [] for k in kinds for w in ("cold", "warm")}
    with tempfile.TemporaryDirectory() as tmp:
        saved = {k: os.path.join(tmp, f"{k}.npz") for k in kinds}
        for r in range(repeats):
            order = list(kinds) if r % 2 == 0 else list(reversed(kinds))
            for kind in order:
                got = cold(model, kinds[kind], threads, saved[kind] if r == 0 else None)
                times[(kind, "cold")].append(got["create_s"])
                if kind == "compiled":
                    rec["cold_blobs"] = f"{got['used']}/{got['groups']}"
                log(f"{model.name}: cold {kind} {got['create_s']:.3f} s")
        with np.load(saved["fresh"]) as a, np.load(saved["compiled"]) as b:
            rec["cold_identical"] = identical([a[k] for k in a.files], [b[k] for k in b.files])
    warm = {}
    for kind, p in kinds.items():
        warm[kind], _, _ = create(p, threads)  # untimed: this process's first creation
    for r in range(repeats):
        for kind in (list(kinds) if r % 2 == 0 else list(reversed(kinds))):
            sess, seconds, _ = create(kinds[kind], threads)
            times[(kind, "warm")].append(seconds)
            del sess
    used, groups = blobs_used(warm["compiled"])
    rec["warm_blobs"] = f"{used}/{groups}"
    rec["warm_identical"] = identical(outputs(warm["fresh"], model), outputs(warm["compiled"], model))
    for key, values in times.items():
        rec[f"{key[0]}_{key[1]}_s"] = statistics.median(values)
    return rec


def print_table(results: dict, threads: int, repeats: int) -> None:
    print(f"\n### session creation, fresh vs compiled model (openvino+cpu, {threads} threads, "
          f"median of {repeats}), s")
    print("| model | source / compiled MB | compile s | fresh cold | compiled cold | cold ratio | fresh warm | "
          "compiled warm | warm ratio | blobs imported (cold, warm) | outputs bit-identical (cold, warm) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, rec in results.items():
        if "error" in rec:
            print(f"| {name} | FAIL: {rec['error']} |" + " |" * 9)
            continue
        comp = "-" if rec["compile_s"] is None else f"{rec['compile_s']:.1f}"
        cells = [name, f"{rec['source_mb']:.1f} / {rec['blob_mb']:.1f}", comp]
        for w in ("cold", "warm"):
            f, c = rec[f"fresh_{w}_s"], rec[f"compiled_{w}_s"]
            cells += [f"{f:.3f}", f"{c:.3f}", f"{f / c:.2f}x"]
        cells += [f"{rec['cold_blobs']}, {rec['warm_blobs']}", f"{rec['cold_identical']}, {rec['warm_identical']}"]
        print("| " + " | ".join(cells) + " |")


def print_profile(found: dict) -> None:
    print("\n### where the compiled model's session creation goes (warm, cProfile cumulative s)")
    phases = ["total", *PHASES]
    print("| model | " + " | ".join(p.strip() for p in phases) + " |")
    print("|---|" + "---|" * len(phases))
    for name, rec in found.items():
        print(f"| {name} | " + " | ".join(f"{rec[p]:.3f}" for p in phases) + " |")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        child_main(args.child[0], args.child[1], int(args.child[2]), args.save)
        return 0
    limit_thread_env(args.threads)
    import warnings

    warnings.filterwarnings("ignore", category=RuntimeWarning)
    from models import select_models

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_before = loadavg()
    info = machine_note()
    results, profiles = {}, {}
    for model in select_models(args.models):
        try:
            results[model.name] = measure(model, args.threads, args.repeats, args.force)
            if args.profile:
                profiles[model.name] = profile(compiled_path(model), args.threads)
        except Exception as exc:  # noqa: BLE001 - a table row
            results[model.name] = {"error": first_line(exc)}
            log(f"{model.name}: {first_line(exc)}")
    print(f"{started}, load average {load_before} at start, {loadavg()} at end; {info.get('cpu', '?')}, "
          f"{info.get('cpus')} cpus; openvino {info['versions'].get('openvino')}; numpy BLAS: {info.get('blas')}")
    print_table(results, args.threads, args.repeats)
    if profiles:
        print_profile(profiles)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
