"""Models whose string fields hold invalid UTF-8 are refused naming the field, whether the
proto3 twin (epoxy.load.utf8_twin) or the loader's own walk finds them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import epoxy
from epoxy.errors import ModelLoadError
from epoxy.load import utf8_twin
from epoxy.load.loader import load_model

MARK = b"MARK_ME_"  # replaced in the serialized model by as many bytes that are not UTF-8
BAD = b"\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8"


def _model(where: str) -> bytes:
    """A small model with ``MARK`` in one string field, the model serialized with it broken."""
    name = {k: k for k in ("node", "value", "meta", "doc", "sub", "func")}
    name[where] = MARK.decode()
    then = helper.make_graph([helper.make_node("Identity", ["x"], ["t"], name=name["sub"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "else", [],
                              [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    relu = helper.make_node("Relu", ["x"], ["r"], name=name["node"], doc_string=name["doc"])
    meta = relu.metadata_props.add()
    meta.key, meta.value = "source", name["meta"]
    nodes = [
        relu,
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
        helper.make_node("Twice", ["r"], ["z"], domain="local"),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
        value_info=[helper.make_tensor_value_info("r", TensorProto.FLOAT, [2], doc_string=name["value"])])
    twice = helper.make_function("local", "Twice", ["a"], ["b"],
                                 [helper.make_node("Add", ["a", "a"], ["b"], name=name["func"])],
                                 [helper.make_opsetid("", 17)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                              functions=[twice])
    data = model.SerializeToString()
    if where != "none":
        assert data.count(MARK) == 1
        data = data.replace(MARK, BAD)
    return data


def _parsed(data: bytes) -> onnx.ModelProto:
    proto = onnx.ModelProto()
    proto.ParseFromString(data)
    return proto


def test_valid_model_is_valid_for_the_twin_and_loads(make_registry) -> None:  # type: ignore[no-untyped-def]
    data = _model("none")
    assert utf8_twin.text_is_valid(_parsed(data)) is True
    session = epoxy.InferenceSession(data, providers=["cpu"], registry=make_registry())
    got = session.run(["z"], {"x": np.array([1.0, -2.0], np.float32), "c": np.array(True)})[0]
    np.testing.assert_array_equal(got, [2.0, 0.0])


@pytest.mark.parametrize("where, field", [
    ("node", ".graph.node[0].name"),
    ("doc", ".graph.node[0].doc_string"),
    ("meta", ".graph.node[0].metadata_props[0].value"),
    ("value", ".graph.value_info[0].doc_string"),
    ("sub", ".graph.node[1].attribute[1].g.node[0].name"),  # then_branch: attributes sorted by name
    ("func", ".functions[0].node[0].name"),
])
@pytest.mark.parametrize("route", ["twin", "walk only"])
def test_invalid_text_is_refused_naming_the_field(where: str, field: str, route: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    data = _model(where)
    if route == "twin":
        assert utf8_twin.text_is_valid(_parsed(data)) is False
    else:
        monkeypatch.setattr(utf8_twin, "MAX_TWIN_BYTES", 0)  # as for a large model: the walk alone
        assert utf8_twin.text_is_valid(_parsed(data)) is None
    with pytest.raises(ModelLoadError, match="not valid UTF-8") as raised:
        load_model(data)
    assert f"model{field} = " in str(raised.value)


def test_without_a_twin_the_walk_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(utf8_twin, "_twin_class", lambda: None)  # a protobuf that cannot build it
    assert utf8_twin.text_is_valid(_parsed(_model("node"))) is None
    with pytest.raises(ModelLoadError, match=r"\.graph\.node\[0\]\.name"):
        load_model(_model("node"))
    load_model(_model("none"))
