"""The onnx package's light_* models: their supported parts (all of them, today) convert."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from coreml_harness import interpret

from epoxy_ep_coreml import compile_model

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = sorted(p.stem.removeprefix("light_") for p in LIGHT.glob("light_*.onnx"))
#: small enough to also evaluate with the test interpreter. Their weights are ConstantOfShape
#: fills, so every logit is the same ~1e10 sum and the softmax output only says "uniform"
#: when accumulation is exact (float64 here, as in onnxruntime); ep-cpu's float32 sums differ
#: by a few ULPs between channels and turn it one-hot. Element-wise comparison is therefore
#: meaningless; the per-op tests carry the numerical checks.
INTERPRETED = {"squeezenet", "shufflenet"}


def test_light_models_are_present():
    assert len(MODELS) == 9, MODELS


@pytest.mark.parametrize("name", MODELS)
def test_light_model_converts(name, tmp_path):
    path = LIGHT / f"light_{name}.onnx"
    result = compile_model(path, tmp_path)
    s = result.summary
    assert s["coreml_nodes"] == s["nodes"], s["declined"]
    assert s["groups"] == 1 and len(result.packages) == 1
    package = result.packages[0]
    assert (package / "Manifest.json").is_file()
    assert json.loads(package.with_suffix(".json").read_text())["outputs"][0]["coreml"] == "output_0"
    if name in INTERPRETED:
        m = onnx.load(path)
        data = [i for i in m.graph.input if i.name not in {t.name for t in m.graph.initializer}]
        shape = [d.dim_value for d in data[0].type.tensor_type.shape.dim]
        feeds = {data[0].name: np.random.default_rng(0).uniform(0, 1, shape).astype(np.float32)}
        got, _ops = interpret(result.groups[0], feeds)
        (prob,) = got.values()
        assert prob.shape == tuple(d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim)
        np.testing.assert_allclose(prob.sum(), 1.0, rtol=1e-4)
        np.testing.assert_allclose(prob, 1.0 / prob.size, rtol=1e-3)
