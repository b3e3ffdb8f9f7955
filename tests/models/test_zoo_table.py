"""docs/MODEL_ZOO.md lists exactly the zoo's cases, each with its exporter, model, variant and
status (the ops column is checked by each case's own test, which exports the model)."""

from __future__ import annotations

from zoo_harness import TABLE, documented_rows, row_cells
from zoo_table import all_cases


def test_table_rows_are_the_cases() -> None:
    rows = documented_rows()
    ids = [case.id for case in all_cases()]
    assert len(ids) == len(set(ids)), "two cases share an id"
    assert sorted(rows) == sorted(ids), (f"{TABLE.name} out of date (run tests/models/zoo_table.py): "
                                         f"rows without a case {sorted(set(rows) - set(ids))}, "
                                         f"cases without a row {sorted(set(ids) - set(rows))}")


def test_table_says_what_each_case_is_and_how_it_fares() -> None:
    rows = documented_rows()
    for case in all_cases():
        cells = rows[case.id]
        want = row_cells(case, ops="")
        assert cells[:3] + cells[4:] == want[:3] + want[4:], f"{case.id}: {cells} vs {want}"
