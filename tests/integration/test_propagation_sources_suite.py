"""The loader's skip of onnx's data-propagating inference (epoxy.load.propagation_sources)
held to onnx itself on every model of the ONNX backend suite (~6 s): wherever the check says
propagation can change no type, inference with it gives exactly the types inference without
it gave (1,699 of the 2,033 skip it with onnx 1.23; the exporter-made CNNs of bench/ too,
the transformers do not), and the light models the bench times skip it."""

from __future__ import annotations

import warnings

import onnx
import pytest
from onnx import shape_inference

from epoxy.load.propagation_sources import propagation_has_no_source
from epoxy_sdk.conformance.backend_suite import all_cases

CASES = all_cases()


def _model(case) -> onnx.ModelProto:  # type: ignore[no-untyped-def]
    return case.model if case.model is not None else case.load_model()


def test_where_nothing_can_propagate_propagation_infers_nothing_more():
    skipped = differing = 0
    for case in CASES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = _model(case)
        try:
            first = shape_inference.infer_shapes(model, check_type=False, strict_mode=True, data_prop=False)
        except Exception:  # noqa: BLE001 - the loader then settles declarations and runs both
            continue
        if not propagation_has_no_source(first):
            continue
        skipped += 1
        full = shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
        differing += full.SerializeToString() != first.SerializeToString()
    assert differing == 0
    assert skipped > len(CASES) // 2  # the skip is common (CNN-like graphs), not a corner


@pytest.mark.parametrize("name", ["squeezenet", "resnet50", "inception_v1", "densenet121", "shufflenet"])
def test_light_models_skip_it(name):
    case = next(c for c in CASES if c.kind == "real" and name in c.name)
    first = shape_inference.infer_shapes(_model(case), check_type=False, strict_mode=True, data_prop=False)
    assert propagation_has_no_source(first)
