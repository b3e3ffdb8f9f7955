"""Whole models: the onnx package's light_* models and random-weight networks run entirely on
openvino (one fused group) and match the cpu provider."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from ov_test_models import conv_net

import epoxy

LIGHT = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
         "squeezenet", "vgg19", "zfnet512")
REPO = Path(__file__).resolve().parents[4]


def _light_path(name: str) -> Path:
    return Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"


def _random_feeds(model: onnx.ModelProto, rng) -> dict[str, np.ndarray]:
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in inits:
            continue
        tt = value.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in tt.shape.dim]
        feeds[value.name] = rng.standard_normal(shape).astype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
    return feeds


def _compare(got, ref, rtol=1e-4, atol=1e-5):
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)


def _one_group(sess) -> None:
    report = sess.partition_report()
    assert set(report.summary()) == {"openvino"}, report.format(per_node=False)
    assert len(report.groups) == 1


def _backend_case(name: str):
    """The ONNX backend suite's case of a light model: the runner's dummy inputs and the outputs
    onnx stores for them."""
    from epoxy_sdk.conformance.backend_suite import load_cases

    return next(c for c in load_cases("real") if c.name == f"test_{name}")


@pytest.mark.parametrize("name", LIGHT)
def test_light_model_runs_entirely_on_openvino(name, rng):
    """One group, the cpu provider's values on random feeds, and the backend suite's own check
    of the model (its ``real`` case, run as ``run_case`` runs it). The nox ep_openvino session's
    backend-suite pass leaves the ``real`` cases to this test: compiling vgg19 & co. twice for
    openvino was ~35 s of CI for the same session, feeds and comparison."""
    from epoxy_sdk.conformance.backend_suite import assert_outputs_match, load_data

    path = _light_path(name)
    if not path.exists():
        pytest.skip(f"{path.name} is not in this onnx package")
    model = onnx.load(str(path))
    sess = epoxy.InferenceSession(str(path), providers=["openvino", "cpu"],
                                  sess_options=epoxy.SessionOptions(check_outputs=True))
    _one_group(sess)
    feeds = _random_feeds(model, rng)
    ref = epoxy.InferenceSession(str(path), providers=["cpu"]).run(None, feeds)
    _compare(sess.run(None, feeds), ref)
    case = _backend_case(name)
    for dummy, expected in load_data(case, model):
        with np.errstate(all="ignore"):
            got = sess.run(None, dummy)
        assert_outputs_match(expected, got, case.rtol, case.atol)


def _bench_models():
    path = REPO / "bench" / "models.py"
    if not path.exists():
        pytest.skip("bench/models.py is not in this checkout")
    spec = importlib.util.spec_from_file_location("epoxy_bench_models", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_bert_style_encoder_with_random_weights(rng):
    bench = _bench_models()
    config = {"vocab": 200, "max_positions": 32, "hidden": 64, "heads": 4, "ffn": 128, "layers": 2, "seq": 16}
    model = bench.build_bert(config)
    feeds = bench.bert_feeds_factory(config)(rng)
    sess = epoxy.InferenceSession(model, providers=["openvino", "cpu"])
    _one_group(sess)
    ref = epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)
    out = sess.run(None, feeds)
    assert np.abs(ref[0]).max() > 0.1  # real values, not zeros
    _compare(out, ref, rtol=1e-3, atol=1e-4)


def test_random_conv_net_matches_cpu(rng):
    model = conv_net(rng, channels=32)
    sess = epoxy.InferenceSession(model, providers=["openvino", "cpu"])
    _one_group(sess)
    x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    ref = epoxy.InferenceSession(model, providers=["cpu"]).run(None, {"x": x})
    assert np.abs(ref[0]).max() > 0.01
    _compare(sess.run(None, {"x": x}), ref)
