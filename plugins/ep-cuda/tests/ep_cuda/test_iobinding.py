"""IOBinding plan derivation on the simulated device (no upload/download for bound values)."""

from __future__ import annotations

import epoxy
import numpy as np
import pytest
from cuda_helpers import model
from epoxy_ep_cuda.backend import FakeDeviceArray
from epoxy_ep_cuda.iobinding import IOBinding
from epoxy_ep_cuda.testing import FakeCudaFactory, fake_registry
from onnx import helper


def _session(nodes, feeds, outs):  # type: ignore[no-untyped-def]
    f = FakeCudaFactory()
    s = epoxy.InferenceSession(model(nodes, feeds, outs), providers=["cuda", "cpu"], registry=fake_registry(f))
    return s, f.created[-1]


def test_bound_input_and_output_stay_on_device() -> None:
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    s, p = _session([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Exp", ["r"], ["y"])], {"x": x}, ["y"])
    dev_x = p.backend.to_device(x)
    before = (p.backend.copies_in, p.backend.copies_out)
    b = IOBinding(s)
    b.bind_input("x", dev_x)
    b.bind_output("y")
    (y,) = b.run()
    assert isinstance(y, FakeDeviceArray)
    assert (p.backend.copies_in, p.backend.copies_out) == before  # no copies at all
    np.testing.assert_allclose(b.copy_outputs_to_cpu()[0], np.exp(np.maximum(x, 0)), rtol=1e-6)
    out = p.backend.to_device(np.zeros((3, 4), np.float32))
    b.bind_output("y", out)
    (y2,) = b.run()
    assert y2 is out
    np.testing.assert_allclose(p.backend.to_host(out), np.exp(np.maximum(x, 0)), rtol=1e-6)
    # the session itself is untouched
    np.testing.assert_allclose(s.run(None, {"x": x})[0], np.exp(np.maximum(x, 0)), rtol=1e-6)


def test_input_also_read_on_cpu_and_output_made_on_cpu() -> None:
    x = np.eye(3, dtype=np.float32) * 2
    nodes = [helper.make_node("Det", ["x"], ["d"]), helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Mul", ["r", "d"], ["y"])]
    s, p = _session(nodes, {"x": x}, ["y", "d"])
    b = IOBinding(s)
    b.bind_input("x", p.backend.to_device(x))
    y, d = b.run()
    assert isinstance(y, FakeDeviceArray) and isinstance(d, FakeDeviceArray)
    np.testing.assert_allclose(p.backend.to_host(y), x * 8)
    np.testing.assert_allclose(p.backend.to_host(d), 8.0)


def test_validation() -> None:
    x = np.zeros((2, 2), np.float32)
    s, p = _session([helper.make_node("Relu", ["x"], ["y"])], {"x": x}, ["y"])
    b = IOBinding(s)
    with pytest.raises(TypeError, match="dtype"):
        b.bind_input("x", p.backend.to_device(np.zeros((2, 2), np.float64)))
    with pytest.raises(ValueError, match="shape"):
        b.bind_input("x", p.backend.to_device(np.zeros((3, 2), np.float32)))
    with pytest.raises(KeyError):
        b.bind_input("nope", x)
    with pytest.raises(ValueError, match="not bound"):
        b.run()
    cpu_only = epoxy.InferenceSession(model([helper.make_node("Relu", ["x"], ["y"])], {"x": x}, ["y"]), providers=["cpu"],
                                      registry=fake_registry())
    with pytest.raises(ValueError, match="does not use provider"):
        IOBinding(cpu_only)
