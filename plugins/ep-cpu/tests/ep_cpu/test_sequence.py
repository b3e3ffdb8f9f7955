"""Sequence and optional kernels of the cpu provider (sequences are lists, empty optional is None)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import epoxy
from epoxy.errors import KernelError

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def seq_info(name: str, elem: int = F, shape=None):  # type: ignore[no-untyped-def]
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def tensor_info(name: str, elem: int = F, shape=None):  # type: ignore[no-untyped-def]
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, opset=18):  # type: ignore[no-untyped-def]
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def both(m, feeds):  # type: ignore[no-untyped-def]
    got = epoxy.InferenceSession(m, providers=["cpu"]).run(None, feeds)
    want = ReferenceEvaluator(m).run(None, feeds)
    return got, want


def assert_same(got, want):  # type: ignore[no-untyped-def]
    if isinstance(want, list):
        assert isinstance(got, list), type(got)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
        return
    if want is None:
        assert got is None
        return
    want = np.asarray(want)
    assert isinstance(got, np.ndarray), type(got)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)


def test_construct_at_length_negative_position() -> None:
    m = model(
        [
            helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"]),
            helper.make_node("SequenceAt", ["s", "p"], ["y"]),
            helper.make_node("SequenceLength", ["s"], ["n"]),
        ],
        [tensor_info("a", F, ["a0"]), tensor_info("b", F, ["b0"]), tensor_info("c", F, ["c0"]),
         tensor_info("p", I64, [])],
        [tensor_info("y", F, ["y0"]), tensor_info("n", I64, [])],
    )
    a, b, c = np.ones((2, 3), np.float32), np.zeros((1,), np.float32), np.arange(4, dtype=np.float32)
    a = a[0]
    for p in (0, 2, -1, -3):
        got, want = both(m, {"a": a, "b": b, "c": c, "p": np.array(p, np.int64)})
        for g, w in zip(got, want):
            assert_same(g, w)
    with pytest.raises(KernelError, match="out of range"):
        epoxy.InferenceSession(m, providers=["cpu"]).run(None, {"a": a, "b": b, "c": c, "p": np.array(3, np.int64)})


def test_insert_erase_do_not_mutate_input_sequence() -> None:
    m = model(
        [
            helper.make_node("SequenceInsert", ["s", "t"], ["s_end"]),
            helper.make_node("SequenceInsert", ["s", "t", "p"], ["s_at"]),
            helper.make_node("SequenceErase", ["s"], ["s_last"]),
            helper.make_node("SequenceErase", ["s", "p"], ["s_p"]),
        ],
        [seq_info("s"), tensor_info("t", F, [2]), tensor_info("p", I64, [])],
        [seq_info("s_end"), seq_info("s_at"), seq_info("s_last"), seq_info("s_p")],
    )
    seq = [np.full((2,), i, np.float32) for i in range(3)]
    before = [x.copy() for x in seq]
    t = np.array([9.0, 9.0], np.float32)
    for p in (0, 1, -1, -2):
        got, want = both(m, {"s": seq, "t": t, "p": np.array(p, np.int64)})
        for g, w in zip(got, want):
            assert_same(g, w)
    assert len(seq) == 3 and all(np.array_equal(x, y) for x, y in zip(seq, before))


def test_insert_at_end_position_equal_length() -> None:
    m = model(
        [helper.make_node("SequenceInsert", ["s", "t", "p"], ["y"])],
        [seq_info("s"), tensor_info("t", F, [1]), tensor_info("p", I64, [])],
        [seq_info("y")],
    )
    seq = [np.zeros(1, np.float32)]
    got = epoxy.InferenceSession(m, providers=["cpu"]).run(
        None, {"s": seq, "t": np.ones(1, np.float32), "p": np.array(1, np.int64)}
    )
    assert [x.tolist() for x in got[0]] == [[0.0], [1.0]]


def test_empty_sequence_and_length_zero() -> None:
    m = model(
        [
            helper.make_node("SequenceEmpty", [], ["s"], dtype=TensorProto.INT32),
            helper.make_node("SequenceLength", ["s"], ["n"]),
            helper.make_node("SequenceInsert", ["s", "t"], ["s2"]),
        ],
        [tensor_info("t", TensorProto.INT32, [2])],
        [tensor_info("n", I64, []), seq_info("s2", TensorProto.INT32)],
    )
    n, s2 = epoxy.InferenceSession(m, providers=["cpu"]).run(None, {"t": np.array([1, 2], np.int32)})
    assert n.dtype == np.int64 and n.shape == () and int(n) == 0
    assert len(s2) == 1 and s2[0].dtype == np.int32


@pytest.mark.parametrize(
    "attrs,split",
    [
        ({}, None),
        ({"axis": 1}, None),
        ({"axis": -1, "keepdims": 0}, None),
        ({"axis": 1}, np.array(2, np.int64)),  # scalar split: last chunk smaller
        ({"axis": 0}, np.array([1, 3], np.int64)),
        ({"axis": 1, "keepdims": 0}, np.array([2, 3], np.int64)),  # keepdims ignored with split
    ],
)
def test_split_to_sequence(attrs, split) -> None:  # type: ignore[no-untyped-def]
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    ins = ["x"] + (["split"] if split is not None else [])
    vis = [tensor_info("x", F, [4, 5])] + ([tensor_info("split", I64, list(split.shape))] if split is not None else [])
    m = model([helper.make_node("SplitToSequence", ins, ["s"], **attrs)], vis, [seq_info("s")])
    feeds = {"x": x} | ({"split": split} if split is not None else {})
    got, want = both(m, feeds)
    assert_same(got[0], want[0])


def test_split_to_sequence_bad_split() -> None:
    m = model(
        [helper.make_node("SplitToSequence", ["x", "split"], ["s"])],
        [tensor_info("x", F, [4]), tensor_info("split", I64, [2])],
        [seq_info("s")],
    )
    with pytest.raises(KernelError, match="does not sum"):
        epoxy.InferenceSession(m, providers=["cpu"]).run(
            None, {"x": np.zeros(4, np.float32), "split": np.array([1, 1], np.int64)}
        )


@pytest.mark.parametrize("axis,new_axis", [(0, 0), (1, 0), (-1, 0), (0, 1), (2, 1), (-1, 1), (-3, 1)])
def test_concat_from_sequence(axis: int, new_axis: int) -> None:
    m = model(
        [helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=axis, new_axis=new_axis)],
        [seq_info("s", TensorProto.INT32)],
        [tensor_info("y", TensorProto.INT32, ["y0", "y1", "y2"][: 2 + new_axis])],
    )
    seq = [np.arange(6, dtype=np.int32).reshape(2, 3) + 10 * i for i in range(3)]
    got, want = both(m, {"s": seq})
    assert_same(got[0], want[0])


def test_optional_ops() -> None:
    opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2]))
    m = model(
        [
            helper.make_node("Optional", ["x"], ["o"]),
            helper.make_node("OptionalHasElement", ["o"], ["has"]),
            helper.make_node("OptionalGetElement", ["o"], ["y"]),
            helper.make_node("Optional", [], ["none"], type=helper.make_tensor_type_proto(F, [2])),
            helper.make_node("OptionalHasElement", ["none"], ["has_none"]),
        ],
        [tensor_info("x", F, [2])],
        [tensor_info("has", TensorProto.BOOL, []), tensor_info("y", F, [2]),
         helper.make_value_info("none", opt_t), tensor_info("has_none", TensorProto.BOOL, [])],
    )
    x = np.array([1.0, 2.0], np.float32)
    has, y, none, has_none = epoxy.InferenceSession(m, providers=["cpu"]).run(None, {"x": x})
    assert has.dtype == np.bool_ and has.shape == () and bool(has)
    np.testing.assert_array_equal(y, x)
    assert none is None
    assert not bool(has_none)


def test_optional_input_fed_empty_and_get_element_error() -> None:
    opt_seq = helper.make_optional_type_proto(helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None)))
    m = model(
        [
            helper.make_node("OptionalHasElement", ["o"], ["has"]),
            helper.make_node("OptionalGetElement", ["o"], ["s"]),
        ],
        [helper.make_value_info("o", opt_seq)],
        [tensor_info("has", TensorProto.BOOL, []), seq_info("s")],
    )
    sess = epoxy.InferenceSession(m, providers=["cpu"])
    has, s = sess.run(None, {"o": [np.ones(2, np.float32)]})
    assert bool(has) and len(s) == 1
    assert sess.get_inputs()[0].type == "optional(seq(tensor(float)))"
    with pytest.raises(KernelError, match="empty"):
        sess.run(None, {"o": None})


def test_optional_has_element_omitted_input_opset18() -> None:
    m = model(
        [helper.make_node("OptionalHasElement", [""], ["has"])],
        [],
        [tensor_info("has", TensorProto.BOOL, [])],
    )
    (has,) = epoxy.InferenceSession(m, providers=["cpu"]).run(None, {})
    assert not bool(has)


def test_get_element_of_plain_tensor_opset18() -> None:
    m = model(
        [helper.make_node("OptionalGetElement", ["x"], ["y"]), helper.make_node("OptionalHasElement", ["x"], ["h"])],
        [tensor_info("x", F, [3])],
        [tensor_info("y", F, [3]), tensor_info("h", TensorProto.BOOL, [])],
    )
    x = np.arange(3, dtype=np.float32)
    got, want = both(m, {"x": x})
    for g, w in zip(got, want):
        assert_same(g, w)


def test_sequence_feed_validation() -> None:
    m = model(
        [helper.make_node("SequenceLength", ["s"], ["n"])],
        [seq_info("s", F, [2])],
        [tensor_info("n", I64, [])],
    )
    sess = epoxy.InferenceSession(m, providers=["cpu"])
    assert int(sess.run(None, {"s": (np.zeros(2, np.float32),)})[0]) == 1  # a tuple is accepted
    assert int(sess.run(None, {"s": []})[0]) == 0
    with pytest.raises(epoxy.errors.InvalidFeedError, match="sequence"):
        sess.run(None, {"s": np.zeros(2, np.float32)})
    with pytest.raises(epoxy.errors.InvalidFeedError, match="dtype"):
        sess.run(None, {"s": [np.zeros(2, np.int64)]})
