"""Subgraph mutations on Loop/If/Scan: condition types, trip counts (huge, negative, none at
all), body inputs and outputs, branches that disagree, Scan's counts and axes, and any other
mutation applied to a node inside a body."""

from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from . import attributes, graph
from .common import ABSURD_INTS, TENSOR_TYPES, Draft, graphs, type_name


def _nodes(draft: Draft, *ops: str) -> list[onnx.NodeProto]:
    return [n for g in graphs(draft.model.graph) for n in g.node if n.op_type in ops]


def _any_node(rng: random.Random, draft: Draft, *ops: str) -> onnx.NodeProto | None:
    """One node of these op types anywhere in the model (``None``: there is none)."""
    found = _nodes(draft, *ops)
    return rng.choice(found) if found else None


def _body(node: onnx.NodeProto, name: str = "body") -> onnx.GraphProto | None:
    return next((a.g for a in node.attribute if a.name == name and a.type == AttributeProto.GRAPH), None)


def _constant(draft: Draft, name: str, array: np.ndarray) -> str:
    """A new initializer of the main graph (subgraphs read it from the outer scope)."""
    name = f"{name}_{len(draft.model.graph.initializer)}"
    draft.model.graph.initializer.append(numpy_helper.from_array(array, name))
    return name


def loop_condition_type(rng: random.Random, draft: Draft) -> str | None:
    loop = _any_node(rng, draft, "Loop")
    if loop is None:
        return None
    body = _body(loop)
    if rng.random() < 0.6 or body is None or len(body.input) < 2 or not body.output:
        dtype = rng.choice([np.float32, np.float64, np.int64, np.uint8])
        while len(loop.input) < 2:
            loop.input.append("")
        loop.input[1] = _constant(draft, "cond", np.array(1, dtype))
        return f"Loop {loop.name!r} condition fed a {np.dtype(dtype).name} tensor"
    elem = rng.choice([TensorProto.FLOAT, TensorProto.INT64, TensorProto.DOUBLE])
    body.input[1].type.tensor_type.elem_type = elem
    body.output[0].type.tensor_type.elem_type = elem
    return f"Loop {loop.name!r} body condition declared {type_name(elem)}"


def loop_trip_count(rng: random.Random, draft: Draft) -> str | None:
    loop = _any_node(rng, draft, "Loop")
    if loop is None:
        return None
    while len(loop.input) < 2:
        loop.input.append("")
    choice = rng.randrange(3)
    if choice == 0:
        count = rng.choice([2**62, 2**63 - 1, 10**9, -1, 0, -(2**63)])
        loop.input[0] = _constant(draft, "trip", np.array(count, np.int64))
        what = f"trip count {count}"
    elif choice == 1:
        loop.input[0] = ""
        what = "no trip count"
    else:
        loop.input[0] = _constant(draft, "trip", np.array(rng.choice([2**62, 10**9]), np.int64))
        loop.input[1] = ""
        what = "a huge trip count and no condition"
    if rng.random() < 0.5:  # a condition that never turns false
        body = _body(loop)
        if body is not None and len(body.input) > 1 and body.output:
            body.output[0].name = body.input[1].name
            what += ", body passes its condition through"
    return f"Loop {loop.name!r} given {what}"


def body_io(rng: random.Random, draft: Draft) -> str | None:
    owner = _any_node(rng, draft, "Loop", "Scan", "If", "SequenceMap")
    if owner is None:
        return None
    bodies = [a.g for a in owner.attribute if a.type == AttributeProto.GRAPH]
    if not bodies:
        return None
    body = rng.choice(bodies)
    choice = rng.randrange(5)
    if choice == 0 and body.input:
        body.input.pop(rng.randrange(len(body.input)))
        return f"{owner.op_type} {owner.name!r} body input removed"
    if choice == 1 and body.output:
        body.output.pop(rng.randrange(len(body.output)))
        return f"{owner.op_type} {owner.name!r} body output removed"
    if choice == 2:
        body.output.append(helper.make_tensor_value_info(rng.choice([*(v.name for v in body.input), "nowhere"]),
                                                         TensorProto.FLOAT, None))
        return f"{owner.op_type} {owner.name!r} body output added"
    values = [v for v in [*body.input, *body.output] if v.type.HasField("tensor_type")]
    if not values:
        return None
    value = rng.choice(values)
    if choice == 3:
        value.type.tensor_type.elem_type = elem = rng.choice(TENSOR_TYPES)
        return f"{owner.op_type} {owner.name!r} body value {value.name!r} elem_type {type_name(elem)}"
    value.type.tensor_type.shape.Clear()
    for _ in range(rng.choice([0, 1, 5])):
        value.type.tensor_type.shape.dim.add().dim_value = rng.choice([0, 1, 2**31])
    return f"{owner.op_type} {owner.name!r} body value {value.name!r} reshaped"


def branches_disagree(rng: random.Random, draft: Draft) -> str | None:
    node = _any_node(rng, draft, "If")
    if node is None:
        return None
    then_g, else_g = _body(node, "then_branch"), _body(node, "else_branch")
    if then_g is None or else_g is None:
        return None
    if rng.random() < 0.5 and then_g.output:
        then_g.output.append(then_g.output[0])
        return f"If {node.name!r} then branch has one more output"
    for v in else_g.output:
        if v.type.HasField("tensor_type"):
            v.type.tensor_type.elem_type = rng.choice(TENSOR_TYPES)
    return f"If {node.name!r} else branch outputs change type"


def condition_value(rng: random.Random, draft: Draft) -> str | None:
    node = _any_node(rng, draft, "If")
    if node is None:
        return None
    array = rng.choice([np.array([True, False]), np.array([], bool), np.array(2.5, np.float32),
                        np.zeros((2, 2), np.int64)])
    node.input[0] = _constant(draft, "cond", array)
    return f"If {node.name!r} condition fed {array.dtype}{list(array.shape)}"


def scan_counts(rng: random.Random, draft: Draft) -> str | None:
    node = _any_node(rng, draft, "Scan")
    if node is None:
        return None
    ints = [a for a in node.attribute if a.type in (AttributeProto.INT, AttributeProto.INTS)]
    if ints and rng.random() < 0.6:
        attr = rng.choice(ints)
        if attr.type == AttributeProto.INT:
            attr.i = rng.choice(ABSURD_INTS)
        else:
            attr.ints[:] = [rng.choice(ABSURD_INTS) for _ in range(rng.randrange(0, 4))]
        return f"Scan {node.name!r} {attr.name} set absurd"
    node.attribute.append(helper.make_attribute(
        rng.choice(["scan_input_axes", "scan_output_axes", "scan_input_directions"]),
        [rng.choice(ABSURD_INTS) for _ in range(rng.randrange(1, 4))]))
    return f"Scan {node.name!r} axes/directions added"


def inside_body(rng: random.Random, draft: Draft) -> str | None:
    """Any attribute or graph mutation, aimed at a node inside a body."""
    bodies = graphs(draft.model.graph)[1:]
    if not bodies:
        return None
    body = rng.choice(bodies)
    inner = onnx.ModelProto()
    inner.graph.CopyFrom(body)
    inner.opset_import.extend(draft.model.opset_import)
    sub = Draft(inner, None)
    mutation = rng.choice([*attributes.MUTATIONS, graph.dangling_input, graph.surgery, graph.duplicate_name,
                           graph.cycle])
    what = mutation(rng, sub)
    if not what:
        return None
    body.CopyFrom(inner.graph)
    return f"inside body {body.name!r}: {what}"


MUTATIONS = [loop_condition_type, loop_condition_type, loop_trip_count, loop_trip_count, body_io, body_io,
             branches_disagree, condition_value, scan_counts, inside_body, inside_body]
