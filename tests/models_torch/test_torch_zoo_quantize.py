"""Every model ``epoxy quantize`` writes from an exporter-made zoo model loads and runs in
onnxruntime and in epoxy, and the two agree on it (issue #19).

The exporter-made cases (TorchScript and dynamo; not the zoo's cases that onnxruntime's own
tools wrote) go through ``epoxy.quantization.quantize_model`` in three modes: static QDQ
(calibrated on the case's own feeds with seeded noise), dynamic int8 and float16. The tool
itself refuses to return a model that fails the onnx checker or a run on either runtime; on
top of that, epoxy's outputs on the quantized model are compared with onnxruntime's.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
import pytest

pytest.importorskip("torch", reason="the torch zoo needs torch (the models_torch nox session installs the CPU wheel)")
pytest.importorskip("transformers", reason="the torch zoo needs transformers")
pytest.importorskip("onnxscript", reason="torch.onnx's dynamo exporter needs onnxscript")

from model_cache import ModelStore
from torch_harness import Case
from torch_zoo import CASES
from zoo_harness import batches

import epoxy
from epoxy.quantization import quantize_model

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

EXPORTED = [case for case in CASES if case.id.split("-", 1)[0] in ("ts", "dynamo")]
MODES = ("static", "dynamic", "fp16")
#: by default each exporter-made case is quantized in one mode, the modes rotating over the cases
#: (each mode meets CNNs and transformers of both exporters): 26 cases, not 78, to keep CI's
#: suite well under its budget; ``EPOXY_ZOO_QUANTIZE_ALL=1`` runs every case in every mode
ALL_MODES = os.environ.get("EPOXY_ZOO_QUANTIZE_ALL", "") == "1"
PAIRS = [(case, mode) for i, case in enumerate(EXPORTED) for mode in (MODES if ALL_MODES else (MODES[i % len(MODES)],))]

#: relative L2 distance allowed between epoxy's and onnxruntime's outputs ON THE QUANTIZED
#: MODEL (not against float32): static QDQ is run by onnxruntime through integer kernels
#: (QLinearConv / QLinearMatMul) and by epoxy as written, so an activation can land one
#: quantization step apart; float16 models differ by float16 rounding of the accumulations
AGREEMENT = {"static": 5e-2, "dynamic": 1e-3, "fp16": 2e-2}


#: initializer types each mode must have written (tiny zoo models may not shrink: per-channel
#: scales and the Q/DQ nodes weigh as much as their few weights save)
STORED = {"static": {onnx.TensorProto.INT8, onnx.TensorProto.UINT8},
          "dynamic": {onnx.TensorProto.INT8, onnx.TensorProto.UINT8},
          "fp16": {onnx.TensorProto.FLOAT16}}


def _calibration(case: Case, count: int = 5) -> list[dict[str, np.ndarray]]:
    """The case's feeds and seeded variations of them (float inputs jittered; integer
    inputs such as token ids kept), so calibration has several batches to hold one out."""
    rng = np.random.default_rng(7)
    base = next(iter(batches(case.feeds())))
    out = []
    for _ in range(count):
        feed = {}
        for name, value in base.items():
            value = np.asarray(value)
            if value.dtype.kind == "f":
                value = (value + rng.normal(0, 0.1, value.shape)).astype(value.dtype)
            feed[name] = value
        out.append(feed)
    return out


def _relative(got: Any, want: Any) -> float:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-12))


@pytest.mark.parametrize(("case", "mode"), [pytest.param(c, m, id=f"{m}-{c.id}") for c, m in PAIRS])
def test_quantized_zoo_model_runs_on_both_runtimes(case: Case, mode: str, store: ModelStore) -> None:
    import onnxruntime as ort

    path = case.build(store)
    # real inputs for every mode (dynamic and fp16 measure accuracy on them): made-up ones
    # cannot satisfy a decoder whose mask spans past + new tokens
    model, report = quantize_model(str(path), mode=mode, calibration=_calibration(case), providers=("cpu",),
                                   latency_runs=1)
    stored = {init.data_type for init in model.graph.initializer}
    wanted = STORED[mode]
    source_ops = {node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node}
    if mode == "dynamic" and not source_ops & {"MatMul", "Gemm"}:  # a CNN of convolutions only
        assert not stored & wanted, f"{case.id} {mode}: int8 weights without a MatMul/Gemm to use them"
        assert any("changed no compute node" in w for w in report.warnings), report.warnings
    else:
        assert stored & wanted, f"{case.id} {mode}: no initializer of {sorted(wanted)} (the tool quantized nothing)"
    assert report.checks, f"{case.id} {mode}: the report lists no passed checks"
    data = model.SerializeToString()
    reference = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    session = epoxy.InferenceSession(data, providers=["cpu"])
    names = [o.name for o in reference.get_outputs()]
    assert [o.name for o in session.get_outputs()] == names
    for feeds in batches(case.feeds()):
        want = reference.run(None, feeds)
        got = session.run(None, feeds)
        for name, g, w in zip(names, got, want):
            assert np.shape(g) == np.shape(w), f"{case.id} {mode} {name}: shape {np.shape(g)} vs {np.shape(w)}"
            if np.asarray(w).dtype.kind != "f":
                np.testing.assert_array_equal(g, w, err_msg=f"{case.id} {mode} {name}")
                continue
            assert np.isfinite(w).all(), f"{case.id} {mode} {name}: onnxruntime gives NaN/inf"
            error = _relative(g, w)
            assert error <= AGREEMENT[mode], f"{case.id} {mode} {name}: epoxy vs onnxruntime {error:.2e}"
