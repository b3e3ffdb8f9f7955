"""Hostile models and feeds: every case must work or raise an ``epoxy.EpoxyError``; never a
foreign exception, a crash, a hang past the per-case bound, running out of memory, or reading
external data from outside the model's folder.

CI runs a short budget on a fixed seed, epoxy alone (``EPOXY_FUZZ_CASES``, ``_SEED``,
``_WORKERS``, ``_TIMEOUT`` change it); ``fuzz.py run`` is the long budget, next to onnxruntime
(docs/FUZZING.md). Every case that once failed is kept in ``corpus/`` and replayed here.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
from case import load_corpus
from families import FAMILIES, generate
from fuzz import CORPUS
from pool import Settings, Worker, judged, run_cases
from seedbank import all_seeds

CI_CASES = int(os.environ.get("EPOXY_FUZZ_CASES", "4000"))
CI_SEED = int(os.environ.get("EPOXY_FUZZ_SEED", "20250601"))
CI_WORKERS = int(os.environ.get("EPOXY_FUZZ_WORKERS", "2"))
TIMEOUT = float(os.environ.get("EPOXY_FUZZ_TIMEOUT", "30"))
CORPUS_CASES = load_corpus(CORPUS)


def test_short_budget():
    seeds = all_seeds()
    results = [(case, r["epoxy"]) for case, r in run_cases(generate(CI_SEED, CI_CASES, seeds), workers=CI_WORKERS,
                                                           settings=Settings(timeout=TIMEOUT))]
    assert len(results) == CI_CASES
    failures = [(case, r) for case, r in results if r.failed]
    report = "\n\n".join(
        f"[{r.outcome}] {case.name} ({case.family}): {case.description}\n{r.detail[:1500]}\n"
        f"  rebuild: python tests/fuzz/fuzz.py case --seed {CI_SEED} --index {case.name.rsplit('-', 1)[1]} "
        f"--out /tmp/{case.name}" for case, r in failures[:8])
    assert not failures, (
        f"{len(failures)} of {CI_CASES} fuzz cases failed ({dict(Counter(r.outcome for _, r in failures))}); "
        f"triage: python tests/fuzz/fuzz.py run --seed {CI_SEED} --cases {CI_CASES} --no-compare\n\n{report}")
    # the budget must reach past the loader in every family, or it tests little but parsing
    ran = Counter(case.family for case, r in results if r.outcome == "ok")
    assert set(ran) == set(FAMILIES), f"families with no case that ran: {set(FAMILIES) - set(ran)}"
    assert sum(ran.values()) > CI_CASES // 10


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    holder: list[Worker] = []
    settings = Settings(timeout=TIMEOUT, scratch=str(tmp_path_factory.mktemp("scratch")))

    def get() -> Worker:
        if not holder or not holder[0].alive:
            holder[:] = [Worker("epoxy", settings)]
        return holder[0]

    yield get
    if holder:
        holder[0].close()


def test_corpus_is_not_empty():
    assert len(CORPUS_CASES) >= 12


@pytest.mark.parametrize("case", CORPUS_CASES, ids=[c.name for c in CORPUS_CASES])
def test_corpus_case(case, worker):
    result = judged(case, worker().run(case, TIMEOUT))
    assert result.outcome in ("ok", "error"), f"{case.name} ({case.description}): {result.outcome}\n{result.detail}"
