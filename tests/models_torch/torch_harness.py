"""The torch zoo's check and its table rows.

A case is a model file (written by torch.onnx, or by one of onnxruntime's tools from such a
file) and the inputs to run it with. Its cpu check: every node placed on cpu, every output
of the run batch and of its first row alone equal to onnxruntime's (same names, dtype and
shape; values within the case's tolerance). Its openvino check: the same comparison with
``providers=["openvino", "cpu"]`` (ep-openvino compiles at f32 by default, so there is no
bf16 to allow for), and the share of nodes openvino took. Each check also compares its
cells of the case's row in docs/MODEL_ZOO_TORCH.md with what it found.

Tolerances, against onnxruntime's outputs:

- float32 models: rtol 1e-3, atol 1e-4 (both runtimes sum in float32, in other orders; the
  tiny models' outputs are of order 1).
- dynamic quantization (DynamicQuantizeLinear -> MatMulInteger, DynamicQuantizeMatMul ...):
  rtol 1e-3, atol 1e-3. Both quantize activations from the same min/max, so they agree
  exactly but where an activation falls on a rounding boundary and float32 noise (the
  scale, the ops before) moves it one uint8 step; 1e-3 is well under one such step's effect
  on an output (scale of order 1e-2) and 10x the float32 noise.
- static quantization: the output is DequantizeLinear of a uint8 tensor, so the outputs can
  differ only by whole steps of that scale; atol is one step (the output's DequantizeLinear
  scale, read from the model), rtol 0.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1] / "models"))  # tests/models: read-only helpers

from model_cache import ModelStore
from zoo_harness import assert_all_on_cpu, batches, ops_text

TABLE = Path(__file__).resolve().parents[2] / "docs" / "MODEL_ZOO_TORCH.md"
MATCHES = "matches onnxruntime"
FLOAT_TOL = (1e-3, 1e-4)
DYNAMIC_TOL = (1e-3, 1e-3)
COLUMNS = ("case", "exporter", "model", "variant", "opset", "ONNX ops", "epoxy cpu", "epoxy openvino+cpu")
_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|(.*)\|\s*$")


@dataclass(frozen=True)
class Case:
    """One zoo entry. ``fused`` names ops (as the table spells them) the model must hold:
    what the tool that wrote it is there to produce. ``quantized`` is None, "dynamic" or
    "static" (the tolerance). ``xfail``/``raises`` and ``openvino_xfail``/``openvino_raises``
    are the precise reason a check fails today and the exception it fails with."""

    id: str
    exporter: str
    model: str
    variant: str
    build: Callable[[ModelStore], Path] = field(repr=False, compare=False)
    feeds: Callable[[], dict[str, np.ndarray]] = field(repr=False, compare=False)
    fused: frozenset[str] = frozenset()
    quantized: str | None = None
    xfail: str | None = None
    raises: tuple[type[BaseException], ...] | None = None
    openvino_xfail: str | None = None
    openvino_raises: tuple[type[BaseException], ...] | None = None


# --------------------------------------------------------------------------- the table


def opset(model: Any) -> str:
    return str(next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), ""))


def op_set(model: Any) -> set[str]:
    return set(ops_text(model).split(", "))


def cpu_cell(case: Case) -> str:
    return f"xfail: {case.xfail}" if case.xfail else MATCHES


def openvino_cell(case: Case, share: str | None) -> str:
    """"xfail: ..." or "matches onnxruntime; openvino 12/15 nodes"."""
    return f"xfail: {case.openvino_xfail}" if case.openvino_xfail else f"{MATCHES}; {share}"


def row_cells(case: Case, model: Any, share: str | None) -> list[str]:
    """The cells after the id, in ``COLUMNS`` order."""
    return [case.exporter, case.model, case.variant, opset(model), ops_text(model), cpu_cell(case),
            openvino_cell(case, share)]


def documented_rows(text: str | None = None) -> dict[str, list[str]]:
    """case id -> the cells after it, from docs/MODEL_ZOO_TORCH.md."""
    text = TABLE.read_text(encoding="utf-8") if text is None else text
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = _ROW.match(line)
        if match:
            assert match.group(1) not in rows, f"{TABLE.name}: two rows for {match.group(1)!r}"
            rows[match.group(1)] = [cell.strip() for cell in match.group(2).split("|")]
    return rows


def documented_row(case: Case) -> list[str]:
    rows = documented_rows()
    assert case.id in rows, f"{TABLE.name} has no row for {case.id!r}: run tests/models_torch/zoo_table.py"
    return rows[case.id]


def _stale(case: Case, column: str, said: Any, found: Any) -> str:
    return (f"{TABLE.name} row {case.id!r}, {column}: says {said!r}, the test finds {found!r}: "
            "run tests/models_torch/zoo_table.py")


# --------------------------------------------------------------------------- comparing


def _output_step(model: Any, output: str) -> float | None:
    """The scale of the DequantizeLinear that writes ``output``, if its scale is a constant."""
    from onnx import numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if output in node.output and node.op_type == "DequantizeLinear" and node.input[1] in inits:
            return float(np.max(numpy_helper.to_array(inits[node.input[1]])))
    return None


def tolerances(case: Case, model: Any) -> dict[str, tuple[float, float]]:
    """output name -> (rtol, atol): see the module docstring."""
    out = {}
    for output in model.graph.output:
        if case.quantized == "static":
            step = _output_step(model, output.name)
            assert step is not None, f"{case.id}: output {output.name!r} is not written by a DequantizeLinear"
            out[output.name] = (0.0, step * 1.0001)
        else:
            out[output.name] = DYNAMIC_TOL if case.quantized == "dynamic" else FLOAT_TOL
    return out


def assert_same_outputs(names: list[str], got: list[Any], want: list[Any],
                        tol: Mapping[str, tuple[float, float]], label: str) -> None:
    assert len(got) == len(want), f"{label}: {len(got)} outputs, onnxruntime {len(want)}"
    for name, g, w in zip(names, got, want):
        w = np.asarray(w)
        assert isinstance(g, np.ndarray), f"{label} {name}: epoxy gives {type(g).__name__}"
        assert g.shape == w.shape, f"{label} {name}: shape {g.shape}, onnxruntime {w.shape}"
        assert g.dtype == w.dtype, f"{label} {name}: dtype {g.dtype}, onnxruntime {w.dtype}"
        assert np.isfinite(w).all() or w.dtype.kind not in "fc", f"{label} {name}: onnxruntime gives NaN/inf"
        rtol, atol = tol[name]
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{label} {name}: values differ")


def compare_runs(case: Case, path: Path, session: Any) -> None:
    """``session`` against onnxruntime on the case's feeds and on their first row alone, each
    three times."""
    import onnx
    import onnxruntime as ort

    reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in reference.get_outputs()]
    assert [o.name for o in session.get_outputs()] == names
    tol = tolerances(case, onnx.load(str(path), load_external_data=False))
    cases = [(feeds, reference.run(None, feeds)) for feeds in batches(case.feeds())]
    # three rounds over the batch sizes, alternating: epoxy's shape cache (epoxy.run.shape_cache)
    # runs a shape's first sighting in full, snapshots on the second, reuses from the third
    for round_ in range(3):
        for feeds, want in cases:
            rows = len(next(iter(feeds.values())))
            assert_same_outputs(names, session.run(None, feeds), want, tol, f"{rows} rows, run {round_ + 1}:")


# --------------------------------------------------------------------------- the checks


def check_cpu(case: Case, store: ModelStore) -> None:
    """The cpu check: the model holds the ops the case claims, the table row says what this
    test finds, every node on cpu, every output equal to onnxruntime's."""
    import onnx

    import epoxy

    path = case.build(store)
    model = onnx.load(str(path))
    missing = case.fused - op_set(model)
    assert not missing, f"{case.id}: the model lacks {sorted(missing)} (it holds {ops_text(model)})"
    said, found = documented_row(case)[:6], row_cells(case, model, None)[:6]
    assert said == found, _stale(case, "exporter..epoxy cpu", said, found)
    session = epoxy.InferenceSession(str(path), providers=["cpu"])
    assert_all_on_cpu(session.partition_report())
    compare_runs(case, path, session)


def openvino_share(report: Any) -> str:
    """"openvino N/M nodes": how many of the placed nodes openvino took."""
    nodes = report.nodes
    return f"openvino {sum(d.provider == 'openvino' for d in nodes)}/{len(nodes)} nodes"


def check_openvino(case: Case, store: ModelStore) -> None:
    """The openvino+cpu check: outputs equal to onnxruntime's, and the row's last cell says
    this test's share of nodes on openvino."""
    import epoxy

    path = case.build(store)
    session = epoxy.InferenceSession(str(path), providers=["openvino", "cpu"])
    compare_runs(case, path, session)
    said, found = documented_row(case)[6], openvino_cell(case, openvino_share(session.partition_report()))
    assert said == found, _stale(case, "epoxy openvino+cpu", said, found)


def openvino_found(case: Case, store: ModelStore) -> str:
    """What the openvino check would find, for the table generator: the share, or raises."""
    import epoxy

    path = case.build(store)
    session = epoxy.InferenceSession(str(path), providers=["openvino", "cpu"])
    compare_runs(case, path, session)
    return openvino_share(session.partition_report())
