"""A mobile-style CNN quantized by onnxruntime's own ``quantize_static`` (QDQ, per channel: the
file a user brings) runs its activations, gates and pools on the 8-bit codes on the cpu
provider: HardSwish / LeakyRelu / Sigmoid by table (QuantizedLookup), SiLU's and a
squeeze-excite block's products (QuantizedMul), the pools (QuantizedGlobalAveragePool). The
profile proves those ops ran; the outputs agree with onnxruntime on the same file and with
epoxy's float reading of it (level ``disable``) within the rounding of a few codes.

Bound: relative L2 error <= 2 % between the integer and float readings of one QDQ file. They
differ only where a requantization rounds the other way (one code, ~0.3 % of a tensor's range
each, in a few places per tensor). Measured here: 0.0 against both (identical outputs), and
0.8-1.6 % from the fp32 model, which is checked too (<= 3 %, as in test_quantization_qdq.py).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy

ort = pytest.importorskip("onnxruntime")
ort_quant = pytest.importorskip("onnxruntime.quantization")

MAX_REL_ERROR = 0.02  # see the module docstring
RUN_ON_CODES = {"QuantizedLookup", "QuantizedMul", "QuantizedGlobalAveragePool"}


def mobile_cnn(seed: int = 0) -> onnx.ModelProto:
    """Conv -> HardSwish -> Conv -> SiLU -> squeeze-excite (GAP, 1x1 convs, HardSigmoid gate) ->
    Conv -> LeakyRelu -> GAP -> Flatten -> Gemm; fixed seed."""
    rng = np.random.default_rng(seed)

    def w(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [w("w1", 16, 3, 3, 3), w("b1", 16), w("w2", 24, 16, 3, 3, scale=0.1), w("b2", 24),
             w("ws1", 8, 24, 1, 1), w("bs1", 8), w("ws2", 24, 8, 1, 1), w("bs2", 24),
             w("w3", 32, 24, 3, 3, scale=0.1), w("b3", 32), w("wf", 10, 32), w("bf", 10)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("HardSwish", ["c1"], ["h1"]),
             helper.make_node("Conv", ["h1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c2"], ["g2"]),
             helper.make_node("Mul", ["c2", "g2"], ["s2"]),  # SiLU
             helper.make_node("GlobalAveragePool", ["s2"], ["p2"]),
             helper.make_node("Conv", ["p2", "ws1", "bs1"], ["e1"]),
             helper.make_node("Relu", ["e1"], ["e1r"]),
             helper.make_node("Conv", ["e1r", "ws2", "bs2"], ["e2"]),
             helper.make_node("HardSigmoid", ["e2"], ["gate"]),
             helper.make_node("Mul", ["s2", "gate"], ["se"]),  # [N, C, H, W] * [N, C, 1, 1]
             helper.make_node("Conv", ["se", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("LeakyRelu", ["c3"], ["l3"], alpha=0.1),
             helper.make_node("GlobalAveragePool", ["l3"], ["p3"]),
             helper.make_node("Flatten", ["p3"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "mobile", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 48, 48])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(seed: int, count: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 3, 48, 48)).astype(np.float32)} for _ in range(count)]


class _Reader(ort_quant.CalibrationDataReader):
    def __init__(self, feeds):
        self._it = iter(feeds)

    def get_next(self):
        return next(self._it, None)


@pytest.fixture(scope="module")
def ort_qdq(tmp_path_factory) -> bytes:
    folder = tmp_path_factory.mktemp("codes_ops")
    onnx.save(mobile_cnn(), str(folder / "fp32.onnx"))
    ort_quant.quantize_static(str(folder / "fp32.onnx"), str(folder / "qdq.onnx"), _Reader(_feeds(0, 8)),
                              quant_format=ort_quant.QuantFormat.QDQ, per_channel=True,
                              activation_type=ort_quant.QuantType.QUInt8, weight_type=ort_quant.QuantType.QInt8)
    return (folder / "qdq.onnx").read_bytes()


def _rel(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


def test_onnxruntime_qdq_file_runs_its_activations_gates_and_pools_on_codes(ort_qdq):
    fp32 = epoxy.InferenceSession(mobile_cnn().SerializeToString(), providers=["cpu"])
    quantized = {n.op_type for n in onnx.load_from_string(ort_qdq).graph.node}
    assert {"HardSwish", "Sigmoid", "Mul", "HardSigmoid", "LeakyRelu", "GlobalAveragePool"} <= quantized
    sess = epoxy.InferenceSession(ort_qdq, epoxy.SessionOptions(enable_profiling=True), providers=["cpu"])
    float_reading = epoxy.InferenceSession(ort_qdq, epoxy.SessionOptions(graph_optimization_level="disable"),
                                           providers=["cpu"])
    opts = ort.SessionOptions()
    peer = ort.InferenceSession(ort_qdq, opts, providers=["CPUExecutionProvider"])
    for feed in _feeds(1, 4):
        got = sess.run(None, feed)[0]
        assert _rel(got, float_reading.run(None, feed)[0]) <= MAX_REL_ERROR
        assert _rel(got, peer.run(None, feed)[0]) <= MAX_REL_ERROR
        assert _rel(got, fp32.run(None, feed)[0]) <= 0.03
    ran = {row["op_type"]: row["calls"] for row in sess.profile_summary(100)}
    sess.end_profiling()
    assert RUN_ON_CODES <= set(ran), sorted(ran)
    assert ran["QuantizedMul"] == 2 * 4 and ran["QuantizedGlobalAveragePool"] >= 4  # per run: SiLU and the gate
    assert not {"Sigmoid", "HardSigmoid", "LeakyRelu", "HardSwish"} & set(ran)  # folded into tables
