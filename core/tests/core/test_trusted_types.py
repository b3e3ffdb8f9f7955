"""epoxy.load.trusted_types: a model's intermediate value types (after shape inference, or a
session-cache hit's), set without onnx_ir's value_info path, must be exactly what onnx_ir
builds from the same value_info."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from epoxy.load.trusted_types import apply_plain_types, take_plain_types


def _model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["static"]),
        helper.make_node("Relu", ["static"], ["symbolic"]),
        helper.make_node("Relu", ["symbolic"], ["unknown_dim"]),
        helper.make_node("Relu", ["unknown_dim"], ["unknown_rank"]),
        helper.make_node("Relu", ["unknown_rank"], ["denoted"]),
        helper.make_node("Relu", ["denoted"], ["documented"]),
        helper.make_node("Add", ["documented", "w"], ["scalar"]),
        helper.make_node("SequenceConstruct", ["scalar"], ["seq"]),
        helper.make_node("Identity", ["scalar"], ["y"]),
    ]
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    info = helper.make_tensor_value_info
    denoted = info("denoted", TensorProto.FLOAT, [2, 3])
    denoted.type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    documented = info("documented", TensorProto.FLOAT, [2, 3])
    documented.doc_string = "kept for onnx_ir"
    unknown_dim = info("unknown_dim", TensorProto.FLOAT, [2, 3])
    unknown_dim.type.tensor_type.shape.dim[1].Clear()
    graph.value_info.extend([
        info("static", TensorProto.FLOAT, [2, 3]),
        info("symbolic", TensorProto.FLOAT, ["n", 3]),
        unknown_dim,
        info("unknown_rank", TensorProto.FLOAT, None),
        denoted,
        documented,
        info("scalar", TensorProto.DOUBLE, []),
        helper.make_tensor_sequence_value_info("seq", TensorProto.DOUBLE, None),
        info("w", TensorProto.FLOAT, [2, 3]),
        info("x", TensorProto.FLOAT, [5, 3]),  # a graph input's entry: onnx_ir's to read
    ])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _values(graph: ir.Graph) -> dict[str, ir.Value]:
    found = {v.name: v for v in graph.inputs}
    found.update(graph.initializers)
    found.update({v.name: v for node in graph for v in node.outputs})
    return found


def _described(value: ir.Value) -> tuple:
    shape = value.shape
    if shape is None:
        return (value.type, None)
    dims = tuple(d if isinstance(d, int) else ("sym", d.value) for d in shape)
    return (value.type, dims, shape.frozen, tuple(shape.get_denotation(i) for i in range(len(dims))),
            value.doc_string)


def test_plain_types_come_out_as_onnx_ir_builds_them() -> None:
    proto = _model()
    reference = _values(ir.serde.deserialize_model(proto).graph)
    fast = onnx.ModelProto()
    fast.CopyFrom(proto)
    taken = take_plain_types(fast.graph)
    assert set(taken) == {"static", "symbolic", "unknown_dim", "unknown_rank", "scalar", "w"}
    assert [i.name for i in fast.graph.value_info] == ["denoted", "documented", "seq", "x"]
    model = ir.serde.deserialize_model(fast)
    apply_plain_types(model.graph, taken)
    got = _values(model.graph)
    assert set(got) == set(reference)
    for name, value in reference.items():
        assert _described(got[name]) == _described(value), name
    assert got["unknown_rank"].shape is None and got["unknown_dim"].shape[1].value is None
    assert got["symbolic"].shape[0].value == "n" and got["scalar"].type.dtype == ir.DataType.DOUBLE


def test_nothing_taken_leaves_the_value_info_alone() -> None:
    proto = _model()
    del proto.graph.value_info[:4]
    proto.graph.value_info[0].doc_string = "x"  # unknown_rank, no longer plain
    for info in proto.graph.value_info:
        if info.name in ("scalar", "w"):
            info.doc_string = "x"
    before = proto.SerializeToString()
    assert take_plain_types(proto.graph) == {}
    assert proto.SerializeToString() == before


def test_a_name_declared_twice_is_left_to_onnx_ir() -> None:
    """Two value_info entries for one value (a malformed model): neither is taken, so the
    value gets the type onnx_ir alone gives it, whichever entry that is."""
    proto = _model()
    proto.graph.value_info.append(helper.make_tensor_value_info("static", TensorProto.FLOAT, [7, 3]))
    reference = _values(ir.serde.deserialize_model(proto).graph)
    taken = take_plain_types(proto.graph)
    assert "static" not in taken and "symbolic" in taken
    model = ir.serde.deserialize_model(proto)
    apply_plain_types(model.graph, taken)
    assert _described(_values(model.graph)["static"]) == _described(reference["static"])


def test_a_fresh_load_gives_the_types_onnx_ir_gives(monkeypatch) -> None:
    """epoxy.load.load_model sets a fresh model's inferred plain types directly too: every
    value's type and shape as onnx_ir builds them from the same inferred model."""
    from epoxy.load import loader
    from epoxy.load.loader import load_model

    applied: list[set[str]] = []
    real = loader.apply_plain_types
    monkeypatch.setattr(loader, "apply_plain_types",
                        lambda graph, types: applied.append(set(types)) or real(graph, types))

    proto = _model()
    del proto.graph.value_info[:]  # types from shape inference, plus a declared denotation kept
    proto.graph.node.remove(proto.graph.node[7])  # no sequence: a plain tensor graph
    denoted = helper.make_tensor_value_info("denoted", TensorProto.FLOAT, ["n", 3])
    denoted.type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    proto.graph.value_info.append(denoted)
    loaded = load_model(proto.SerializeToString()).model
    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
    reference = _values(ir.serde.deserialize_model(inferred).graph)
    got = _values(loaded.graph)
    assert got["static"].shape is not None and got["static"].shape[1] == 3
    for name in ("static", "symbolic", "unknown_dim", "unknown_rank", "denoted", "documented", "scalar", "y"):
        assert _described(got[name]) == _described(reference[name]), name
    assert applied and {"static", "symbolic", "scalar"} <= applied[0] and "denoted" not in applied[0]
