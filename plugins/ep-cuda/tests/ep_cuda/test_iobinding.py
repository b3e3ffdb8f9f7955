"""IOBinding plan derivation on the simulated device (no upload/download for bound values)."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_helpers import model
from onnx import helper

import epoxy
from epoxy_ep_cuda.backend import FakeDeviceArray
from epoxy_ep_cuda.iobinding import IOBinding
from epoxy_ep_cuda.testing import FakeCudaFactory, fake_registry


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
    cpu_only = epoxy.InferenceSession(
        model([helper.make_node("Relu", ["x"], ["y"])], {"x": x}, ["y"]), providers=["cpu"], registry=fake_registry()
    )
    with pytest.raises(ValueError, match="does not use provider"):
        IOBinding(cpu_only)


class _PublicOnly:
    """A session seen through its public surface only: private attributes raise."""

    def __init__(self, session: epoxy.InferenceSession) -> None:
        object.__setattr__(self, "_session", session)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        if name.startswith("_"):
            raise AssertionError(f"IOBinding read the private attribute {name!r}")
        return getattr(object.__getattribute__(self, "_session"), name)


def test_binding_uses_only_the_public_session_api() -> None:
    x = np.random.default_rng(1).standard_normal((2, 5)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Det", ["w"], ["d"]),
             helper.make_node("Mul", ["r", "d"], ["y"])]
    w = np.eye(2, dtype=np.float32) * 3
    s, p = _session(nodes, {"x": x, "w": w}, ["y", "d"])
    b = IOBinding(_PublicOnly(s))
    b.bind_input("x", p.backend.to_device(x))
    b.bind_input("w", p.backend.to_device(w))  # read on the host only (Det runs on cpu)
    b.bind_output("y")
    b.bind_output("d")
    y, d = b.run()
    assert isinstance(y, FakeDeviceArray) and isinstance(d, FakeDeviceArray)
    np.testing.assert_allclose(p.backend.to_host(y), np.maximum(x, 0) * 9, rtol=1e-6)
    np.testing.assert_allclose(p.backend.to_host(d), 9.0, rtol=1e-6)


def test_session_run_takes_device_arrays_and_returns_them() -> None:
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    s, p = _session([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Exp", ["r"], ["y"])], {"x": x}, ["y"])
    io = s.io_placement()
    assert set(io.inputs["x"].devices) == {p.device.label} and io.outputs["y"].produced_on == p.device.label
    dev_x = p.backend.to_device(x)
    before = (p.backend.copies_in, p.backend.copies_out)
    (y,) = s.run(None, {"x": dev_x}, run_options={"output_device": "cuda"})
    assert isinstance(y, FakeDeviceArray)
    assert (p.backend.copies_in, p.backend.copies_out) == before
    np.testing.assert_allclose(p.backend.to_host(y), np.exp(np.maximum(x, 0)), rtol=1e-6)
    with pytest.raises(epoxy.InvalidFeedError, match="expected dtype float32, got float64"):
        s.run(None, {"x": p.backend.to_device(x.astype(np.float64))})


def test_binding_with_the_parallel_executor() -> None:
    x = np.eye(3, dtype=np.float32) * 2
    nodes = [helper.make_node("Det", ["x"], ["d"]), helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Mul", ["r", "d"], ["y"])]
    f = FakeCudaFactory()
    so = epoxy.SessionOptions(execution_mode="parallel", inter_op_num_threads=2)
    s = epoxy.InferenceSession(model(nodes, {"x": x}, ["y"]), providers=["cuda", "cpu"], registry=fake_registry(f),
                               sess_options=so)
    p = f.created[-1]
    b = IOBinding(s)
    b.bind_input("x", p.backend.to_device(x))
    for _ in range(3):
        (y,) = b.run()
        np.testing.assert_allclose(p.backend.to_host(y), x * 8)
