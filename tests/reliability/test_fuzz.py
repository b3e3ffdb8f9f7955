"""Malformed models: every fuzz case must work or raise an ``epoxy.EpoxyError`` subclass,
never crash, hang or raise a foreign exception type. Cases run in worker subprocesses with
a per-case timeout (``harness.py``).

CI runs a bounded sample with a fixed seed (``EPOXY_FUZZ_CASES`` / ``EPOXY_FUZZ_SEED``
change it); ``fuzz.py`` is the long-running mode. Every case that once failed is kept in
``corpus/`` and replayed here.
"""

from __future__ import annotations

import os

import pytest
from fuzz import generate
from harness import CORPUS, Worker, load_corpus, run_cases

CI_CASES = int(os.environ.get("EPOXY_FUZZ_CASES", "3000"))
CI_SEED = int(os.environ.get("EPOXY_FUZZ_SEED", "20250601"))
TIMEOUT = float(os.environ.get("EPOXY_FUZZ_TIMEOUT", "30"))
CORPUS_CASES = load_corpus()


def _report(results) -> str:
    return "\n\n".join(f"[{r.outcome}] {r.name}: {r.description}\n{r.detail}" for r in results[:5])


def test_fuzz_sample():
    results = list(run_cases(generate(CI_SEED, CI_CASES), workers=2, timeout=TIMEOUT))
    assert len(results) == CI_CASES
    failures = [r for r in results if r.failed]
    assert not failures, (
        f"{len(failures)} of {CI_CASES} fuzz cases failed; reproduce with "
        f"`python tests/reliability/fuzz.py --seed {CI_SEED} --cases {CI_CASES} --save`\n" + _report(failures)
    )
    # the sample must reach past the loader, or it tests nothing but protobuf parsing
    outcomes = [r.outcome for r in results]
    assert outcomes.count("ok") > CI_CASES // 20


@pytest.fixture(scope="module")
def worker():
    holder: list[Worker] = []

    def get() -> Worker:
        if not holder or not holder[0].alive:
            holder[:] = [Worker()]
        return holder[0]

    yield get
    if holder:
        holder[0].close()


def test_corpus_is_not_empty():
    assert CORPUS.is_dir() and len(CORPUS_CASES) >= 10


@pytest.mark.parametrize("case", CORPUS_CASES, ids=[c.name for c in CORPUS_CASES])
def test_corpus_case(case, worker):
    outcome, detail = worker().run(case.files, case.by_path, case.options, TIMEOUT)
    assert outcome in ("ok", "error"), f"{case.name} ({case.description}): {outcome}\n{detail}"
