"""The model zoo's shared parts: a case (a model a real exporter writes, with the inputs to
feed it), and the check every case goes through: the same inputs through onnxruntime and
through epoxy with the cpu provider, every node placed on cpu, every output equal (labels
exactly, scores within ``RTOL``/``ATOL``, ZipMap's list of dicts key by key), and the case's
row in docs/MODEL_ZOO.md saying what the test found (the ops the exporter wrote, and
"matches onnxruntime" or the xfail reason), so the table cannot drift from the tests.
``check_openvino_case`` does the same with ``OPENVINO_PROVIDERS`` (openvino first, claiming
every group it can, cpu taking the rest) for the table's openvino+cpu column.

Kept apart from the test files so that ``zoo_table.py`` (which writes the table) shares it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

RTOL = 1e-4
ATOL = 1e-5
TABLE = Path(__file__).resolve().parents[2] / "docs" / "MODEL_ZOO.md"
MATCHES = "matches onnxruntime"
_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|(.*)\|\s*$")
_SHORT_DOMAIN = {"": "", "ai.onnx": "", "ai.onnx.ml": "ml."}


@dataclass(frozen=True)
class Built:
    """An exported model and the feeds to run it with."""

    model: Any  # onnx.ModelProto
    feeds: dict[str, Any]


@dataclass(frozen=True)
class Case:
    """One zoo entry.

    ``xfail`` is the precise reason the model does not run on epoxy today (op, domain,
    version, or the bug), ``raises`` the exception that reason produces; both ``None``
    when it runs and matches onnxruntime."""

    id: str
    exporter: str
    model: str
    variant: str
    build: Callable[[], Built] = field(repr=False, compare=False)
    xfail: str | None = None
    raises: tuple[type[BaseException], ...] | None = None
    #: like ``xfail``, for the run with ``OPENVINO_PROVIDERS``
    openvino_xfail: str | None = None


def params(cases: Sequence[Case], *, openvino: bool = False) -> list[Any]:
    """pytest params: a case that fails today is a strict xfail carrying its reason
    (``openvino``: the reason it fails with ``OPENVINO_PROVIDERS``)."""
    import pytest

    out = []
    for case in cases:
        marks = ()
        reason = case.openvino_xfail if openvino else case.xfail
        if reason:
            marks = (pytest.mark.xfail(strict=True, reason=reason),)
        out.append(pytest.param(case, id=case.id, marks=marks))
    return out


# --------------------------------------------------------------------------- the table


def ops_text(model: Any) -> str:
    """The ops an exported model holds (main graph and subgraphs), sorted; ``ml.`` marks
    ai.onnx.ml, other domains are spelled out."""
    import onnx

    ops: set[str] = set()

    def walk(graph: Any) -> None:
        for node in graph.node:
            ops.add(_SHORT_DOMAIN.get(node.domain, node.domain + ".") + node.op_type)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)
                for sub in attr.graphs:
                    walk(sub)

    walk(model.graph)
    return ", ".join(sorted(ops, key=lambda op: (op.count("."), op)))


def status_text(case: Case) -> str:
    return f"xfail: {case.xfail}" if case.xfail else MATCHES


def openvino_text(case: Case, ran: int | None, total: int | None) -> str:
    """The openvino+cpu cell: the xfail reason, or the match and how many of the model's
    top-level nodes openvino ran."""
    if case.openvino_xfail:
        return f"xfail: {case.openvino_xfail}"
    return f"{MATCHES} (openvino ran {ran}/{total} nodes)"


def row_cells(case: Case, ops: str, openvino: str) -> list[str]:
    """The table's cells for a case, in column order after the id."""
    return [case.exporter, case.model, case.variant, ops, status_text(case), openvino]


def documented_rows(text: str | None = None) -> dict[str, list[str]]:
    """case id -> the cells after it, from docs/MODEL_ZOO.md."""
    text = TABLE.read_text(encoding="utf-8") if text is None else text
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = _ROW.match(line)
        if match:
            assert match.group(1) not in rows, f"{TABLE.name}: two rows for {match.group(1)!r}"
            rows[match.group(1)] = [cell.strip() for cell in match.group(2).split("|")]
    return rows


OPS_COLUMN, CPU_COLUMN, OPENVINO_COLUMN = 3, 4, 5


def assert_documented(case: Case, built: Built) -> None:
    """docs/MODEL_ZOO.md has this case's row, with the ops just exported and its status
    (the openvino+cpu cell is checked by ``check_openvino_case``)."""
    rows = documented_rows()
    assert case.id in rows, f"{TABLE.name} has no row for {case.id!r}: run tests/models/zoo_table.py"
    want = row_cells(case, ops_text(built.model), openvino="")[:OPENVINO_COLUMN]
    assert rows[case.id][:OPENVINO_COLUMN] == want, (
        f"{TABLE.name} row {case.id!r} says {rows[case.id]}, the test finds {want}: run tests/models/zoo_table.py")


def assert_openvino_documented(case: Case, ran: int, total: int, report: str = "") -> None:
    """The row's openvino+cpu cell names ``ran`` of ``total`` nodes (``report``, the partition
    report, goes in the failure message: it says why openvino declined each node)."""
    rows = documented_rows()
    assert case.id in rows, f"{TABLE.name} has no row for {case.id!r}: run tests/models/zoo_table.py"
    want = openvino_text(case, ran, total)
    assert rows[case.id][OPENVINO_COLUMN:] == [want], (
        f"{TABLE.name} row {case.id!r} says {rows[case.id][OPENVINO_COLUMN:]} for openvino+cpu, the test finds "
        f"{want!r}: run tests/models/zoo_table.py\n{report}")


def assert_openvino_not_skipped(report: Any) -> None:
    """openvino took part: a provider that failed to start or whose capability() raised is
    skipped with a note, and would make every count here a silent zero."""
    skipped = [note for note in report.notes if "'openvino'" in note and "skipped" in note]
    assert not skipped, "openvino was skipped for this session: " + "; ".join(skipped)


# --------------------------------------------------------------------------- data


def classification(n_classes: int, labels: str, *, n_features: int = 6, seed: int = 0,
                   n_train: int = 160, n_test: int = 24) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X_train, y_train, X_test), float32 features; ``labels`` "int" gives the classes
    non-contiguous integers (10, 20, 30), "str" gives names, so a converter that assumes
    0..k-1 shows."""
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=n_train + n_test, n_features=n_features, n_informative=4,
                               n_redundant=1, n_classes=n_classes, n_clusters_per_class=1,
                               class_sep=1.5, random_state=seed)
    names = {"int": np.array([10, 20, 30, 40], np.int64), "str": np.array(["ant", "bee", "cat", "dog"])}[labels]
    x = x.astype(np.float32)
    return x[:n_train], names[y[:n_train]], x[n_train:]


def regression(*, n_targets: int = 1, n_features: int = 5, seed: int = 0, n_train: int = 160,
               n_test: int = 24) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X_train, y_train, X_test), float32 features, targets of order 100."""
    from sklearn.datasets import make_regression

    x, y = make_regression(n_samples=n_train + n_test, n_features=n_features, n_informative=4,
                           n_targets=n_targets, noise=1.0, random_state=seed)
    x = x.astype(np.float32)
    return x[:n_train], y[:n_train], x[n_train:]


def with_missing(x: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """A copy of ``x`` with about ``fraction`` of its entries NaN (missing values: trees route
    them by the exporter's missing_value_tracks_true / default direction)."""
    rng = np.random.default_rng(seed)
    x = x.copy()
    x[rng.random(x.shape) < fraction] = np.nan
    return x


# --------------------------------------------------------------------------- the check


#: the openvino+cpu column's providers: openvino first, claiming every group it can (however
#: small: the zoo's models are too small for the default min_group_cost), cpu the rest
OPENVINO_PROVIDERS: list[Any] = [("openvino", {"min_group_cost": 0}), "cpu"]


def sessions(built: Built, tmp_path: Path, providers: Sequence[Any] = ("cpu",)) -> tuple[Any, Any]:
    """onnxruntime's session and epoxy's (cpu, or ``providers``) over the same saved model file."""
    import onnxruntime as ort

    import epoxy

    path = tmp_path / "model.onnx"
    path.write_bytes(built.model.SerializeToString())
    reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return reference, epoxy.InferenceSession(str(path), providers=list(providers))


def openvino_placement(model: Any) -> tuple[int, int]:
    """(nodes openvino runs, top-level nodes) for ``model`` with ``OPENVINO_PROVIDERS``."""
    import epoxy

    report = epoxy.InferenceSession(model.SerializeToString(), providers=OPENVINO_PROVIDERS).partition_report()
    return _placement(report)


def _placement(report: Any) -> tuple[int, int]:
    return sum(d.provider == "openvino" for d in report.nodes), len(report.nodes)


def batches(feeds: dict[str, Any]) -> list[dict[str, Any]]:
    """The feeds as given, and their first row alone (a batch of one is what a service sends,
    and the shape a kernel is most likely to get wrong); a map feed is one sample already."""
    if not all(isinstance(v, np.ndarray) and v.ndim >= 1 and len(v) > 1 for v in feeds.values()):
        return [feeds]
    return [feeds, {k: v[:1] for k, v in feeds.items()}]


#: ops the core itself runs (provider "core"); their subgraphs are partitioned over the
#: session's providers, and the report's notes say where the subgraph's nodes went
CONTROL_FLOW = {"If", "Loop", "Scan", "SequenceMap"}
_PLACED = re.compile(r"(\d+) on ([\w.-]+)")


def assert_all_on_cpu(report: Any) -> None:
    """Every node was placed on cpu: nothing unclaimed, nothing elsewhere. Control-flow nodes
    run on "core"; every node of their subgraphs must then be on cpu (the report's notes,
    ``"<node>.<attribute>: N on cpu"``)."""
    assert report.nodes, "the partition report lists no node"
    elsewhere = [(d.node, d.op_type, d.provider) for d in report.nodes
                 if d.provider != "cpu" and not (d.provider == "core" and d.op_type in CONTROL_FLOW)]
    assert not elsewhere, f"nodes not on cpu: {elsewhere}"
    for d in report.nodes:
        if d.provider != "core":
            continue
        notes = [n for n in report.notes if n.startswith(f"{d.node}.")]
        assert notes, f"{d.op_type} node {d.node!r}: no note says where its subgraph ran: {report.notes}"
        for note in notes:
            placed = _PLACED.findall(note)
            assert placed and all(p in ("cpu", "core") for _, p in placed) and "skipped" not in note, note


def _is_text(a: np.ndarray) -> bool:
    return a.dtype.kind in "OUS"


def assert_same_output(name: str, got: Any, want: Any) -> None:
    """One output: tensors by dtype, shape and value; sequences of maps key by key."""
    if isinstance(want, list):
        assert isinstance(got, (list, tuple)), f"{name}: onnxruntime gives a list, epoxy {type(got).__name__}"
        assert len(got) == len(want), f"{name}: {len(got)} entries, onnxruntime {len(want)}"
        for row, (g, w) in enumerate(zip(got, want)):
            assert_same_map(f"{name}[{row}]", g, w)
        return
    if isinstance(want, Mapping):
        assert_same_map(name, got, want)
        return
    want = np.asarray(want)
    assert isinstance(got, np.ndarray), f"{name}: epoxy gives {type(got).__name__}, onnxruntime an array"
    assert got.shape == want.shape, f"{name}: shape {got.shape}, onnxruntime {want.shape}"
    if _is_text(want):
        assert _is_text(got), f"{name}: dtype {got.dtype}, onnxruntime strings"
        assert got.astype(str).tolist() == want.astype(str).tolist(), f"{name}: labels differ"
        return
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype}, onnxruntime {want.dtype}"
    if want.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want, err_msg=f"{name}: labels differ")
    else:
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{name}: values differ")


def assert_same_map(name: str, got: Any, want: Mapping[Any, Any]) -> None:
    assert isinstance(got, Mapping), f"{name}: epoxy gives {type(got).__name__}, onnxruntime a dict"
    assert sorted(map(str, got)) == sorted(map(str, want)), f"{name}: keys {sorted(got)} vs {sorted(want)}"
    assert {type(k) for k in got} == {type(k) for k in want}, f"{name}: key types differ"
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=RTOL, atol=ATOL, err_msg=f"{name}[{key!r}]")


def check(built: Built, tmp_path: Path) -> None:
    """Run one model on both runtimes and compare: placement, output names, every output of
    every batch."""
    reference, session = sessions(built, tmp_path)
    assert_all_on_cpu(session.partition_report())
    compare(reference, session, built)


def compare(reference: Any, session: Any, built: Built) -> None:
    """Output names, and every output of every batch, epoxy's against onnxruntime's."""
    names = [o.name for o in reference.get_outputs()]
    assert [o.name for o in session.get_outputs()] == names
    for feeds in batches(built.feeds):
        want, got = reference.run(None, feeds), session.run(None, feeds)
        assert len(got) == len(want)
        rows = len(next(iter(feeds.values()))) if isinstance(next(iter(feeds.values())), np.ndarray) else 1
        for name, g, w in zip(names, got, want):
            assert_same_output(f"{name} ({rows} rows)", g, w)


def check_case(case: Case, tmp_path: Path) -> None:
    """The zoo's whole check for one case: export, its documented row, then ``check``."""
    built = case.build()
    assert_documented(case, built)
    check(built, tmp_path)


def check_openvino_case(case: Case, tmp_path: Path) -> None:
    """The openvino+cpu column for one case: the outputs with ``OPENVINO_PROVIDERS`` against
    onnxruntime's, and the row's cell naming how many nodes openvino ran."""
    built = case.build()
    reference, session = sessions(built, tmp_path, OPENVINO_PROVIDERS)
    report = session.partition_report()
    assert_openvino_not_skipped(report)
    assert {d.provider for d in report.nodes} <= {"openvino", "cpu", "core"}, report.format()
    compare(reference, session, built)
    assert_openvino_documented(case, *_placement(report), report=report.format())
