"""``epoxy.kit.passes.replace``: the new nodes go where the last replaced node was in graph
order, whatever order the pattern lists them in, so that every reader comes after them."""

from __future__ import annotations

import onnx_ir as ir

from epoxy.kit.passes import Namer, make_node, replace


def _chain() -> tuple[ir.Graph, dict[str, ir.Node]]:
    """x -> A -> B -> C -> y, and x -> S (a side reader placed between A and B), D reads A and S."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2]))
    a = ir.Node("", "Relu", [x], name="A", outputs=[ir.Value(name="a")])
    s = ir.Node("", "Neg", [x], name="S", outputs=[ir.Value(name="s")])
    b = ir.Node("", "Relu", [a.outputs[0]], name="B", outputs=[ir.Value(name="b")])
    c = ir.Node("", "Relu", [b.outputs[0]], name="C", outputs=[ir.Value(name="c")])
    d = ir.Node("", "Add", [c.outputs[0], s.outputs[0]], name="D", outputs=[ir.Value(name="y")])
    graph = ir.Graph([x], [d.outputs[0]], nodes=[a, s, b, c, d], name="g")
    return graph, {n.name: n for n in graph}


def test_a_chain_listed_out_of_order_is_replaced_where_its_last_node_was():
    graph, n = _chain()
    namer = Namer(graph)
    new = make_node(namer, "Relu", [graph.inputs[0]], name="ABC")
    replace(graph, [n["A"], n["C"], n["B"]], [new], [n["C"].outputs[0]], [new.outputs[0]])
    assert list(graph) == [n["S"], new, n["D"]]
    assert n["D"].inputs[0] is new.outputs[0] and new.outputs[0].name == "c"


def test_a_pattern_with_two_ends_goes_after_the_later_one():
    """A and S both end the pattern (neither feeds the other); the new node reads M's output,
    defined between them, so it must go where S was (the numbering decides)."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2]))
    a = ir.Node("", "Relu", [x], name="A", outputs=[ir.Value(name="a")])
    m = ir.Node("", "Neg", [x], name="M", outputs=[ir.Value(name="m")])
    s = ir.Node("", "Relu", [m.outputs[0]], name="S", outputs=[ir.Value(name="s")])
    d = ir.Node("", "Add", [a.outputs[0], s.outputs[0]], name="D", outputs=[ir.Value(name="y")])
    graph = ir.Graph([x], [d.outputs[0]], nodes=[a, m, s, d], name="g")
    new = make_node(Namer(graph), "Split", [x, m.outputs[0]], name="AS", num_outputs=2)
    replace(graph, [a, s], [new], [a.outputs[0], s.outputs[0]], list(new.outputs))
    assert list(graph) == [m, new, d]
    assert list(d.inputs) == list(new.outputs)


def test_a_node_becomes_the_fused_op_in_place():
    """``become``: A turns into a fused op in place (attributes set, only the kept ones of its
    own stay), B and C go, A's output takes C's place and name; no node is made."""
    from epoxy.kit.passes import become

    graph, n = _chain()
    a = n["A"]
    a.attributes["kept"] = ir.AttrInt64("kept", 3)
    a.attributes["dropped"] = ir.AttrInt64("dropped", 4)
    out = a.outputs[0]
    become(graph, a, "FusedRelu", {"alpha": 0.5, "none": None}, domain="com.example", keep=["kept"],
           tail=[n["B"], n["C"]], out=n["C"].outputs[0])
    assert list(graph) == [a, n["S"], n["D"]]
    assert (a.op_type, a.domain, a.version) == ("FusedRelu", "com.example", None)
    assert sorted(a.attributes) == ["alpha", "kept"] and a.attributes["alpha"].value == 0.5
    assert n["D"].inputs[0] is out and out.name == "c"
