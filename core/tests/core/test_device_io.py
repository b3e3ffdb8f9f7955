"""Device feeds and fetches: ``Allocator.accepts``, ``run_options["output_device"]``, placement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from device_fakes import DevProvider, PlainAllocator, Wrapped
from fakes import Factory, sim_factory
from models import chain
from onnx import TensorProto, helper

from epoxy import InferenceSession, InvalidArgumentError, InvalidFeedError, SessionOptions
from epoxy.contract import DeviceValueAllocator

LABEL = "dev:dev:0"


def _session(make_registry: Any, model: Any, ops: Sequence[str] = ("Relu", "Neg"), **options: Any) -> Any:
    factory = Factory("dev", lambda d, o: DevProvider(d, frozenset(ops), PlainAllocator), 50, device_kind="dev")
    session = InferenceSession(model, providers=["dev", "cpu"], registry=make_registry(factory),
                               sess_options=SessionOptions(**options) if options else None)
    return session, session.get_provider("dev")


def _x(shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape) - 2


def _two_readers() -> Any:
    """x is read by Relu (device) and by Add (host): y = Add(x, Relu(x))."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Add", ["x", "r"], ["y"], name="add"),
    ]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_allocator_with_accepts_is_a_device_value_allocator(make_registry) -> None:
    _, dev = _session(make_registry, chain(["Relu"]))
    assert isinstance(dev.allocator, DeviceValueAllocator)


def test_device_feed_skips_the_upload_and_reaches_the_kernel(make_registry) -> None:
    session, dev = _session(make_registry, chain(["Relu", "Neg"]))
    x = _x()
    (host_run,) = session.run(None, {"x": x})
    assert dev.allocator.copies_in == 1  # the upload step of a host feed
    fed = Wrapped(x)
    dev.seen.clear()
    (y,) = session.run(None, {"x": fed})
    assert dev.seen[0] is fed  # the very object, in the device slot
    assert dev.allocator.copies_in == 1  # no upload this time
    np.testing.assert_array_equal(y, host_run)
    np.testing.assert_array_equal(y, -np.maximum(x, 0))
    (again,) = session.run(None, {"x": x})  # host feeds still take the plain plan
    np.testing.assert_array_equal(again, host_run)
    assert dev.allocator.copies_in == 2


def test_device_feed_read_on_host_too_is_downloaded_once(make_registry) -> None:
    session, dev = _session(make_registry, _two_readers(), ops=("Relu",))
    x = _x()
    placed = session.io_placement().inputs["x"]
    assert set(placed.devices) == {LABEL} and placed.host_readers  # the cpu Add reads it
    y, r = session.run(None, {"x": Wrapped(x)})
    np.testing.assert_array_equal(y, x + np.maximum(x, 0))
    np.testing.assert_array_equal(r, np.maximum(x, 0))
    assert dev.allocator.copies_in == 0  # x is not uploaded
    assert dev.allocator.copies_out == 2  # x once (for Add), r once (graph output)


def test_output_device_returns_the_device_value_without_download(make_registry) -> None:
    session, dev = _session(make_registry, chain(["Relu", "Neg"]))
    x = _x()
    for device in ("dev", LABEL):
        before = dev.allocator.copies_out
        (y,) = session.run(None, {"x": Wrapped(x)}, run_options={"output_device": device})
        assert isinstance(y, Wrapped)
        np.testing.assert_array_equal(y.array, -np.maximum(x, 0))
        assert dev.allocator.copies_out == before
    (y,) = session.run(["y"], {"x": x}, run_options={"output_device": {"y": "dev"}})  # host feed, device fetch
    assert isinstance(y, Wrapped)
    for device in ("cpu", "host"):  # the host is always allowed: it is the default
        (y,) = session.run(None, {"x": x}, run_options={"output_device": device})
        assert type(y) is np.ndarray


def test_output_device_keeps_an_output_also_read_on_host(make_registry) -> None:
    session, _ = _session(make_registry, _two_readers(), ops=("Relu",))
    placed = session.io_placement().outputs["r"]
    assert placed.produced_on == LABEL and placed.provider == "dev" and placed.host_readers
    x = _x()
    y, r = session.run(["y", "r"], {"x": x}, run_options={"output_device": {"r": "dev"}})
    assert isinstance(r, Wrapped) and type(y) is np.ndarray
    np.testing.assert_array_equal(r.array, np.maximum(x, 0))
    np.testing.assert_array_equal(y, x + np.maximum(x, 0))


def test_output_not_produced_on_the_device_is_a_clear_error(make_registry) -> None:
    session, _ = _session(make_registry, chain(["Relu", "Add"]))
    with pytest.raises(InvalidArgumentError, match=r"output 'y' is produced on 'host' by provider 'cpu', not on 'dev'"):
        session.run(None, {"x": _x()}, run_options={"output_device": "dev"})


def test_unknown_device_and_options_are_clear_errors(make_registry) -> None:
    session, _ = _session(make_registry, chain(["Relu"]))
    feeds = {"x": _x()}
    with pytest.raises(InvalidArgumentError, match=r"output_device 'gpu9' for output 'y' is not a device.*'dev'"):
        session.run(None, feeds, run_options={"output_device": "gpu9"})
    with pytest.raises(InvalidArgumentError, match="unknown output 'nope'"):
        session.run(None, feeds, run_options={"output_device": {"nope": "dev"}})
    with pytest.raises(InvalidArgumentError, match="unknown run option 'speed'"):
        session.run(None, feeds, run_options={"speed": 1})
    with pytest.raises(InvalidArgumentError, match="run_options must be a dict"):
        session.run(None, feeds, run_options="dev")
    assert session.get_devices()["dev"] == LABEL and session.get_devices()["cpu"] == "host"
    with pytest.raises(InvalidArgumentError, match="not used by this session"):
        session.get_provider("nope")


def test_bad_device_feeds_give_the_clear_feed_errors(make_registry) -> None:
    session, _ = _session(make_registry, chain(["Relu"]))
    with pytest.raises(InvalidFeedError, match=r"input 'x': expected dtype float32, got float64"):
        session.run(None, {"x": Wrapped(np.zeros((2, 3)))})
    with pytest.raises(InvalidFeedError, match=r"input 'x': dim 0 must be 2, got 3"):
        session.run(None, {"x": Wrapped(np.zeros((3, 3), np.float32))})
    with pytest.raises(InvalidFeedError, match=r"input 'x': expected rank 2"):
        session.run(None, {"x": Wrapped(np.zeros(6, np.float32))})


def test_values_nobody_accepts_keep_the_numpy_error(make_registry) -> None:
    # the sim device's allocator has no accepts(): its values are not device feeds
    session = InferenceSession(chain(["Relu"]), providers=["sim", "cpu"], registry=make_registry(sim_factory()))
    with pytest.raises(InvalidFeedError, match=r"input 'x': expected a numpy.ndarray .*got Wrapped"):
        session.run(None, {"x": Wrapped(_x())})


def test_placement_describes_copy_steps_and_slots(make_registry) -> None:
    session, _ = _session(make_registry, chain(["Relu", "Neg"]))
    io = session.io_placement()
    x, y = io.inputs["x"], io.outputs["y"]
    copy_in = x.devices[LABEL]
    assert copy_in.device == LABEL and x.host_readers == ()
    steps = session._plan.steps
    assert steps[copy_in.step].inputs == (x.host_slot,) and steps[copy_in.step].outputs == (copy_in.slot,)
    assert y.produced_on == LABEL and y.provider == "dev" and y.device is not None
    assert steps[y.device.step].inputs == (y.device.slot,) and steps[y.device.step].outputs == (y.host_slot,)


def test_device_io_with_the_parallel_executor(make_registry) -> None:
    session, dev = _session(make_registry, _two_readers(), ops=("Relu",), execution_mode="parallel",
                            inter_op_num_threads=2)
    x = _x()
    for _ in range(3):
        y, r = session.run(None, {"x": Wrapped(x)}, run_options={"output_device": {"r": "dev"}})
        np.testing.assert_array_equal(y, x + np.maximum(x, 0))
        np.testing.assert_array_equal(r.array, np.maximum(x, 0))
    assert dev.allocator.copies_in == 0


def test_device_io_from_several_threads(make_registry) -> None:
    from concurrent.futures import ThreadPoolExecutor

    session, _ = _session(make_registry, _two_readers(), ops=("Relu",))
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(8)]

    def one(x: np.ndarray) -> bool:
        for _ in range(25):
            y, r = session.run(None, {"x": Wrapped(x)}, run_options={"output_device": {"r": "dev"}})
            if not (np.array_equal(y, x + np.maximum(x, 0)) and np.array_equal(r.array, np.maximum(x, 0))):
                return False
        return True

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(one, xs))
