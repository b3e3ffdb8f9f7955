"""The exporters' attention becomes ep-cpu's fused attention core: every sdpa-attention
transformer both torch.onnx exporters write runs each layer's scaled dot-product core as one
``FusedAttentionCore`` node (the outputs are compared with onnxruntime's by test_torch_zoo)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the torch zoo needs torch (the models_torch nox session installs the CPU wheel)")
pytest.importorskip("transformers", reason="the torch zoo needs transformers")
pytest.importorskip("onnxscript", reason="torch.onnx's dynamo exporter needs onnxscript")

from hf_models import LAYERS
from model_cache import ModelStore
from torch_harness import Case
from torch_zoo import CASES

import epoxy

SDPA = [pytest.param(case, id=case.id) for case in CASES
        if case.id.startswith(("ts-", "dynamo-")) and "sdpa attention" in case.variant and not case.xfail]


@pytest.mark.parametrize("case", SDPA)
def test_each_layer_runs_one_fused_attention_core(case: Case, store: ModelStore) -> None:
    session = epoxy.InferenceSession(str(case.build(store)), providers=["cpu"])
    ops = [node.op_type for node in session._graph.nodes]
    # whisper's audio classifier runs the encoder only: LAYERS layers for every model here
    assert ops.count("FusedAttentionCore") == LAYERS, f"{case.id}: {sorted(set(ops))}"
    assert "Softmax" not in ops and "IsNaN" not in ops


ROTARY = [pytest.param(case, id=case.id) for case in CASES
          if case.id in ("ts-llama", "dynamo-llama") and not case.xfail]


@pytest.mark.parametrize("case", ROTARY)
def test_each_layer_rotates_q_and_k_in_one_node(case: Case, store: ModelStore) -> None:
    """Llama's rotate-half rotary embedding (constant slice bounds from the dynamo exporter,
    ``shape[-1] // 2`` from the TorchScript one) becomes one ``FusedRotary`` for q and one for
    k in every layer."""
    session = epoxy.InferenceSession(str(case.build(store)), providers=["cpu"])
    ops = [node.op_type for node in session._graph.nodes]
    assert ops.count("FusedRotary") == 2 * LAYERS, f"{case.id}: {sorted(set(ops))}"
    assert "Neg" not in ops, f"{case.id}: a rotate-half pattern was left unfused"
