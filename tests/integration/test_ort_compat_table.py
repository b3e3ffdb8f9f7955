"""docs/ORT_COMPAT.md cannot rot: every public name of the installed onnxruntime's Python API
has a row, and every name a row calls "same" or "different" exists on the epoxy object.

The names come from onnxruntime itself (``dir()`` of the module, of its classes and enums,
and the exception classes of ``onnxruntime.capi.onnxruntime_pybind11_state``), so a new
onnxruntime release that adds a name fails here until the table says what epoxy does
about it. epoxy's side is checked on real objects (a session over a one-node model, its
``NodeArg``, ``ModelMetadata``, ``IOBinding``; fresh options; an ``OrtValue``), since many
attributes exist only on instances.
"""

from __future__ import annotations

import importlib.util
import re
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

ort = pytest.importorskip("onnxruntime")

import epoxy  # noqa: E402 - after the skip
import epoxy.capi.onnxruntime_pybind11_state as epoxy_state  # noqa: E402

TABLE = Path(__file__).resolve().parents[2] / "docs" / "ORT_COMPAT.md"
STATUSES = ("same", "different", "not offered")
MODULE = "onnxruntime"
EXCEPTIONS = "onnxruntime.capi.onnxruntime_pybind11_state"
CLASSES = ("SessionOptions", "InferenceSession", "RunOptions", "OrtValue", "IOBinding", "NodeArg", "ModelMetadata")
ENUMS = ("GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder")
GROUPS = (MODULE, *CLASSES, *ENUMS, EXCEPTIONS)

_HEADING = re.compile(r"^## `([^`]+)`")
_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*([^|]*?)\s*\|(.*)\|\s*$")


def parse_table(text: str) -> dict[str, dict[str, tuple[str, str]]]:
    """group (the backticked name in a ``##`` heading) -> name -> (status, notes)."""
    groups: dict[str, dict[str, tuple[str, str]]] = {}
    group = None
    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading:
            group = heading.group(1)
            groups.setdefault(group, {})
            continue
        if line.startswith("## "):
            group = None
            continue
        row = _ROW.match(line)
        if group is not None and row:
            name, status, notes = row.group(1), row.group(2).strip(), row.group(3).strip()
            assert name not in groups[group], f"{group}: two rows for {name!r}"
            groups[group][name] = (status, notes)
    return groups


LAZY_SUBMODULES = frozenset({"quantization", "transformers", "tools", "training", "datasets"})


def _public(obj: Any) -> list[str]:
    return sorted(n for n in dir(obj) if not n.startswith("_"))


def onnxruntime_names() -> dict[str, list[str]]:
    """The public API of the installed onnxruntime, by group."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    # these submodules appear in dir() only once something imported them (onnxruntime's
    # quantization and transformer tools, not its API): left out whatever ran before
    names = {MODULE: [n for n in _public(ort) if not (isinstance(getattr(ort, n), types.ModuleType)
                                                     and n in LAZY_SUBMODULES)]}
    for cls in (*CLASSES, *ENUMS):
        names[cls] = _public(getattr(ort, cls))
    names[EXCEPTIONS] = sorted(n for n in _public(state)
                               if isinstance(getattr(state, n), type) and issubclass(getattr(state, n), BaseException))
    return names


@pytest.fixture(scope="module")
def table() -> dict[str, dict[str, tuple[str, str]]]:
    return parse_table(TABLE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def epoxy_objects() -> dict[str, Any]:
    """group -> the epoxy object whose attributes the table's rows describe."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "one_node",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = epoxy.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return {
        MODULE: epoxy,
        "SessionOptions": epoxy.SessionOptions(),
        "InferenceSession": sess,
        "RunOptions": epoxy.RunOptions(),
        "OrtValue": epoxy.OrtValue.ortvalue_from_numpy(np.zeros((1, 2), np.float32)),
        "IOBinding": sess.io_binding(),
        "NodeArg": sess.get_inputs()[0],
        "ModelMetadata": sess.get_modelmeta(),
        **{name: getattr(epoxy, name) for name in ENUMS},
        EXCEPTIONS: epoxy_state,
    }


def has(group: str, obj: Any, name: str) -> bool:
    """Whether epoxy's ``obj`` offers ``name``: an attribute, a subpackage of the module,
    or (enums) an attribute of a member such as ``name``/``value``."""
    if hasattr(obj, name):
        return True
    if group == MODULE:
        return importlib.util.find_spec(f"epoxy.{name}") is not None
    if group in ENUMS:
        return hasattr(next(iter(obj)), name)
    return False


def test_the_table_has_every_group(table: dict[str, dict[str, tuple[str, str]]]) -> None:
    assert set(GROUPS) <= set(table), f"sections missing from {TABLE.name}: {sorted(set(GROUPS) - set(table))}"


@pytest.mark.parametrize("group", GROUPS)
def test_every_onnxruntime_name_has_a_row(group: str, table: dict[str, dict[str, tuple[str, str]]]) -> None:
    missing = [n for n in onnxruntime_names()[group] if n not in table.get(group, {})]
    assert not missing, (f"onnxruntime {ort.__version__} has names {TABLE.name} does not describe under "
                         f"`{group}`: {missing}; add a row saying same / different / not offered")


@pytest.mark.parametrize("group", GROUPS)
def test_rows_are_well_formed(group: str, table: dict[str, dict[str, tuple[str, str]]]) -> None:
    for name, (status, notes) in table.get(group, {}).items():
        assert status in STATUSES, f"{group}.{name}: status {status!r} is not one of {STATUSES}"
        if status != "same":
            assert notes, f"{group}.{name}: a {status!r} row must say how (or what to use instead)"


@pytest.mark.parametrize("group", GROUPS)
def test_offered_names_exist_in_epoxy(group: str, table: dict[str, dict[str, tuple[str, str]]],
                                      epoxy_objects: dict[str, Any]) -> None:
    obj = epoxy_objects[group]
    absent = [
        n for n, (status, _) in table.get(group, {}).items() if status != "not offered" and not has(group, obj, n)
    ]
    assert not absent, f"{TABLE.name} says epoxy offers `{group}` names it does not have: {absent}"


@pytest.mark.parametrize("group", GROUPS)
def test_not_offered_names_that_exist_say_they_raise(group: str, table: dict[str, dict[str, tuple[str, str]]],
                                                     epoxy_objects: dict[str, Any]) -> None:
    """A name epoxy has but marks "not offered" must be one that refuses (raises, saying
    what to use); otherwise epoxy grew the feature and the row is stale."""
    obj = epoxy_objects[group]
    stale = [n for n, (status, notes) in table.get(group, {}).items()
             if status == "not offered" and has(group, obj, n) and "raises" not in notes]
    assert not stale, f"`{group}` names marked not offered that epoxy has (update their rows): {stale}"


def test_exception_classes_are_the_same_objects_on_every_path() -> None:
    import epoxy.capi
    import epoxy.capi._pybind_state as pybind_state

    for name in onnxruntime_names()[EXCEPTIONS]:
        cls = getattr(epoxy_state, name)
        assert isinstance(cls, type) and issubclass(cls, epoxy.EpoxyError), name
        assert getattr(epoxy.capi, name) is cls and getattr(pybind_state, name) is cls, name


def test_the_totals_line_matches_the_rows(table: dict[str, dict[str, tuple[str, str]]]) -> None:
    rows = [status for group in table.values() for status, _ in group.values()]
    want = f"In all, {len(rows)} names: " + ", ".join(f"{rows.count(s)} {s}" for s in STATUSES) + "."
    assert want in TABLE.read_text(encoding="utf-8"), f"update the totals line in {TABLE.name} to: {want}"
