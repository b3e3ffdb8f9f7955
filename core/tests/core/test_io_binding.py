"""``session.io_binding()``: onnxruntime's IOBinding over the core's device-feed API, on a
fake device that counts every copy."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from device_fakes import PlainAllocator, Wrapped, dev_factory
from models import chain
from onnx import TensorProto, helper

from epoxy import InferenceSession, InvalidArgumentError, InvalidFeedError
from epoxy.api.io_binding import IOBinding, run_with_iobinding
from epoxy.api.ort_value import OrtValue
from epoxy.plugins import reset_default_registry


@pytest.fixture(autouse=True)
def _process_registry(make_registry: Any) -> Iterator[None]:
    """OrtValues made outside a session find the fake device in the process-wide registry."""
    reset_default_registry(make_registry(dev_factory()))
    yield
    reset_default_registry(None)


def _x() -> np.ndarray:
    return np.arange(6, dtype=np.float32).reshape(2, 3) - 2


def _session(make_registry: Any, model: Any = None, ops: tuple[str, ...] = ("Relu", "Neg"),
             allocator_type: type | None = None) -> tuple[Any, Any]:
    created: list[Any] = []
    kwargs = {} if allocator_type is None else {"allocator_type": allocator_type}
    session = InferenceSession(model if model is not None else chain(["Relu", "Neg"]), providers=["dev", "cpu"],
                               registry=make_registry(dev_factory(ops, created=created, **kwargs)))
    return session, created[-1]


def _two_outputs() -> Any:
    """r = Relu(x) on the device, y = Add(x, r) on the host; both are graph outputs."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Add", ["x", "r"], ["y"], name="add"),
    ]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _want(x: np.ndarray) -> np.ndarray:
    return -np.maximum(x, 0)


# -- host bindings ----------------------------------------------------------------------------------
def test_host_binding_reads_the_array_at_run_time(make_registry: Any) -> None:
    session, _ = _session(make_registry)
    x = _x()
    binding = session.io_binding()
    assert isinstance(binding, IOBinding) and binding.get_outputs() == [] and binding.copy_outputs_to_cpu() == []
    binding.bind_cpu_input("x", x)
    binding.bind_output("y")
    x[0, 2] = 9  # changed after binding: the run sees it (no copy was taken)
    session.run_with_iobinding(binding)
    (y,) = binding.get_outputs()
    assert isinstance(y, OrtValue) and y.device_name() == "cpu"
    np.testing.assert_array_equal(y.numpy(), _want(x))
    (copied,) = binding.copy_outputs_to_cpu()
    assert not np.shares_memory(copied, y.numpy())
    np.testing.assert_array_equal(copied, _want(x))
    assert binding.get_outputs_as_ortvaluevector()[0].shape() == [2, 3]


def test_outputs_keep_the_order_they_were_first_bound_in(make_registry: Any) -> None:
    session, _ = _session(make_registry, _two_outputs(), ops=("Relu",))
    x = _x()
    binding = session.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("r")
    binding.bind_output("y")
    binding.bind_output("r")  # bound again: keeps its place
    session.run_with_iobinding(binding)
    r, y = binding.copy_outputs_to_cpu()
    np.testing.assert_array_equal(r, np.maximum(x, 0))
    np.testing.assert_array_equal(y, x + np.maximum(x, 0))
    binding.clear_binding_outputs()
    assert binding.get_outputs() == []
    binding.bind_output("y")
    session.run_with_iobinding(binding)
    assert len(binding.get_outputs()) == 1


def test_preallocated_host_buffers_are_written_in_place(make_registry: Any) -> None:
    session, _ = _session(make_registry, _two_outputs(), ops=("Relu",))
    x = _x()
    y_buf = np.zeros((2, 3), np.float32)
    r_buf = OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32)
    binding = session.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("y", "cpu", 0, np.float32, [2, 3], y_buf.ctypes.data)  # onnxruntime's raw form
    binding.bind_ortvalue_output("r", r_buf)
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(y_buf, x + np.maximum(x, 0))
    np.testing.assert_array_equal(r_buf.numpy(), np.maximum(x, 0))
    y, r = binding.get_outputs()
    assert np.shares_memory(y.numpy(), y_buf) and y.data_ptr() == y_buf.ctypes.data
    assert np.shares_memory(r.numpy(), r_buf.numpy())
    epoxy_style = np.zeros((2, 3), np.float32)
    binding.bind_output("y", epoxy_style)  # epoxy's form: the buffer itself
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(epoxy_style, x + np.maximum(x, 0))


def test_raw_host_pointer_input_is_not_copied(make_registry: Any) -> None:
    session, _ = _session(make_registry)
    x = _x()
    binding = session.io_binding()
    binding.bind_input("x", "cpu", 0, np.float32, [2, 3], x.ctypes.data)
    binding.bind_output("y")
    x[1, 1] = 100
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], _want(x))


# -- device bindings --------------------------------------------------------------------------------
def test_device_input_and_output_stay_on_the_device(make_registry: Any) -> None:
    session, dev = _session(make_registry)
    alloc = dev.allocator
    x = _x()
    fed = alloc.to_device(x)
    alloc.copies_in = 0
    binding = session.io_binding()
    binding.bind_input("x", fed)  # epoxy's form: a value the allocator accepts
    binding.bind_output("y", "dev")
    session.run_with_iobinding(binding)
    (y,) = binding.get_outputs()
    assert dev.seen[0] is fed and isinstance(y._value, Wrapped) and y.device_name() == "dev"
    assert (alloc.copies_in, alloc.copies_out) == (0, 0)  # nothing crossed to or from the host
    assert alloc.syncs == 1  # outputs synchronized at the end of the run
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], _want(x))
    assert alloc.copies_out == 1


def test_device_ortvalues_made_outside_the_session_feed_its_device_slot(make_registry: Any) -> None:
    x = _x()
    fed = OrtValue.ortvalue_from_numpy(x, "dev")  # the process-wide dev provider made it
    out = OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32, "dev")
    session, dev = _session(make_registry)
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", fed)
    binding.bind_ortvalue_output("y", out)
    session.run_with_iobinding(binding)
    alloc = dev.allocator
    assert dev.seen[0] is fed._value
    assert (alloc.copies_in, alloc.copies_out, alloc.copies_on_device) == (0, 0, 1)  # one copy, on the device
    (y,) = binding.get_outputs()
    assert y._value is out._value
    np.testing.assert_array_equal(out.numpy(), _want(x))


def test_raw_device_pointers_through_from_pointer(make_registry: Any) -> None:
    session, dev = _session(make_registry)
    x = _x()
    fed = OrtValue.ortvalue_from_numpy(x, "dev")
    out = OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32, "dev")
    binding = session.io_binding()
    binding.bind_input("x", "dev", 0, np.float32, [2, 3], fed.data_ptr())
    binding.bind_output("y", "dev", 0, np.float32, [2, 3], out.data_ptr())
    session.run_with_iobinding(binding)
    assert (dev.allocator.copies_in, dev.allocator.copies_out) == (0, 0)
    np.testing.assert_array_equal(out.numpy(), _want(x))


def test_raw_device_pointer_without_from_pointer_says_what_to_bind(make_registry: Any) -> None:
    session, _ = _session(make_registry, allocator_type=PlainAllocator)
    binding = session.io_binding()
    with pytest.raises(InvalidArgumentError, match=r"input 'x': provider 'dev' cannot wrap a raw device pointer.*"
                                                   r"bind the device array itself"):
        binding.bind_input("x", "dev", 0, np.float32, [2, 3], 1234)


def test_output_made_on_the_host_is_uploaded_to_its_bound_device(make_registry: Any) -> None:
    session, dev = _session(make_registry, _two_outputs(), ops=("Relu",))
    x = _x()
    binding = session.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("y", "dev")  # Add runs on the host
    binding.bind_output("r", "dev")  # Relu runs on the device
    before = dev.allocator.copies_out
    session.run_with_iobinding(binding)
    y, r = binding.get_outputs()
    assert isinstance(y._value, Wrapped) and isinstance(r._value, Wrapped)
    # x uploaded for Relu, y uploaded after the run; r read by Add on the host: downloaded once
    assert dev.allocator.copies_in == 2 and dev.allocator.copies_out == before + 1
    np.testing.assert_array_equal(y.numpy(), x + np.maximum(x, 0))


def test_synchronize_calls_the_allocator(make_registry: Any) -> None:
    session, dev = _session(make_registry)
    binding = session.io_binding()
    binding.bind_input("x", dev.allocator.to_device(_x()))
    binding.bind_output("y", "dev")
    binding.synchronize_inputs()
    binding.synchronize_outputs()
    assert dev.allocator.syncs == 2
    run_with_iobinding(session, binding, synchronize_outputs=False)
    assert dev.allocator.syncs == 2


# -- errors ------------------------------------------------------------------------------------------
def test_errors_name_the_input_or_output(make_registry: Any) -> None:
    session, dev = _session(make_registry)
    binding = session.io_binding()
    with pytest.raises(InvalidFeedError, match=r"unknown input 'nope'; the model's inputs are \['x'\]"):
        binding.bind_cpu_input("nope", _x())
    with pytest.raises(InvalidArgumentError, match=r"unknown output 'nope'; the model's outputs are \['y'\]"):
        binding.bind_output("nope")
    with pytest.raises(InvalidFeedError, match=r"input 'x': expected dtype float32, got float64"):
        binding.bind_cpu_input("x", np.zeros((2, 3)))
    with pytest.raises(InvalidFeedError, match=r"input 'x': dim 0 must be 2, got 3"):
        binding.bind_input("x", dev.allocator.to_device(np.zeros((3, 3), np.float32)))
    with pytest.raises(
        InvalidFeedError,
        match=r"input 'x': a value of type Elsewhere is neither a numpy array nor a value of a "
        r"device this session uses \(\['dev'\]\)",
    ):
        binding.bind_input("x", type("Elsewhere", (), {})())
    with pytest.raises(
        InvalidArgumentError, match=r"output 'y' is tensor\(float\); the bound buffer is tensor\(double\)"
    ):
        binding.bind_output("y", np.zeros((2, 3)))
    with pytest.raises(InvalidArgumentError, match="element_type and shape are needed"):
        binding.bind_output("y", "cpu", 0, None, None, 1234)
    with pytest.raises(InvalidArgumentError, match=r"device_type 'cuda'.*available here: \['cpu', 'dev'\]"):
        binding.bind_output("y", "cuda")
    binding.bind_output("y")
    with pytest.raises(InvalidFeedError, match=r"input 'x' is not bound"):
        session.run_with_iobinding(binding)


def test_run_errors(make_registry: Any) -> None:
    session, _ = _session(make_registry)
    binding = session.io_binding()
    binding.bind_cpu_input("x", _x())
    with pytest.raises(InvalidArgumentError, match=r"no output is bound: bind_output\(name\) at least one of \['y'\]"):
        session.run_with_iobinding(binding)
    binding.bind_output("y", np.zeros((3, 2), np.float32))
    with pytest.raises(InvalidArgumentError, match=r"output 'y': the bound buffer is tensor\(float\) \[3, 2\] but this "
                                                   r"run produced tensor\(float\) \[2, 3\]"):
        session.run_with_iobinding(binding)
    assert binding.get_outputs() == []  # a failed run leaves no outputs behind
    other, _ = _session(make_registry)
    with pytest.raises(InvalidArgumentError, match="belongs to another session"):
        other.run_with_iobinding(binding)
    binding.bind_output("y", "dev")
    with pytest.raises(InvalidArgumentError, match="'output_device' does not apply to run_with_iobinding"):
        session.run_with_iobinding(binding, {"output_device": "dev"})


def test_binding_uses_only_the_public_session_api(make_registry: Any) -> None:
    session, dev = _session(make_registry, _two_outputs(), ops=("Relu",))

    class PublicOnly:
        def __getattr__(self, name: str) -> Any:
            if name.startswith("_"):
                raise AssertionError(f"IOBinding read the private attribute {name!r}")
            return getattr(session, name)

    view = PublicOnly()
    x = _x()
    binding = IOBinding(view)
    binding.bind_input("x", dev.allocator.to_device(x))
    binding.bind_output("r", "dev")
    binding.bind_output("y")
    run_with_iobinding(view, binding)
    r, y = binding.copy_outputs_to_cpu()
    np.testing.assert_array_equal(r, np.maximum(x, 0))
    np.testing.assert_array_equal(y, x + np.maximum(x, 0))


def test_run_options_objects_with_device_outputs(make_registry: Any) -> None:
    import epoxy

    session, dev = _session(make_registry)
    binding = session.io_binding()
    binding.bind_input("x", dev.allocator.to_device(_x()))
    binding.bind_output("y", "dev")
    options = epoxy.RunOptions()
    session.run_with_iobinding(binding, options)  # the binding adds the per-output device
    assert isinstance(binding.get_outputs()[0]._value, Wrapped)
    options.terminate = True
    with pytest.raises(epoxy.EpoxyError, match="terminate"):
        session.run_with_iobinding(binding, options)
