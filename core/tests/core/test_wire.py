"""Large model files are parsed without copying their weights twice (wire.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from epoxy import InferenceSession, ModelLoadError
from epoxy.load.wire import MIN_MAPPED_BYTES, load_mapped


def _big_model():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 256)).astype(np.float32)        # 256 KiB: mapped
    b = rng.standard_normal((256,)).astype(np.float32)  # 1 KiB: stays in the protobuf
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Add", ["m", "b"], ["y"], name="add"),
    ]
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 256])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="wire-test")
    model.metadata_props.add(key="k", value="v")
    return model, w, b


def test_large_raw_data_is_cut_out_and_equal(tmp_path):
    model, w, b = _big_model()
    path = tmp_path / "big.onnx"
    onnx.save(model, path)
    proto, arrays = load_mapped(path)
    assert set(arrays) == {"w"} and w.nbytes >= MIN_MAPPED_BYTES
    np.testing.assert_array_equal(arrays["w"], w)
    assert not arrays["w"].flags.writeable
    assert not proto.graph.initializer[0].raw_data and list(proto.graph.initializer[0].dims) == [256, 256]
    np.testing.assert_array_equal(numpy_helper.to_array(proto.graph.initializer[1]), b)
    assert proto.producer_name == "wire-test" and proto.metadata_props[0].value == "v"


def test_session_from_large_file_matches(make_registry, tmp_path):
    model, w, b = _big_model()
    path = tmp_path / "big.onnx"
    onnx.save(model, path)
    x = np.random.default_rng(1).standard_normal((2, 256)).astype(np.float32)
    (y,) = InferenceSession(path, providers=["cpu"], registry=make_registry()).run(None, {"x": x})
    np.testing.assert_allclose(y, x @ w + b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("cut", [10, 1000, 200_000])
def test_truncated_large_file_is_a_model_load_error(make_registry, tmp_path, cut):
    model, _, _ = _big_model()
    data = model.SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[:-cut] + bytes(1 << 20))  # large enough to be mapped, garbage tail
    with pytest.raises(ModelLoadError):
        InferenceSession(path, providers=["cpu"], registry=make_registry())


def test_weights_are_copied_on_small_pages_and_the_setting_restored(tmp_path, monkeypatch):
    # numpy's huge-page request is off while the copies are made (kernel compaction stalls:
    # wire._small_pages), and back to what it was afterwards, also when the load fails
    from epoxy.load import wire

    multiarray = np._core.multiarray
    real = multiarray._set_madvise_hugepage
    states: list[bool] = []

    def spy(enabled):
        states.append(bool(enabled))
        return real(enabled)

    monkeypatch.setattr(multiarray, "_set_madvise_hugepage", spy)
    before = real(True)
    real(before)
    model, w, _ = _big_model()
    path = tmp_path / "big.onnx"
    onnx.save(model, path)
    _, arrays = load_mapped(path)
    np.testing.assert_array_equal(arrays["w"], w)
    assert states == [False, before]
    states.clear()

    def failing_copy(*args):
        raise RuntimeError("copy failed")

    monkeypatch.setattr(wire, "_copy_spans", failing_copy)
    with pytest.raises(RuntimeError, match="copy failed"):
        load_mapped(path)
    assert states == [False, before]
