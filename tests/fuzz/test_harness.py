"""The harness itself: outcome classes (through the ``probe`` runtime, which segfaults, hangs or
runs out of memory on request), worker replacement, the case folder format, deterministic
generation, cause signatures, minimal reproducers and the output comparison."""

from __future__ import annotations

import json
import random

import ml_dtypes
import numpy as np
import pytest
from case import MODEL_FILE, Case, load, save
from compare import disagreement
from families import FAMILIES, make_case
from feedspec import View, Zeros, materialize
from mutators.common import Draft, apply_some
from outcome import normalize, signature
from pool import Settings, run_cases
from seedbank import all_seeds
from triage import Triage


def _probe(command: str, **kw) -> Case:
    return Case(command, "probe", command, {MODEL_FILE: command.encode()}, feeds={}, **kw)


def _run(cases: list[Case], tmp_path, timeout: float = 5.0) -> list:
    """Results in order (one worker thread)."""
    settings = Settings(timeout=timeout, memory_mb=512, scratch=str(tmp_path))
    return [res["probe"] for _, res in run_cases(cases, runtimes=["probe"], settings=settings)]


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    commands = ["ok", "error", "foreign", "oom", "wrapped-oom", "segfault", "abort", "kill", "hang"]
    cases = [_probe(c) for c in commands] + [_probe("ok", by_path=True, must_refuse=True)]
    cases[-1].name = "escaped"
    results = _run(cases, tmp_path_factory.mktemp("probe"), timeout=3.0)
    return {case.name: result for case, result in zip(cases, results)}


@pytest.mark.parametrize(("name", "outcome", "where"), [
    ("ok", "ok", ""),
    ("error", "error", ""),
    ("foreign", "foreign", "worker.py:run"),
    ("oom", "oom", "numeric.py:ones"),
    ("wrapped-oom", "oom", "numeric.py:ones"),  # MemoryError wrapped in the runtime's own error
    ("segfault", "crash", "string_at"),
    ("abort", "crash", "worker.py:run"),
    ("kill", "oom", ""),  # SIGKILL: what the kernel's OOM killer sends
    ("hang", "hang", "worker.py:run"),  # the stack dumped before the kill says where
    ("escaped", "escape", ""),  # worked although its external data escaped the model's folder
])
def test_outcome_classes(probed, name, outcome, where):
    result = probed[name]
    assert result.outcome == outcome, result.detail
    assert where in result.signature


def test_a_dead_or_hung_worker_is_replaced(tmp_path):
    results = _run([_probe("segfault"), _probe("ok"), _probe("hang"), _probe("ok")], tmp_path, timeout=2.0)
    assert [r.outcome for r in results] == ["crash", "ok", "hang", "ok"]


def test_case_layout_in_the_worker(tmp_path):
    """Files go to the model's folder, ``../`` beside it, cwd_files to the working directory."""
    case = Case("files", "probe", "", {MODEL_FILE: b"files", "../outside.bin": b"x", "sub/w.bin": b"y"}, feeds={},
                by_path=True, cwd_files={"weights.bin": b"z"})
    (result,) = _run([case], tmp_path)
    assert result.outcome == "ok"
    assert list(result.outputs[0]) == ["weights.bin", "cwd", "m", "outside.bin"]


def test_case_folder_round_trip(tmp_path):
    feeds = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": Zeros((1 << 20, 4), "<f4"),
        "c": View("strided", np.ones((2, 2), np.int64)),
        "d": np.array(["x", 1, None], dtype=object),
        "e": np.array([1.5, -2], dtype=ml_dtypes.bfloat16),
        "f": None,
        "g": [np.zeros(2, np.uint8), np.ones(1, np.uint8)],
    }
    case = Case("c1", "feeds", "desc", {MODEL_FILE: b"m", "../outside.bin": b"o", "weird name\0": b"w"}, feeds=feeds,
                by_path=True, options={"check_model": "off"}, cwd_files={"weights.bin": b"c"}, must_refuse=True,
                seed="hand:mlp")
    loaded = load(save(case, tmp_path / "c1", found="crash", detail="d"))
    assert loaded.files == case.files and loaded.cwd_files == case.cwd_files
    assert (loaded.by_path, loaded.options, loaded.must_refuse, loaded.seed) == (True, {"check_model": "off"}, True,
                                                                                 "hand:mlp")
    assert set(loaded.feeds) == set(feeds)
    assert loaded.feeds["b"] == feeds["b"] and loaded.feeds["f"] is None
    for name in ("a", "e"):
        assert loaded.feeds[name].dtype == feeds[name].dtype
        np.testing.assert_array_equal(loaded.feeds[name].astype(np.float32), feeds[name].astype(np.float32))
    assert loaded.feeds["d"].tolist() == ["x", 1, None]
    strided = materialize(loaded.feeds["c"])
    assert not strided.flags.c_contiguous and strided.tolist() == [[1, 1], [1, 1]]
    assert [list(x) for x in loaded.feeds["g"]] == [[0, 0], [1]]
    assert not any(p.suffix == ".pkl" for p in (tmp_path / "c1").iterdir())  # nothing is unpickled on replay


def test_first_harness_folders_still_load(tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / MODEL_FILE).write_bytes(b"m")
    (folder / "weights.bin").write_bytes(b"w")
    (folder / "case.json").write_text(json.dumps({"description": "d", "by_path": True, "options": {}}))
    case = load(folder)
    assert case.files == {MODEL_FILE: b"m", "weights.bin": b"w"} and case.feeds is None and case.by_path


def test_a_case_is_rebuilt_from_seed_and_index():
    seeds = all_seeds(node_cases=False)
    for index in range(60):
        a, b = make_case(7, index, seeds), make_case(7, index, seeds)
        assert (a.files, a.description, a.family, a.options) == (b.files, b.description, b.family, b.options)
    assert len({make_case(7, i, seeds).model_bytes for i in range(60)}) > 40


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_mutates(family):
    """Each family applies something to most seeds it is meant for (hand-written seeds)."""
    seeds = all_seeds(node_cases=False)
    cases = [make_case(3, i, seeds, [family]) for i in range(40)]
    assert all(c.family == family for c in cases)
    mutated = [c for c in cases if "no mutation applied" not in c.description]
    assert len(mutated) >= 30, [c.description for c in cases]
    if family == "external":
        assert any(c.must_refuse for c in cases) and all(c.by_path for c in mutated)


def test_apply_some_notes_what_it_skipped():
    def broken(rng, draft):
        raise ValueError("cannot")

    draft = Draft(model=None, feeds=None)  # type: ignore[arg-type]
    assert not apply_some(random.Random(0), draft, [broken], tries=2)
    assert draft.notes and all("broken skipped (ValueError)" in n for n in draft.notes)


def test_signatures_group_causes_not_names():
    a = signature("error", "KernelError: node 'conv_1' failed on provider 'cpu': index 12 out of range for 3")
    b = signature("error", "KernelError: node 'x' failed on provider 'cpu': index -7 out of range for 40")
    assert a == b
    assert signature("foreign", "KeyError: 0\nat wire.py:load_mapped\n...") == "KeyError: N @ wire.py:load_mapped"
    assert normalize("expected float32, got /tmp/a/b.bin") == "expected float32, got PATH"


def test_triage_keeps_the_smallest_case_of_a_cause(tmp_path):
    triage = Triage(["epoxy"], tmp_path)
    for name, size in (("big", 900), ("small", 40), ("middle", 300)):
        case = Case(name, "graph", f"case {name}", {MODEL_FILE: b"x" * size}, feeds={})
        detail = f"ValueError: bad {size}\nat loader.py:load"
        record = {"name": name, "family": "graph", "seed": "hand:mlp", "description": case.description,
                  "size": case.size, "results": {"epoxy": {"outcome": "foreign", "detail": detail, "seconds": 0.1}}}
        triage.add(record, case)
    (cause,) = triage.causes.values()
    assert (cause.count, cause.smallest) == (3, "small")
    folder = tmp_path / "reproducers" / cause.folder_name
    assert json.loads((folder / "case.json").read_text())["name"] == "small"
    table = triage.render()
    assert f"python tests/fuzz/fuzz.py replay {folder}" in table and triage.failures() == 3


def test_disagreement():
    nan = np.float32("nan")
    assert disagreement([np.array([1.0, nan, np.inf], np.float32)], [np.array([1.0, nan, np.inf], np.float32)]) is None
    assert "values differ" in disagreement([np.array([np.inf], np.float32)], [np.array([3e38], np.float32)])
    assert "shape" in disagreement([np.zeros((2, 1))], [np.zeros(2)])
    assert "dtype" in disagreement([np.zeros(2, np.int32)], [np.zeros(2, np.int64)])
    assert "items" in disagreement([[np.zeros(1)]], [[]])
    assert disagreement([np.array(["a"], dtype=object)], [np.array(["a"])]) is None


def test_onnxruntime_runs_beside_and_agrees_on_intact_seeds(tmp_path):
    """The comparison path end to end: the hand-written seeds, unmutated, give the same outputs."""
    pytest.importorskip("onnxruntime")
    from fuzz import record

    cases = [Case(s.name, "none", "intact", {MODEL_FILE: s.model}, feeds=s.feeds, seed=s.name)
             for s in all_seeds(node_cases=False)]
    settings = Settings(timeout=60, scratch=str(tmp_path))
    records = [record(case, None, results)
               for case, results in run_cases(cases, runtimes=["epoxy", "onnxruntime"], settings=settings)]
    assert all(r["results"]["epoxy"]["outcome"] == "ok" for r in records), records
    comparisons = [r["comparison"] or r["results"]["onnxruntime"]["detail"][:80] for r in records]
    assert comparisons.count("agree") >= 7 and not any(c.startswith("disagree") for c in comparisons), comparisons
