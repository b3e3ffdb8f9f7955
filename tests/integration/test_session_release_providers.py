"""With the real providers: once the last reference to a session is dropped, nothing sizeable
waits for the garbage collector (the core's side: core/tests/core/test_session_release.py).
A server that reloads a model must not hold the old copy's weights until a full collection."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy.testing import measure_drop

RNG = np.random.default_rng(0)
WEIGHT_BYTES = 8 << 20  # the model's weights, about: what must not linger


def _model() -> bytes:
    """Conv + BatchNormalization + Relu, then Flatten and a Gemm: folded, prepacked weights."""
    vi = helper.make_tensor_value_info
    c, m, hw, classes = 16, 64, 16, 128
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in [
        ("w", RNG.standard_normal((m, c, 3, 3)) * 0.1), ("b", RNG.standard_normal(m)),
        ("gamma", RNG.random(m) + 0.5), ("beta", RNG.standard_normal(m)), ("mean", RNG.standard_normal(m)),
        ("var", RNG.random(m) + 0.5), ("fc", RNG.standard_normal((classes, m * hw * hw)) * 0.01),
        ("fc_b", RNG.standard_normal(classes))]]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fc_b"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [1, c, hw, hw])],
                              [vi("y", TensorProto.FLOAT, [1, classes])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


PROVIDER_SETS = [["cpu"]]
if importlib.util.find_spec("epoxy_ep_openvino") is not None:
    PROVIDER_SETS.append(["openvino", "cpu"])


@pytest.mark.parametrize("providers", PROVIDER_SETS, ids="+".join)
def test_nothing_sizeable_waits_for_the_collector_after_del(providers: list[str]) -> None:
    data = _model()
    x = RNG.standard_normal((1, 16, 16, 16)).astype(np.float32)

    def ran_on_first(session: epoxy.InferenceSession) -> None:
        assert session.partition_report().nodes[0].provider == providers[0]

    freed, waiting = measure_drop(lambda: epoxy.InferenceSession(data, providers=providers), {"x": x}, ran_on_first)
    assert freed > WEIGHT_BYTES // 2, f"del freed only {freed} bytes"
    assert waiting < WEIGHT_BYTES // 16, f"{waiting} bytes waited for the garbage collector after del"
