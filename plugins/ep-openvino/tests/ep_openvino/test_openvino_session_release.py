"""A session with its nodes on openvino frees the model's weights on ``del``, without waiting
for the garbage collector (a compiled group must not hold the session; the core forgets the
``onnx_ir`` model's initializers when the session goes)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy.testing import measure_drop

WEIGHT_BYTES = 2048 * 1024 * 4


def _model() -> bytes:
    rng = np.random.default_rng(3)
    vi = helper.make_tensor_value_info
    w = numpy_helper.from_array((rng.standard_normal((2048, 1024)) * 0.02).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(1024).astype(np.float32), "b")
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"]), helper.make_node("Relu", ["g"], ["y"])]
    graph = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [1, 2048])],
                              [vi("y", TensorProto.FLOAT, [1, 1024])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def test_dropping_an_openvino_session_frees_its_weights_at_once() -> None:
    data = _model()
    x = np.random.default_rng(4).standard_normal((1, 2048)).astype(np.float32)

    def on_openvino(session: epoxy.InferenceSession) -> None:
        assert {d.provider for d in session.partition_report().nodes} == {"openvino"}

    freed, waiting = measure_drop(lambda: epoxy.InferenceSession(data, providers=["openvino", "cpu"]), {"x": x},
                                  on_openvino)
    assert freed > WEIGHT_BYTES // 2, f"del freed only {freed} bytes"
    assert waiting < WEIGHT_BYTES // 16, f"{waiting} bytes waited for the garbage collector after del"
