"""Write docs/MODEL_ZOO.md from the zoo's cases: ``python tests/models/zoo_table.py``.

Exports every case (the wheels of the ``models_ml`` nox session are needed) to list the ops it
holds; a case's status is "matches onnxruntime" or its strict xfail reason. Each zoo test
checks its own row against what it just exported and found, and ``test_zoo_table.py`` checks
that the table has no row without a case, so a stale table fails CI.
"""

from __future__ import annotations

import importlib.metadata
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from zoo_harness import TABLE, Case, openvino_placement, openvino_text, ops_text, row_cells  # after the path

PACKAGES = ("scikit-learn", "skl2onnx", "lightgbm", "xgboost-cpu", "xgboost", "onnxmltools", "onnxruntime", "onnx")

INTRO = """\
# Model zoo: classical ML as the real exporters write it

Every row is a model fitted in `tests/models/` on small seeded data (nothing is downloaded),
exported by the real exporter, then run on the same inputs by onnxruntime and by epoxy with
`providers=["cpu"]`. A row "matches onnxruntime" when every node was placed on cpu
(`partition_report()`; control-flow nodes run on the core with their subgraphs on cpu), and
every output agrees, for the test batch and for its first row alone: labels exactly (same
dtype; string labels as strings), scores and probabilities within rtol 1e-4 / atol 1e-5 (same
dtype and shape), ZipMap's list of dicts key by key (same keys, same key types). An "xfail" row is a
strict `pytest.mark.xfail` whose reason is shown: when it starts to pass, CI fails until the
mark and this table are updated.

The "epoxy openvino+cpu" column runs the same check with
`providers=[("openvino", {"min_group_cost": 0}), "cpu"]`: openvino takes every group of nodes it
claims, however small (these models are too small for the default `min_group_cost`), and cpu
the rest; it says how many of the model's top-level nodes openvino ran. Its outputs are held to
the same tolerances against onnxruntime.

CI runs these in the `models_ml` nox session (`nox -s models_ml`). Each test also checks its
row here against the ops it just exported and its status; regenerate the table with
`python tests/models/zoo_table.py` (in that session's venv, or any venv with its wheels). The
session pins the exporters (skl2onnx 1.20, onnxmltools 1.16): the ops column holds for them.

Classifiers come in four label variants (binary / multiclass, integer classes 10/20/30 or
string classes) with the exporter's default options, so probabilities leave through
`ai.onnx.ml` ZipMap as a list of dicts; `zipmap=False` variants leave them as a tensor.
In the ops column `ml.` marks the `ai.onnx.ml` domain; other non-default domains are spelled out.
"""

NOT_IN_ZOO = """\
## Not in the zoo, and why

Models a user may bring that the exporters or onnxruntime (the reference) cannot handle with
these versions, so there is nothing to compare epoxy with:

- `HistGradientBoostingClassifier` / `HistGradientBoostingRegressor` (scikit-learn 1.9.1):
  skl2onnx 1.20.0 fails to convert them (`TypeError: Field onnx.AttributeProto.ints: Expected an
  int, got a boolean` while building TreeEnsembleClassifier/Regressor).
- `IsolationForest` with skl2onnx's default target opset: skl2onnx raises ("version 4 of domain
  'ai.onnx.ml' not supported yet ... specify target_opset={'ai.onnx.ml': 3}"); the zoo's case
  passes `target_opset={"": 22, "ai.onnx.ml": 3}` as the message says.
- float64 inputs (`to_onnx(model, X)` with a float64 `X`, e.g. straight from a DataFrame):
  onnxruntime 1.32 refuses what skl2onnx writes for LogisticRegression, SVC(probability=True)
  and KNeighborsClassifier (ZipMap fed a double tensor: invalid graph), GradientBoostingClassifier
  (ZipMap output declared `seq(map(string, tensor(double)))`), RandomForestRegressor and
  GradientBoostingRegressor (TreeEnsembleRegressor output declared double at ai.onnx.ml 3) and
  SVR (no double SVMRegressor kernel). epoxy runs all of them today, with nothing to compare
  against; where a node returns another dtype than the model declares for a graph output
  (the double-declared tree regressors compute float), the run warns once naming the output
  (`core/tests/core/test_ort_api.py::test_output_dtype_other_than_declared_is_loud`).
  LinearRegression and RandomForestClassifier in float64 run on both and are in the table.
- `TfidfVectorizer`: skl2onnx 1.20 always writes `com.microsoft::Tokenizer` (ep-cpu runs it);
  its options (`separators`, `tokenexp`, `nan`, `keep_empty_string`, `locale`) change only the
  Tokenizer's attributes. Both tokenizer modes are in the table, and the model cut before and
  after its Tokenizer (every other op) as rows of their own.
  The zoo sets `locale="C"`: StringNormalizer's default `en_US.UTF-8` makes onnxruntime fail to
  create the session on machines without that locale.
- onnxmltools 1.16's XGBoost converter has no `zipmap` option: XGBClassifier probabilities are
  always a tensor.
"""


def all_cases() -> list[Case]:
    """Every zoo case, in table order."""
    import test_boosting_zoo
    import test_sklearn_zoo

    return list(test_sklearn_zoo.CASES) + list(test_boosting_zoo.CASES)


def _versions() -> str:
    found = []
    for name in PACKAGES:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return "Generated with " + ", ".join(found) + "."


def render(cases: list[Case], ops: dict[str, str], openvino: dict[str, str]) -> str:
    """The whole document."""
    lines = [INTRO, _versions(), ""]
    counts = {"runs": sum(not c.xfail for c in cases), "xfail": sum(bool(c.xfail) for c in cases)}
    ov = {"runs": sum(not c.openvino_xfail for c in cases), "xfail": sum(bool(c.openvino_xfail) for c in cases)}
    lines.append(f"{len(cases)} models: {counts['runs']} match onnxruntime on cpu, {counts['xfail']} xfail; "
                 f"{ov['runs']} match onnxruntime on openvino+cpu, {ov['xfail']} xfail.")
    lines.append("")
    lines.append("| case | exporter | model | variant | ONNX ops | epoxy cpu | epoxy openvino+cpu |")
    lines.append("|---|---|---|---|---|---|---|")
    for case in cases:
        lines.append("| " + " | ".join([f"`{case.id}`", *row_cells(case, ops[case.id], openvino[case.id])]) + " |")
    lines += ["", NOT_IN_ZOO]
    return "\n".join(lines)


def main() -> None:
    warnings.simplefilter("ignore")
    cases = all_cases()
    ops, openvino = {}, {}
    for case in cases:
        model = case.build().model
        ops[case.id] = ops_text(model)
        openvino[case.id] = openvino_text(case, *openvino_placement(model))
    TABLE.write_text(render(cases, ops, openvino), encoding="utf-8")
    print(f"wrote {TABLE} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
