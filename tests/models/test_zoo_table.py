"""docs/MODEL_ZOO.md lists exactly the zoo's cases, each with its exporter, model, variant and
statuses (the ops column and openvino's node count are checked by each case's own tests, which
export and run the model)."""

from __future__ import annotations

from zoo_harness import CPU_COLUMN, OPENVINO_COLUMN, OPS_COLUMN, TABLE, documented_rows, openvino_text, row_cells
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
        want = row_cells(case, ops="", openvino="")
        assert len(cells) == len(want), f"{case.id}: {cells}"
        assert (
            cells[:OPS_COLUMN] + cells[CPU_COLUMN:OPENVINO_COLUMN]
            == want[:OPS_COLUMN] + want[CPU_COLUMN:OPENVINO_COLUMN]
        ), f"{case.id}: {cells} vs {want}"
        # the node count is checked by the case's own openvino test, which runs the model
        status = openvino_text(case, 0, 0)
        assert cells[OPENVINO_COLUMN].startswith(status.split(" (")[0]), f"{case.id}: {cells[OPENVINO_COLUMN]!r}"
