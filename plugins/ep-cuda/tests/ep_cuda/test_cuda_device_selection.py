"""Selection policies over the simulated GPU: ``prefer_gpu`` puts cuda first, ``prefer_cpu``
leaves it out, and ``epoxy.get_devices()`` shows it as an NVIDIA gpu."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

import epoxy
from epoxy.devices import get_devices
from epoxy_ep_cuda.testing import FakeCudaFactory, fake_registry


def _relu_model() -> bytes:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_the_simulated_gpu_is_an_nvidia_gpu_driven_by_cuda():
    registry = fake_registry(with_cpu=False)
    (gpu,) = get_devices(registry)
    assert (gpu.kind, gpu.vendor, gpu.providers) == ("gpu", "NVIDIA", ["cuda"])
    assert gpu.memory_bytes == 80 << 30


def test_prefer_gpu_runs_on_cuda_and_prefer_cpu_leaves_it_out():
    factory = FakeCudaFactory()
    registry = fake_registry(factory)
    options = epoxy.SessionOptions()
    options.set_provider_selection_policy(epoxy.OrtExecutionProviderDevicePolicy.PREFER_GPU)
    session = epoxy.InferenceSession(_relu_model(), options, registry=registry)
    names = [registry.canonical_name(n) for n in session.get_providers()]
    assert names[0] == "cuda" and len(factory.created) == 1
    assert session.partition_report().summary() == {"cuda": 1}
    x = np.array([[-1, 2], [3, -4]], np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], np.maximum(x, 0))

    cpu_only = epoxy.InferenceSession(_relu_model(), providers="auto:prefer_cpu", registry=registry)
    assert "cuda" not in [registry.canonical_name(n) for n in cpu_only.get_providers()]
    assert len(factory.created) == 1
