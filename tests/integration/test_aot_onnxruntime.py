"""What plain onnxruntime does with an epoxy compiled model written with ep-cpu (#18, docs/AOT.md):
it runs one optimized at the basic level (standard ops only), and refuses one holding ep-cpu's own
fused ops (``com.epoxy.cpu``) with a clean error naming the op."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy.cli.main import main

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _own_key(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("EPOXY_COMPILE_KEY", str(tmp_path_factory.getbasetemp() / "compile.key"))


def _conv_relu(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


def test_basic_level_runs_on_onnxruntime_and_all_level_is_refused_cleanly(tmp_path):
    model = _conv_relu(tmp_path / "m.onnx")
    feed = {"x": RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    basic, full = tmp_path / "basic.onnx", tmp_path / "all.onnx"
    assert main(["compile", str(model), "-o", str(basic), "--providers", "cpu", "--optimization", "basic"]) == 0
    assert main(["compile", str(model), "-o", str(full), "--providers", "cpu"]) == 0
    got = ort.InferenceSession(str(basic), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="com.epoxy.cpu:FusedConv") as refused:
        ort.InferenceSession(str(full), providers=["CPUExecutionProvider"])
    assert type(refused.value).__module__.startswith("onnxruntime")
    session = epoxy.InferenceSession(str(full), providers=["cpu"])  # epoxy loads it, optimizer skipped
    assert session.applied_passes == []
    np.testing.assert_allclose(session.run(None, feed)[0], want, rtol=1e-5, atol=1e-5)


class _ClaimsNothing:
    """A provider listed before cpu, so ep-cpu's own fusions (cpu-first sessions) stay out."""

    name, vendor, version, sdk_api, priority = "bystander", "tests", "0.0.1", "1.2", 90

    def devices(self):
        from epoxy.contract import Device

        return [Device(self.name, "cpu", 0, "claims nothing")]

    def create(self, device, options):
        from epoxy.contract import Capability
        from epoxy.kit import HostAllocator

        class Provider:
            name = "bystander"

            def __init__(self):
                self.device, self.allocator = device, HostAllocator(device)

            def capability(self, graph):
                return Capability()

        return Provider()


def test_fused_nodes_of_a_newer_opset_are_written_at_one_version(tmp_path):
    """The optimizer's Gelu (opset 20) in an opset-17 model: the file imports 20 and the
    ReduceMean-13 beside it is rewritten (axes attribute -> input), so onnxruntime runs it."""
    from epoxy.testing import registry_with
    from epoxy_ep_cpu.factory import CpuProviderFactory

    c = lambda name, value: numpy_helper.from_array(np.array(value, np.float32), name)  # noqa: E731
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(RNG.standard_normal((8, 8)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Div", ["m", "sqrt2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["e", "one"], ["a"]),
             helper.make_node("Mul", ["m", "a"], ["p"]), helper.make_node("Mul", ["p", "half"], ["g"]),
             helper.make_node("ReduceMean", ["g"], ["y"], axes=[1], keepdims=1)]
    graph = helper.make_graph(nodes, "g", [x], [y], [w, c("sqrt2", 2 ** 0.5), c("one", 1.0), c("half", 0.5)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    registry = registry_with(_ClaimsNothing(), CpuProviderFactory(), plugin_name="aot-opsets")
    out = tmp_path / "c.onnx"
    epoxy.compile_model(tmp_path / "m.onnx", out, providers=["bystander", "cpu"], registry=registry)
    written = onnx.load(out)
    onnx.checker.check_model(written)
    assert {op.domain or "": op.version for op in written.opset_import}[""] == 20
    assert "Gelu" in [n.op_type for n in written.graph.node]
    feed = {"x": RNG.standard_normal((2, 8)).astype(np.float32)}
    want = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    session = epoxy.InferenceSession(str(out), providers=["bystander", "cpu"], registry=registry)
    np.testing.assert_allclose(session.run(None, feed)[0], want, rtol=1e-5, atol=1e-6)
