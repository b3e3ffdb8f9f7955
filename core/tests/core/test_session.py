"""InferenceSession end to end with the mini provider: loading, feeds, outputs, errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from models import chain

import epoxy
from epoxy import InferenceSession, InvalidArgumentError, InvalidFeedError, ModelLoadError, SessionOptions


def test_runs_chain_from_proto_bytes_and_path(make_registry, tmp_path):
    model = chain(["Add", "Relu", "Mul"])
    x = np.array([[-5, 0, 1], [2, -3, 4]], np.float32)
    expected = np.maximum(x + 1, 0) * 3
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    for source in (model, model.SerializeToString(), str(path), path):
        session = InferenceSession(source, providers=["cpu"], registry=make_registry())
        (y,) = session.run(None, {"x": x})
        np.testing.assert_array_equal(y, expected)


def test_surface_matches_onnxruntime_style(make_registry):
    session = InferenceSession(chain(["Relu"]), providers=["cpu"], registry=make_registry())
    (inp,) = session.get_inputs()
    assert (inp.name, inp.type, inp.shape) == ("x", "tensor(float)", [2, 3])
    assert [o.name for o in session.get_outputs()] == ["y"]
    assert session.get_providers() == ["cpu"]
    assert session.run(["y"], {"x": np.zeros((2, 3), np.float32)})[0].shape == (2, 3)


@pytest.mark.parametrize(
    ("feeds", "message"),
    [
        ({}, "missing input 'x'"),
        ({"x": np.zeros((2, 3), np.float32), "z": np.zeros(1)}, "unknown input 'z'"),
        ({"x": np.zeros((2, 3), np.float64)}, "input 'x': expected dtype float32, got float64"),
        ({"x": np.zeros((3,), np.float32)}, "input 'x': expected rank 2"),
        ({"x": np.zeros((2, 4), np.float32)}, "input 'x': dim 1 must be 3, got 4"),
        ({"x": {1.0, 2.0}}, "input 'x': expected a numpy.ndarray"),
        ({"x": [[1.0, 2.0, 3.0]]}, "input 'x': dim 0 must be 2, got 1"),
        ({"x": "text"}, "input 'x': expected float32 values"),
    ],
)
def test_bad_feeds_name_the_input(make_registry, feeds, message):
    session = InferenceSession(chain(["Relu"]), providers=["cpu"], registry=make_registry())
    with pytest.raises(InvalidFeedError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        session.run(None, feeds)
    assert info.value.input_name in ("x", "z")


def test_inputs_are_not_modified(make_registry):
    session = InferenceSession(chain(["Relu", "Neg"]), providers=["cpu"], registry=make_registry())
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    before = x.copy()
    session.run(None, {"x": x})
    np.testing.assert_array_equal(x, before)


def test_unknown_output_and_provider_errors(make_registry):
    session = InferenceSession(chain(["Relu"]), providers=["cpu"], registry=make_registry())
    with pytest.raises(InvalidArgumentError, match="unknown output 'nope'"):
        session.run(["nope"], {"x": np.zeros((2, 3), np.float32)})
    with pytest.raises(InvalidArgumentError, match="unknown provider 'tpu'"):
        InferenceSession(chain(["Relu"]), providers=["tpu"], registry=make_registry())


@pytest.mark.parametrize("source", [b"not a model", b"\x08\x07\x12\x03abc\xff\xff", 42])
def test_malformed_models_raise_model_load_error(make_registry, source):
    with pytest.raises(ModelLoadError):
        InferenceSession(source, providers=["cpu"], registry=make_registry())


def test_checker_failure_names_problem(make_registry):
    model = chain(["Relu"])
    model.graph.node[0].input[0] = "does_not_exist"
    with pytest.raises(ModelLoadError, match="does_not_exist"):
        InferenceSession(model, providers=["cpu"], registry=make_registry())


def test_missing_file(make_registry, tmp_path):
    with pytest.raises(ModelLoadError, match="not found"):
        InferenceSession(tmp_path / "nope.onnx", providers=["cpu"], registry=make_registry())


def test_external_data_is_loaded_relative_to_the_model(make_registry, tmp_path):
    model = chain(["Add"], shape=(64, 64))
    onnx.save(model, tmp_path / "ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").exists()
    session = InferenceSession(tmp_path / "ext.onnx", providers=["cpu"], registry=make_registry())
    (y,) = session.run(None, {"x": np.ones((64, 64), np.float32)})
    np.testing.assert_array_equal(y, np.full((64, 64), 2, np.float32))
    with pytest.raises(ModelLoadError, match="external data"):
        InferenceSession((tmp_path / "ext.onnx").read_bytes(), providers=["cpu"], registry=make_registry())


def test_optimization_levels(make_registry):
    model = chain(["Identity", "Relu", "Identity"])
    for level in ("disable", "basic", "all"):
        session = InferenceSession(model, providers=["cpu"], registry=make_registry(),
                                   sess_options=SessionOptions(graph_optimization_level=level))
        (y,) = session.run(None, {"x": -np.ones((2, 3), np.float32)})
        np.testing.assert_array_equal(y, np.zeros((2, 3), np.float32))
    with pytest.raises(InvalidArgumentError):
        SessionOptions(graph_optimization_level="max").validate()


def test_kernel_error_names_node(make_registry):
    import onnx.helper as h

    g = h.make_graph([h.make_node("MatMul", ["a", "b"], ["y"], name="mm")], "g",
                     [h.make_tensor_value_info("a", 1, ["m", "k"]), h.make_tensor_value_info("b", 1, ["k2", "n"])],
                     [h.make_tensor_value_info("y", 1, ["m", "n"])])
    session = InferenceSession(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), providers=["cpu"],
                               registry=make_registry())
    with pytest.raises(epoxy.KernelError, match="node 'mm' \\(MatMul\\) failed on provider 'cpu'"):
        session.run(None, {"a": np.ones((2, 3), np.float32), "b": np.ones((4, 5), np.float32)})


def _external_model(tmp_path, location):
    model = chain(["Add"], shape=(4, 4))
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="w.bin", size_threshold=0)
    proto = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    for entry in proto.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = location
    onnx.save(proto, tmp_path / "m.onnx")
    return tmp_path / "m.onnx"


@pytest.mark.parametrize(
    ("location", "message"),
    [("../outside.bin", "outside the model's folder"), ("/etc/passwd", "absolute locations are refused"),
     ("missing.bin", "file not found"), ("link.bin", "outside the model's folder")],
)
def test_external_data_escaping_the_model_folder_is_refused(make_registry, tmp_path, location, message):
    inner = tmp_path / "model"
    inner.mkdir()
    (tmp_path / "outside.bin").write_bytes(bytes(64))
    (inner / "link.bin").symlink_to(tmp_path / "outside.bin")
    path = _external_model(inner, location)
    with pytest.raises(ModelLoadError, match=message):
        InferenceSession(path, providers=["cpu"], registry=make_registry())


def test_external_data_range_is_checked_against_the_file(make_registry, tmp_path):
    path = _external_model(tmp_path, "w.bin")
    (tmp_path / "w.bin").write_bytes(bytes(8))  # truncated: 4x4 float32 needs 64 bytes
    with pytest.raises(ModelLoadError, match="outside the 8-byte file"):
        InferenceSession(path, providers=["cpu"], registry=make_registry())
