"""``max_performance`` on the bench models (issue #23): does the tuned pick run as fast as the
best of ``[cpu]`` and ``[openvino, cpu]`` measured separately, and how long does tuning take?

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /work/main/.venv/bin/python bench/tune.py
    /work/main/.venv/bin/python bench/tune.py --models resnet50,bert --runs 20 --json tune.json

For each model (the 9 light models + bert, ``--models`` filters as in compare.py):

1. tune: create a session with ``providers=["auto:max_performance"]`` against an empty tuning
   cache (a fresh ``$EPOXY_TUNE_CACHE_DIR`` per model) and the default budget (30 s,
   ``--tune-budget`` to change it); its wall time is the tuning time (measurement plus creating
   the chosen session), and the pick and the policy's table of candidates are recorded;
2. a second session with the policy: a cache hit, its creation timed;
3. independently: sessions ``[cpu]``, ``[openvino, cpu]`` and the pick (its provider list given
   explicitly), with the providers' default options (what a user gets), timed interleaved on
   the same seeded inputs from the model's feeds factory (``compare.time_interleaved``: blocks,
   first call of each dropped, order rotated). Reported: medians and pick / best-of-two
   (<= ~1.05: the target is met within noise; "= faster set" when the pick is the very set that
   was faster here, whatever the ratio).

When the pick is one of the two sets, its row times the same configuration twice: the ratio's
distance from 1 is then the noise of this run. Progress goes to stderr, the Markdown table to
stdout.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402 - bench/ is not a package
from compare import first_line, log  # noqa: E402

#: the two sets the pick is compared with: (column name, provider list)
BASELINES = (("cpu", ["cpu"]), ("openvino+cpu", ["openvino", "cpu"]))
POLICY = "auto:max_performance"
#: pick / best-of-two at or below this is "no slower within noise"
NOISE = 1.05
#: issue #23's bound on tuning time per model, seconds
TUNE_TARGET_S = 30.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=None,
                    help="comma-separated filter, e.g. resnet50,bert or light (default: all 10)")
    ap.add_argument("--tune-budget", type=float, default=None, metavar="S",
                    help="SessionOptions.tune_budget_s for the tuning (default: epoxy's, 30 s)")
    ap.add_argument("--threads", type=int, default=None,
                    help="SessionOptions.intra_op_num_threads for every session (default: epoxy's)")
    ap.add_argument("--runs", type=int, default=20, help="timed runs per provider set (default 20)")
    ap.add_argument("--block", type=int, default=4, help="timed calls per block; +1 dropped (default 4)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls after creation (default 2)")
    ap.add_argument("--budget", type=float, default=5.0,
                    help="seconds of timed calls per provider set and model; fewer runs (at least "
                         "--min-runs) when one call is slow (default 5)")
    ap.add_argument("--min-runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="seed of the inputs timed in step 3")
    ap.add_argument("--settle", type=float, default=0.5,
                    help="seconds to sleep before each timed block (default 0.5)")
    ap.add_argument("--json", default=None, metavar="OUT.json", help="also write every measurement here")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.block < 1:
        ap.error("--runs and --block must be >= 1")
    if args.tune_budget is not None and args.tune_budget <= 0:
        ap.error("--tune-budget must be positive")
    return args


def session_options(args):
    import epoxy

    opts = epoxy.SessionOptions()
    if args.threads:
        opts.intra_op_num_threads = args.threads
    if args.tune_budget is not None:
        opts.tune_budget_s = args.tune_budget
    return opts


def tune(model, args, cache_root: str) -> dict:
    """Steps 1 and 2: tune against an empty cache, then a cache hit."""
    import gc

    import epoxy

    cache = os.path.join(cache_root, model.name)
    os.makedirs(cache, exist_ok=True)
    os.environ["EPOXY_TUNE_CACHE_DIR"] = cache  # read by epoxy.devices.tune_cache at each lookup
    rec: dict = {"cache_dir": cache}
    try:
        t0 = time.perf_counter()
        sess = epoxy.InferenceSession(str(model.path), session_options(args), providers=[POLICY])
        rec["tune_s"] = time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 - a table row
        rec["error"] = "tune: " + first_line(exc)
        return rec
    sel = sess.provider_selection()
    rec.update(source=sel.source, chosen=[(ep.ep_name, ep.device_index) for ep in sel.chosen],
               pick=pick_label(sel.chosen), notes=list(sel.notes), table=list(sel.table),
               session_providers=list(sess.get_providers()))
    found = [re.search(r"candidate provider sets in ([0-9.]+) s", n) for n in rec["notes"]]
    rec["measure_s"] = next((float(m.group(1)) for m in found if m), None)  # the policy's own clock
    del sess
    gc.collect()
    try:
        t0 = time.perf_counter()
        again = epoxy.InferenceSession(str(model.path), session_options(args), providers=[POLICY])
        rec["cached_s"] = time.perf_counter() - t0
        second = again.provider_selection()
        rec["cached_source"] = second.source
        rec["cached_same"] = [(ep.ep_name, ep.device_index) for ep in second.chosen] == rec["chosen"]
        del again
    except Exception as exc:  # noqa: BLE001
        rec["cached_error"] = first_line(exc)
    gc.collect()
    return rec


def pick_label(chosen) -> str:
    return "+".join(ep.ep_name for ep in chosen)


def time_sets(model, args, chosen) -> dict:
    """Step 3: the two baselines and the pick, created here and timed interleaved."""
    import gc

    import numpy as np

    import epoxy

    sets = dict(BASELINES)
    if chosen:
        sets["pick"] = [(name, {"device_index": index}) for name, index in chosen]
    out: dict = {name: {"providers": [p if isinstance(p, str) else p[0] for p in providers]}
                 for name, providers in sets.items()}
    feeds = model.make_feeds(np.random.default_rng(args.seed))
    fns, outputs = {}, {}
    for name, providers in sets.items():
        rec = out[name]
        try:
            t0 = time.perf_counter()
            sess = epoxy.InferenceSession(str(model.path), session_options(args), providers=providers)
            rec["create_s"] = time.perf_counter() - t0
            rec["claimed"] = claimed(sess)
            outputs[name] = [np.asarray(o) for o in sess.run(None, dict(feeds))]  # cold: not an estimate
        except Exception as exc:  # noqa: BLE001 - a table cell
            rec["error"] = first_line(exc)
            continue
        fns[name] = (lambda s: lambda f: s.run(None, f))(sess)
    ref = outputs.get("cpu")
    for name, outs in outputs.items():
        if name != "cpu" and ref is not None:
            out[name]["max_abs_diff_vs_cpu"] = compare.max_abs_diff(outs, ref)
    outputs.clear()
    medians, samples, errors = compare.time_interleaved(
        fns, feeds, runs=args.runs, block=args.block, warmup=args.warmup, budget=args.budget,
        min_runs=args.min_runs, settle=args.settle)
    for name, msg in errors.items():
        out[name]["error"] = "run: " + msg
    for name, med in medians.items():
        out[name].update(median_ms=med * 1e3, min_ms=min(samples[name]) * 1e3, n=len(samples[name]),
                         samples_ms=[round(x * 1e3, 4) for x in samples[name]])
    fns.clear()
    gc.collect()
    return out


def claimed(sess) -> dict[str, int]:
    counts: dict[str, int] = {}
    for decision in sess.partition_report().nodes:
        counts[decision.provider] = counts.get(decision.provider, 0) + 1
    return counts


def verdict(row: dict) -> dict:
    """pick / best-of-two and whether #23's figure held for this model."""
    timed = row.get("timed", {})
    best = [timed[n]["median_ms"] for n, _ in BASELINES if "median_ms" in timed.get(n, {})]
    pick_ms = timed.get("pick", {}).get("median_ms")
    ratio = pick_ms / min(best) if best and pick_ms else None
    timed_sets = [(timed[n]["median_ms"], timed[n]["providers"]) for n, _ in BASELINES
                  if "median_ms" in timed.get(n, {})]
    fastest = min(timed_sets)[1] if timed_sets else None
    # the pick *is* the faster set: its ratio then only shows this run's noise
    same = fastest is not None and timed.get("pick", {}).get("providers") == fastest
    tune_s = row["tune"].get("tune_s")
    return {"best_ms": min(best) if best else None, "ratio": ratio, "fastest_set": fastest,
            "pick_is_fastest_set": same, "fast_enough": None if ratio is None else same or ratio <= NOISE,
            "tune_in_time": None if tune_s is None else tune_s <= TUNE_TARGET_S}


def tuning_note(tune_rec: dict) -> str:
    """What the policy's own table says: each candidate's median, or why it was dropped."""
    parts = []
    for cand in tune_rec.get("table", []):
        label = "+".join(cand["providers"])
        if cand.get("dropped"):
            parts.append(f"{label} dropped: {cand['dropped']}")
        elif cand.get("median_ms") is not None:
            err = cand.get("max_error")
            shown = f", err {err:.1e}" if err else ""
            parts.append(f"{label} {cand['median_ms']:.1f} ms ×{cand['runs']}{shown}")
    return "; ".join(parts)


def fmt(v, spec=".1f") -> str:
    return "-" if v is None else format(v, spec)


def print_table(rows, out=sys.stdout) -> None:
    head = ["model", "tune s (measuring)", "cache hit s (pick created plainly)", "pick", "cpu ms",
            "openvino+cpu ms", "pick ms", "pick/best", "met", "tuning's own table (median ms ×runs; dropped)"]
    print("| " + " | ".join(head) + " |", file=out)
    print("|" + "|".join("---" for _ in head) + "|", file=out)
    for row in rows:
        t, timed, v = row["tune"], row.get("timed", {}), row["verdict"]
        if "error" in t:
            print(f"| {row['model']} | FAIL | | | | | | | | {t['error']} |", file=out)
            continue

        def cell(name, timed=timed):
            rec = timed.get(name, {})
            return "FAIL: " + rec["error"] if "error" in rec else fmt(rec.get("median_ms"))

        cached = fmt(t.get("cached_s"), ".2f") + f" ({fmt(timed.get('pick', {}).get('create_s'), '.2f')})"
        if t.get("cached_source") not in (None, "cache") or t.get("cached_same") is False:
            cached += f" ({t.get('cached_source')}{'' if t.get('cached_same') else ', other pick'})"
        if "cached_error" in t:
            cached = "FAIL: " + t["cached_error"]
        met = []
        if v["fast_enough"] is not None:
            met.append(("speed yes" + (" (= faster set)" if v["pick_is_fastest_set"] else ""))
                       if v["fast_enough"] else "speed NO")
        if v["tune_in_time"] is not None:
            met.append("time yes" if v["tune_in_time"] else "time NO")
        cells = [row["model"], f"{fmt(t.get('tune_s'))} ({fmt(t.get('measure_s'))})", cached, t.get("pick", "-"),
                 cell("cpu"), cell("openvino+cpu"), cell("pick"), fmt(v["ratio"], ".2f"), ", ".join(met) or "-",
                 tuning_note(t)]
        print("| " + " | ".join(cells) + " |", file=out)
    out.flush()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv

    import warnings

    warnings.filterwarnings("ignore", category=RuntimeWarning, module="epoxy")
    with tempfile.TemporaryDirectory(prefix="epoxy-tune-bench-") as cache_root:
        os.environ["EPOXY_TUNE_CACHE_DIR"] = cache_root  # before epoxy is used: no decision comes from ~/.cache
        return run(args, cache_root)


def run(args: argparse.Namespace, cache_root: str) -> int:
    """The whole bench with its decisions cached under ``cache_root`` (removed afterwards)."""
    from models import select_models

    started = time.time()
    info = compare.machine_note()
    print(f"# max_performance against [cpu] and [openvino, cpu] — {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"cpu: {info.get('cpu', '?')} ×{info['cpus']}; " +
          ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v))
    print(f"numpy BLAS (epoxy's cpu GEMMs): {info['blas']}")
    print(f"tuning budget {args.tune_budget or 'default (30)'} s, fresh cache per model under {cache_root}; "
          f"then up to {args.runs} timed runs per set (budget {args.budget:g} s, blocks of {args.block} + 1 "
          f"dropped), threads {args.threads or 'default'}")
    print(f"load average at start: {compare.loadavg()}")
    rows = []
    for model in select_models(args.models):
        t0 = time.perf_counter()
        log(f"{model.name}: tuning ...")
        row = {"model": model.name, "tune": tune(model, args, cache_root)}
        t = row["tune"]
        if "error" not in t:
            log(f"  tuned in {t['tune_s']:.1f} s: {t['pick']} (cache hit {fmt(t.get('cached_s'), '.2f')} s, "
                f"{t.get('cached_source')}); {tuning_note(t)}")
            row["timed"] = time_sets(model, args, t["chosen"])
        else:
            log(f"  {t['error']}")
        row["verdict"] = verdict(row)
        rows.append(row)
        timed = row.get("timed", {})
        log("  " + ", ".join(f"{n} {fmt(r.get('median_ms'))} ms" if "error" not in r else f"{n} FAIL"
                             for n, r in timed.items()) +
            f"; pick/best {fmt(row['verdict']['ratio'], '.2f')}  [{time.perf_counter() - t0:.0f} s]")
    print()
    print_table(rows)
    elapsed = time.time() - started
    print(f"\n(total {elapsed:.0f} s; load average at end: {compare.loadavg()})")
    if args.json:
        payload = {"date": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
                   "argv": args.argv, "machine": info, "rows": rows,
                   "elapsed_s": elapsed}
        compare.write_json(args.json, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
