"""Every torch zoo case on epoxy: with providers=["cpu"] (every node on cpu, outputs equal to
onnxruntime's) and with providers=["openvino", "cpu"] (outputs equal, openvino's share of the
nodes as docs/MODEL_ZOO_TORCH.md says)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch", reason="the torch zoo needs torch (the models_torch nox session installs the CPU wheel)")
pytest.importorskip("transformers", reason="the torch zoo needs transformers")
pytest.importorskip("onnxscript", reason="torch.onnx's dynamo exporter needs onnxscript")

from model_cache import ModelStore
from torch_harness import Case, check_cpu, check_openvino
from torch_zoo import CASES

import epoxy

# onnxruntime's session optimizer writes com.microsoft's SimplifiedLayerNormalization in the
# default domain (ortsess-llama); epoxy loads it as onnxruntime does, and says so
pytestmark = pytest.mark.filterwarnings("ignore:.*No Op registered for SimplifiedLayerNormalization")


def _params(xfail_of: str) -> list[Any]:
    out = []
    for case in CASES:
        reason, raises = getattr(case, xfail_of), getattr(case, xfail_of.replace("xfail", "raises"))
        marks = (pytest.mark.xfail(strict=True, reason=reason, raises=raises),) if reason else ()
        out.append(pytest.param(case, id=case.id, marks=marks))
    return out


@pytest.mark.parametrize("case", _params("xfail"))
def test_cpu(case: Case, store: ModelStore) -> None:
    check_cpu(case, store)


@pytest.mark.parametrize("case", _params("openvino_xfail"))
def test_openvino_cpu(case: Case, store: ModelStore) -> None:
    if "openvino" not in epoxy.get_available_providers():
        pytest.skip(f"epoxy's openvino provider is not available here (installed: {epoxy.get_all_providers()})")
    check_openvino(case, store)
