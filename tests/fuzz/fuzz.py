"""Fuzz epoxy with hostile models and feeds, next to onnxruntime; triage and replay what breaks.

    python tests/fuzz/fuzz.py run --seed 1 --cases 20000 [--workers 2] [--timeout 20] [--memory 1024]
                                  [--families attribute,subgraph] [--no-compare] [--out fuzz-out] [--save]
    python tests/fuzz/fuzz.py triage fuzz-out          # the tables of a finished run, again
    python tests/fuzz/fuzz.py replay fuzz-out/reproducers/epoxy-crash-attribute-1a2b3c4d [--in-process]
    python tests/fuzz/fuzz.py case --seed 1 --index 1234 --out /tmp/case   # rebuild one case

Every case runs in a worker subprocess under a per-case timeout and an address-space cap
(worker.py, pool.py), through epoxy and, unless --no-compare, through onnxruntime in separate
workers. A case passes when epoxy works or raises an ``epoxy.EpoxyError``; foreign exceptions,
crashes, hangs, out-of-memory and external-data escapes fail it (outcome.py). ``run`` writes
``<out>/results.jsonl``, ``<out>/triage.md`` and one minimal reproducer per cause under
``<out>/reproducers/``; ``--save`` also copies epoxy's failing reproducers into
``tests/fuzz/corpus/``, which test_fuzz.py replays forever. Exit status 1 when epoxy failed
a case.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from case import Case, load, save  # noqa: E402
from compare import comparable, disagreement  # noqa: E402
from families import FAMILIES, generate, make_case  # noqa: E402
from outcome import FAILURES  # noqa: E402
from pool import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT, RunResult, Settings, run_cases  # noqa: E402
from seedbank import all_seeds  # noqa: E402
from triage import Triage  # noqa: E402

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"


def record(case: Case, index: int | None, results: dict[str, RunResult]) -> dict[str, Any]:
    """The JSON line of one case in results.jsonl (what triage reads)."""
    comparison = None
    ours, theirs = results.get("epoxy"), results.get("onnxruntime")
    if ours and theirs and ours.outcome == theirs.outcome == "ok":
        if ours.outputs is None or theirs.outputs is None:
            comparison = "skipped: outputs too large or not built"
        elif not comparable(case.model_bytes):
            comparison = "skipped: random ops"
        else:
            found = disagreement(ours.outputs, theirs.outputs)
            comparison = f"disagree: {found}" if found else "agree"
    return {"name": case.name, "index": index, "family": case.family, "seed": case.seed,
            "description": case.description, "size": case.size,
            "results": {rt: r.record() for rt, r in results.items()}, "comparison": comparison}


def _runtimes(compare: bool) -> list[str]:
    if not compare:
        return ["epoxy"]
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        print("onnxruntime is not installed: epoxy only", file=sys.stderr)
        return ["epoxy"]
    return ["epoxy", "onnxruntime"]


def cmd_run(args: argparse.Namespace) -> int:
    families = args.families.split(",") if args.families else None
    unknown = [f for f in families or [] if f not in FAMILIES]
    if unknown:
        raise SystemExit(f"unknown families {unknown}; known: {', '.join(FAMILIES)}")
    runtimes = _runtimes(args.compare)
    out = Path(args.out)
    if (out / "reproducers").is_dir():
        shutil.rmtree(out / "reproducers")
    out.mkdir(parents=True, exist_ok=True)
    seeds = all_seeds(node_cases=not args.hand_written_only)
    settings = Settings(timeout=args.timeout, memory_mb=args.memory, max_loop_iterations=args.max_loop_iterations,
                        run_timeout=args.run_timeout)
    triage = Triage(runtimes, out, slow_seconds=args.slow)
    indices = {}

    def cases():
        for case in generate(args.seed, args.cases, seeds, families, start=args.start):
            indices[case.name] = int(case.name.rsplit("-", 1)[1])
            yield case

    print(f"seed {args.seed}, cases {args.start}..{args.start + args.cases - 1}, {len(seeds)} seed models, "
          f"runtimes {', '.join(runtimes)}, {args.workers} worker(s), timeout {args.timeout:g} s, "
          f"memory {args.memory} MiB", flush=True)
    start = time.monotonic()
    counts: Counter[str] = Counter()
    with (out / "results.jsonl").open("w") as results_file:
        for n, (case, results) in enumerate(run_cases(cases(), runtimes=runtimes, workers=args.workers,
                                                      settings=settings), 1):
            line = record(case, indices.pop(case.name, None), results)
            results_file.write(json.dumps(line) + "\n")
            triage.add(line, case)
            epoxy = results["epoxy"]
            counts[epoxy.outcome] += 1
            if epoxy.failed:
                print(f"[{epoxy.outcome}] {case.name} ({case.family}): {epoxy.signature}", flush=True)
            if n % args.progress == 0:
                rate = n / (time.monotonic() - start)
                print(f"{n}/{args.cases} cases, {rate:.1f}/s, epoxy {dict(counts)}", flush=True)
    took = time.monotonic() - start
    rate = args.cases / max(took, 1e-9)
    text = (f"# Fuzz run: seed {args.seed}, {args.cases} cases, {took:.0f} s ({rate:.1f} cases/s, "
            f"{args.workers} worker(s), runtimes {', '.join(runtimes)})\n\n`{' '.join(sys.argv)}`\n\n")
    text += triage.render()
    (out / "triage.md").write_text(text)
    print("\n" + text)
    if args.save:
        for cause in triage.causes.values():
            folder = out / "reproducers" / cause.folder_name
            if cause.runtime == "epoxy" and cause.outcome in FAILURES and folder.is_dir():
                target = CORPUS / cause.folder_name
                shutil.copytree(folder, target, dirs_exist_ok=True)
                print(f"saved {target}")
    return 1 if triage.failures("epoxy") else 0


def cmd_triage(args: argparse.Namespace) -> int:
    out = Path(args.out)
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    runtimes = list(lines[0]["results"]) if lines else ["epoxy"]
    triage = Triage(runtimes, out, slow_seconds=args.slow)
    for line in lines:
        triage.add(line)
    print(triage.render(errors=args.errors))
    return 1 if triage.failures("epoxy") else 0


def _folders(paths: list[str]) -> list[Path]:
    found = []
    for p in map(Path, paths):
        found += [p] if (p / "case.json").is_file() else [c for c in sorted(p.iterdir()) if (c / "case.json").is_file()]
    return found


def cmd_replay(args: argparse.Namespace) -> int:
    runtimes = _runtimes(args.compare)
    failed = 0
    cases = [load(folder) for folder in _folders(args.paths)]
    if args.in_process:
        import worker

        settings = Settings(timeout=args.timeout, memory_mb=0).for_worker()
        for case in cases:
            for runtime in runtimes:
                rt = worker.RUNTIMES[runtime]()
                rt.load()
                answer = worker.run_case(rt, case.payload(), settings, Path.cwd())
                print(f"{case.name} [{runtime}] {answer['outcome']} ({answer['seconds']:.2f} s)\n{answer['detail']}\n")
                failed += runtime == "epoxy" and answer["outcome"] in FAILURES
        return 1 if failed else 0
    settings = Settings(timeout=args.timeout, memory_mb=args.memory)
    for case, results in run_cases(cases, runtimes=runtimes, settings=settings):
        print(f"{case.name}: {case.description}")
        for runtime, result in results.items():
            print(f"  [{runtime}] {result.outcome} ({result.seconds:.2f} s): {result.detail}")
        comparison = record(case, None, results)["comparison"]
        if comparison:
            print(f"  comparison: {comparison}")
        failed += results["epoxy"].failed
    return 1 if failed else 0


def cmd_case(args: argparse.Namespace) -> int:
    families = args.families.split(",") if args.families else None
    case = make_case(args.seed, args.index, all_seeds(node_cases=not args.hand_written_only), families)
    folder = save(case, Path(args.out), replay=f"python tests/fuzz/fuzz.py replay {args.out}")
    print(f"{case.name} ({case.family}): {case.description}\nwritten to {folder}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="fuzz a budget of cases; triage at the end")
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--cases", type=int, default=2000)
    run.add_argument("--start", type=int, default=0, help="first case index (cases start..start+cases-1)")
    run.add_argument("--workers", type=int, default=1, help="worker threads (one process per runtime each)")
    run.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per case and runtime: the bound")
    run.add_argument("--memory", type=int, default=DEFAULT_MEMORY_MB,
                     help="MiB a worker may allocate beyond its imports (RLIMIT_AS); epoxy's memory_limit_bytes "
                          "is a quarter of it")
    run.add_argument("--max-loop-iterations", type=int, default=None, help="session option (default: epoxy's)")
    run.add_argument("--run-timeout", type=float, default=None,
                     help="epoxy's run bound, session option run_timeout_s (default: 2 s or a quarter of --timeout; "
                          "0: none)")
    run.add_argument("--families", default="", help=f"comma-separated subset of: {', '.join(FAMILIES)}")
    run.add_argument("--no-compare", dest="compare", action="store_false", help="epoxy only, no onnxruntime")
    run.add_argument("--hand-written-only", action="store_true", help="leave the ONNX backend node cases out")
    run.add_argument("--out", default="fuzz-out", help="results.jsonl, triage.md, reproducers/")
    run.add_argument("--save", action="store_true", help="copy epoxy's failing reproducers into tests/fuzz/corpus/")
    run.add_argument("--slow", type=float, default=5.0, help="list epoxy cases slower than this (seconds)")
    run.add_argument("--progress", type=int, default=500, help="print a progress line every N cases")
    run.set_defaults(func=cmd_run)

    tri = sub.add_parser("triage", help="print the tables of a finished run again")
    tri.add_argument("out")
    tri.add_argument("--errors", type=int, default=15, help="list the N most frequent epoxy error causes too")
    tri.add_argument("--slow", type=float, default=5.0)
    tri.set_defaults(func=cmd_triage)

    rep = sub.add_parser("replay", help="run saved cases (a case folder or a folder of them)")
    rep.add_argument("paths", nargs="+")
    rep.add_argument("--no-compare", dest="compare", action="store_false")
    rep.add_argument("--in-process", action="store_true", help="run here, no subprocess or cap (for a debugger)")
    rep.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    rep.add_argument("--memory", type=int, default=DEFAULT_MEMORY_MB)
    rep.set_defaults(func=cmd_replay)

    one = sub.add_parser("case", help="rebuild case (seed, index) as a folder")
    one.add_argument("--seed", type=int, required=True)
    one.add_argument("--index", type=int, required=True)
    one.add_argument("--families", default="")
    one.add_argument("--hand-written-only", action="store_true")
    one.add_argument("--out", required=True)
    one.set_defaults(func=cmd_case)

    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
