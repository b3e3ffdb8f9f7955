"""docs/MODEL_ZOO_TORCH.md lists exactly the torch zoo's cases, each with its exporter, model,
variant and statuses (the opset, ops and openvino share are checked by each case's own tests,
which export and run the model)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("torch", reason="the torch zoo needs torch (the models_torch nox session installs the CPU wheel)")
pytest.importorskip("transformers", reason="the torch zoo needs transformers")

from torch_harness import MATCHES, TABLE, cpu_cell, documented_rows


def _generator() -> ModuleType:
    """zoo_table.py under a name of its own (tests/models has a zoo_table module too)."""
    path = Path(__file__).resolve().parent / "zoo_table.py"
    spec = importlib.util.spec_from_file_location("torch_zoo_table", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_table_rows_are_the_cases() -> None:
    rows = documented_rows()
    ids = [case.id for case in _generator().all_cases()]
    assert len(ids) == len(set(ids)), "two cases share an id"
    assert list(rows) == ids, (f"{TABLE.name} out of date (run tests/models_torch/zoo_table.py): "
                               f"rows without a case {sorted(set(rows) - set(ids))}, "
                               f"cases without a row {sorted(set(ids) - set(rows))}")


def test_table_says_what_each_case_is_and_how_it_fares() -> None:
    rows = documented_rows()
    for case in _generator().all_cases():
        cells = rows[case.id]
        assert cells[:3] == [case.exporter, case.model, case.variant], f"{case.id}: {cells[:3]}"
        assert cells[5] == cpu_cell(case), f"{case.id}: cpu cell {cells[5]!r}"
        want = f"xfail: {case.openvino_xfail}" if case.openvino_xfail else MATCHES + "; openvino "
        assert cells[6].startswith(want), f"{case.id}: openvino+cpu cell {cells[6]!r}"
