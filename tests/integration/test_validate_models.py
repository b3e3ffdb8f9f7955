"""``validate`` on real models: no false alarms at the default tolerances.

epoxy's cpu against onnxruntime (every intermediate value onnxruntime can expose), and
OpenVINO (f32 precision, its default in ep-openvino) against epoxy's cpu, on a tiny CNN, an
MLP, the bundled digits MLP and a scikit-learn pipeline.
"""

from __future__ import annotations

from importlib import resources
from importlib.util import find_spec
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from epoxy.cli.main import main
from epoxy.debug import DEFAULT_ATOL, DEFAULT_RTOL, validate

HAS_OPENVINO = find_spec("epoxy_ep_openvino") is not None and find_spec("openvino") is not None


def _model(nodes: list[Any], x_shape: list[Any], y_shape: list[Any], weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def tiny_cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * (2.0 / np.prod(shape[1:])) ** 0.5).astype(np.float32)

    weights = {"w1": w(8, 1, 3, 3), "b1": w(8) * 0.1, "w2": w(16, 8, 3, 3), "b2": w(16) * 0.1,
               "fc": w(16 * 7 * 7, 10).reshape(16 * 7 * 7, 10), "fcb": w(10) * 0.1}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p2"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], name="fc"),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=1),
    ]
    return _model(nodes, ["N", 1, 28, 28], ["N", 10], weights)


def mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    sizes = [32, 64, 64, 10]
    weights, nodes, x = {}, [], "x"
    for k, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        weights[f"w{k}"] = (rng.standard_normal((n_in, n_out)) / n_in**0.5).astype(np.float32)
        weights[f"b{k}"] = (rng.standard_normal(n_out) * 0.1).astype(np.float32)
        nodes += [helper.make_node("MatMul", [x, f"w{k}"], [f"m{k}"], name=f"matmul{k}"),
                  helper.make_node("Add", [f"m{k}", f"b{k}"], [f"a{k}"], name=f"add{k}")]
        x = f"a{k}"
        if k < len(sizes) - 2:
            nodes.append(helper.make_node("Tanh" if k % 2 else "Relu", [x], [f"h{k}"], name=f"act{k}"))
            x = f"h{k}"
    nodes.append(helper.make_node("Softmax", [x], ["y"], name="softmax", axis=-1))
    return _model(nodes, ["batch", 32], ["batch", 10], weights)


def digits_mlp() -> bytes:
    return (resources.files("epoxy.demo") / "digits_mlp.onnx").read_bytes()


def sklearn_pipeline() -> onnx.ModelProto:
    pytest.importorskip("sklearn")
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = load_iris(return_X_y=True)
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y)
    return to_onnx(pipe, x[:1].astype(np.float32), options={"zipmap": False}, target_opset=17)


#: models whose intermediate values keep their names through epoxy's optimizer (in the
#: MLPs, MatMul+Add(+Relu) become Gemm/FusedGemm nodes whose outputs get fresh names, so
#: only the outputs are shared with onnxruntime there)
KEEP_NAMES = {"tiny_cnn"}


def _bytes(model: Any) -> bytes:
    return model if isinstance(model, bytes) else model.SerializeToString()


MODELS = {"tiny_cnn": tiny_cnn, "mlp": mlp, "digits_mlp": digits_mlp, "sklearn": sklearn_pipeline}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_cpu_matches_onnxruntime(name: str) -> None:
    report = validate(MODELS[name](), ["cpu"], reference="onnxruntime", random=3, dims={"N": 2, "batch": 4})
    assert report.passed, report.to_dict()["first_divergence"] or report.error
    assert report.rtol == DEFAULT_RTOL and report.atol == DEFAULT_ATOL
    if name in KEEP_NAMES:
        assert len(report.values) > len(report.outputs)  # intermediate values were compared too
    declared = onnx.load_from_string(_bytes(MODELS[name]())).graph.output
    assert {v.name for v in report.outputs} == {o.name for o in declared}


def test_default_tolerances_still_catch_a_1_percent_error() -> None:
    """The happy paths pass because the values agree, not because the tolerance is loose:
    the same CNN with its first conv's weights 1% off fails after that conv (its pool) and after the next."""
    from epoxy.debug.capture import capture_session
    from epoxy.debug.compare import compare
    from epoxy.session import InferenceSession

    model = tiny_cnn()
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    w1 = next(t for t in changed.graph.initializer if t.name == "w1")
    w1.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w1) * np.float32(1.01), "w1"))
    feeds = {"x": np.random.default_rng(5).standard_normal((2, 1, 28, 28)).astype(np.float32)}
    a = capture_session(InferenceSession(model.SerializeToString(), providers=["cpu"]), feeds)
    b = capture_session(InferenceSession(changed.SerializeToString(), providers=["cpu"]), feeds)
    assert not compare(b.values["p1"], a.values["p1"], DEFAULT_RTOL, DEFAULT_ATOL).passed
    assert not compare(b.values["p2"], a.values["p2"], DEFAULT_RTOL, DEFAULT_ATOL).passed


@pytest.mark.skipif(not HAS_OPENVINO, reason="needs epoxy-ep-openvino and openvino")
@pytest.mark.parametrize("reference", ["cpu", "onnxruntime"])
def test_openvino_matches(reference: str) -> None:
    report = validate(tiny_cnn(), ["openvino", "cpu"], reference=reference, random=2, dims={"N": 2})
    assert report.passed, report.to_dict()["first_divergence"] or report.error
    assert any(v.provider == "openvino" for v in report.values)  # OpenVINO computed what was compared
    assert report.outputs


@pytest.mark.skipif(not HAS_OPENVINO, reason="needs epoxy-ep-openvino and openvino")
def test_cli_openvino_exit_0(tmp_path: Any, capsys: Any) -> None:
    path = tmp_path / "cnn.onnx"
    onnx.save(tiny_cnn(), str(path))
    assert main(["validate", str(path), "--providers", "openvino,cpu", "--reference", "onnxruntime"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("PASS")
