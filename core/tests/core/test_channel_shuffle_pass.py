"""ChannelShufflePass: ``Reshape -> Transpose(0, 2, 1, 3, 4) -> Reshape`` back to the input's shape
becomes one ``com.epoxy.cpu::ChannelShuffle`` (values: ep-cpu's ``test_channel_shuffle.py``); what
is not a channel shuffle is left alone."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _pass_run import rewrite
from onnx import TensorProto, helper, numpy_helper

from epoxy.optimize.passes.channel_shuffle import OP_TYPE, ChannelShufflePass
from epoxy.optimize.passes.qdq_pairs import DOMAIN


def _model(split=(1, 4, 6, 5, 7), perm=(0, 2, 1, 3, 4), back=(1, 24, 5, 7), extra_reader=False,
           batch="1") -> onnx.ModelProto:
    x_dims = [int(batch) if batch.isdigit() else batch, 24, 5, 7]
    inits = {"s1": np.array(split, np.int64), "s2": np.array(back, np.int64)}
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["a"]),
             helper.make_node("Transpose", ["a"], ["b"], perm=list(perm), name="shuffle"),
             helper.make_node("Reshape", ["b", "s2"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("a", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)], outputs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)


def test_the_three_ops_become_one():
    out, count = rewrite(ChannelShufflePass(), _model())
    assert count == 1
    (node,) = [n for n in out.graph.node]
    assert (node.domain, node.op_type) == (DOMAIN, OP_TYPE)
    assert [a.i for a in node.attribute if a.name == "group"] == [4]
    assert list(node.input) == ["x"] and list(node.output) == ["y"]


def test_a_symbolic_batch_is_kept_as_it_is():
    """The reshape targets copy the batch (0) and the inferred shapes name it: still a shuffle."""
    out, count = rewrite(ChannelShufflePass(), _model(split=(0, 4, 6, 5, 7), back=(0, 24, 5, 7), batch="N"))
    assert count == 1 and out.graph.node[0].op_type == OP_TYPE


@pytest.mark.parametrize(("case", "kwargs"), [
    ("other permutation", {"perm": (0, 1, 2, 4, 3), "split": (1, 4, 6, 5, 7)}),
    ("channels not split", {"split": (1, 24, 5, 7, 1), "perm": (0, 2, 1, 3, 4), "back": (1, 24, 5, 7)}),
    ("a different output shape", {"back": (1, 24, 35, 1)}),
    ("an intermediate read elsewhere", {"extra_reader": True}),
])
def test_what_is_not_a_shuffle_stays(case, kwargs):
    model = _model(**kwargs)
    out, count = rewrite(ChannelShufflePass(), model)
    assert count == 0, case
    assert [n.op_type for n in out.graph.node] == [n.op_type for n in model.graph.node]
