"""Shared by every engine's tests: small ONNX models built here with fixed seeds (a CNN with a
dynamic batch axis, an MLP whose batch axis is a parameter), a model repository folder in
Triton's layout, and a free TCP port."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from epoxy_serve.ports import free_port as free_port_on

OPSET = 17
IR_VERSION = 9


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array.astype(np.float32), name)


def make_cnn(*, seed: int = 0, batch: int | str = "N", channels: int = 3, size: int = 16, classes: int = 10) -> bytes:
    """Conv 3x3 -> Relu -> GlobalAveragePool -> Flatten -> Gemm: input ``image`` [batch, C, H, W]
    float32, output ``logits`` [batch, classes]; ``batch`` a str is a dynamic axis."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("GlobalAveragePool", ["r1"], ["p1"]),
        helper.make_node("Flatten", ["p1"], ["f1"]),
        helper.make_node("Gemm", ["f1", "w2", "b2"], ["logits"]),
    ]
    inits = [_init("w1", rng.standard_normal((8, channels, 3, 3)) * 0.3), _init("b1", rng.standard_normal(8) * 0.1),
             _init("w2", rng.standard_normal((8, classes)) * 0.3), _init("b2", rng.standard_normal(classes) * 0.1)]
    graph = helper.make_graph(
        nodes, "cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, channels, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def make_mlp(*, seed: int = 1, batch: int | str = 1, features: int = 16, hidden: int = 32, outputs: int = 4) -> bytes:
    """MatMul-Add-Relu-MatMul-Add: input ``x`` [batch, features] float32, output ``y`` [batch,
    outputs]; the default fixed batch of 1 is a model that cannot merge requests."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["y0"]), helper.make_node("Add", ["y0", "b2"], ["y"]),
    ]
    inits = [_init("w1", rng.standard_normal((features, hidden)) * 0.3), _init("b1", rng.standard_normal(hidden) * 0.1),
             _init("w2", rng.standard_normal((hidden, outputs)) * 0.3), _init("b2", rng.standard_normal(outputs) * 0.1)]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, outputs])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def make_pair(*, width: int = 4) -> bytes:
    """Two inputs ``a`` and ``b`` [N, width] float32 -> ``sum`` = a + 2 b: a model a request can
    leave an input out of."""
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [helper.make_node("Mul", ["b", "two"], ["b2"]), helper.make_node("Add", ["a", "b2"], ["sum"])]
    graph = helper.make_graph(
        nodes, "pair", [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", width]) for n in ("a", "b")],
        [helper.make_tensor_value_info("sum", TensorProto.FLOAT, ["N", width])], [two])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def write_repository(root: Path, *, pair: bool = False) -> Path:
    """Triton's layout: ``cnn/1/model.onnx`` (dynamic batch), ``mlp/1`` and ``mlp/2`` (fixed
    batch 1, different weights); with ``pair``, ``pair/1`` (two inputs)."""
    models = [("cnn", "1", make_cnn()), ("mlp", "1", make_mlp(seed=1)), ("mlp", "2", make_mlp(seed=2))]
    if pair:
        models.append(("pair", "1", make_pair()))
    for name, version, data in models:
        folder = root / name / version
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.onnx").write_bytes(data)
    return root


def free_port() -> int:
    return free_port_on("127.0.0.1")


@pytest.fixture(scope="session")
def cnn_bytes() -> bytes:
    return make_cnn()


@pytest.fixture(scope="session")
def mlp_bytes() -> bytes:
    return make_mlp()


@pytest.fixture(scope="module")
def model_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repository(tmp_path_factory.mktemp("repository"))
