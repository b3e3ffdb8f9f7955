"""Attribute mutations: wrong types, absurd values (huge, negative, past the rank), 0/1 flags
out of range, even/odd sizes, empty lists, attributes removed, duplicated or invented."""

from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import AttributeProto, helper

from .common import ABSURD_INTS, TENSOR_TYPES, Draft, all_nodes, any_node

#: attributes read as 0/1 flags somewhere in the ONNX ops
FLAGS = {"keepdims", "ceil_mode", "count_include_pad", "transA", "transB", "exclusive", "reverse", "sorted",
         "largest", "select_last_index", "noop_with_empty_axes", "training_mode", "center_point_box",
         "detect_negative", "detect_positive", "linearly_interpolate", "new_axis", "layout", "upper",
         "align_corners", "periodic", "onesided", "inverse", "stash_type", "is_case_sensitive", "fmod"}
#: attributes that size something (a window, a hidden state, an output): parity and size matter
SIZES = {"size", "hidden_size", "kernel_shape", "blocksize", "block_size", "k", "depth", "num_outputs",
         "output_height", "output_width", "group", "pooled_shape", "spatial_scale", "dilations", "strides",
         "pads", "output_shape", "output_padding", "axis", "axes", "perm", "num_scan_inputs", "sampling_ratio",
         "batch_dims", "seed", "to", "dtype", "num_groups", "mode", "window", "dft_length"}


def _attribute(rng: random.Random, draft: Draft, kinds: tuple[int, ...] | None = None
               ) -> tuple[onnx.NodeProto, AttributeProto] | None:
    node = any_node(rng, draft.model)
    if node is None:
        return None
    candidates = [a for a in node.attribute if kinds is None or a.type in kinds]
    if not candidates:
        return None
    return node, rng.choice(candidates)


def wrong_type(rng: random.Random, draft: Draft) -> str | None:
    found = _attribute(rng, draft)
    if found is None:
        return None
    node, attr = found
    old, name = attr.type, attr.name
    choice = rng.randrange(8)
    attr.Clear()
    attr.name = name
    if choice == 0:
        attr.type, attr.s = AttributeProto.STRING, b"not a number"
    elif choice == 1:
        attr.type, attr.f = AttributeProto.FLOAT, rng.choice([1.5, float("nan"), -1e30])
    elif choice == 2:
        attr.type = AttributeProto.INTS
        attr.ints.extend(rng.choice(ABSURD_INTS) for _ in range(rng.randrange(0, 5)))
    elif choice == 3:
        attr.type, attr.i = AttributeProto.INT, rng.choice(ABSURD_INTS)
    elif choice == 4:
        attr.type = AttributeProto.GRAPH
        attr.g.CopyFrom(helper.make_graph([], "empty", [], []))
    elif choice == 5:
        attr.type = AttributeProto.TENSOR
        attr.t.CopyFrom(helper.make_tensor("t", rng.choice(TENSOR_TYPES[:5]), [rng.choice([0, 1, 3])], [])
                        if rng.random() < 0.3 else onnx.numpy_helper.from_array(np.zeros((2, 0), np.float32)))
    elif choice == 6:
        attr.type = AttributeProto.FLOATS
        attr.floats.extend([float("nan"), float("inf")])
    else:
        attr.type = rng.choice([AttributeProto.UNDEFINED, 99, AttributeProto.TYPE_PROTO])
        attr.i = 3
    return f"attribute {name!r} of {node.op_type} changed from type {old} to {attr.type}"


def absurd_value(rng: random.Random, draft: Draft) -> str | None:
    found = _attribute(rng, draft, (AttributeProto.INT, AttributeProto.INTS, AttributeProto.FLOAT))
    if found is None:
        return None
    node, attr = found
    if attr.type == AttributeProto.FLOAT:
        attr.f = rng.choice([float("nan"), float("inf"), -float("inf"), 0.0, -1.0, 1e38, 1e-45])
        return f"attribute {attr.name!r} of {node.op_type} set to {attr.f}"
    if attr.type == AttributeProto.INT:
        attr.i = rng.choice(ABSURD_INTS)
        return f"attribute {attr.name!r} of {node.op_type} set to {attr.i}"
    if attr.ints and rng.random() < 0.7:
        attr.ints[rng.randrange(len(attr.ints))] = rng.choice(ABSURD_INTS)
    else:
        del attr.ints[:]
        attr.ints.extend(rng.choice(ABSURD_INTS) for _ in range(rng.randrange(0, 9)))
    return f"attribute {attr.name!r} of {node.op_type} set to {list(attr.ints)[:8]}"


def flag_out_of_range(rng: random.Random, draft: Draft) -> str | None:
    """A 0/1 flag set to 7, 1000, -1...: the reference reads any non-zero as true."""
    flags = [(n, a) for n in all_nodes(draft.model) for a in n.attribute
             if a.name in FLAGS and a.type == AttributeProto.INT]
    if not flags:
        return None
    node, attr = rng.choice(flags)
    attr.i = rng.choice([2, 7, 1000, -1, 2**31, -(2**63)])
    return f"flag {attr.name!r} of {node.op_type} set to {attr.i}"


def parity_and_size(rng: random.Random, draft: Draft) -> str | None:
    """A size attribute made even/odd, off by one, zero, negative or near the rank."""
    found = _attribute(rng, draft, (AttributeProto.INT, AttributeProto.INTS))
    if found is None:
        return None
    node, attr = found
    nudges = [lambda v: v + 1, lambda v: v - 1, lambda v: v * 2, lambda v: -v, lambda v: 0, lambda v: v + 64,
              lambda v: -v - 64, lambda v: v | 1, lambda v: v & ~1]
    nudge = rng.choice(nudges)
    if attr.type == AttributeProto.INT:
        attr.i = nudge(attr.i)
        return f"attribute {attr.name!r} of {node.op_type} nudged to {attr.i}"
    if not attr.ints:
        return None
    i = rng.randrange(len(attr.ints))
    attr.ints[i] = nudge(attr.ints[i])
    return f"attribute {attr.name!r} of {node.op_type} nudged to {list(attr.ints)[:8]}"


def empty_list(rng: random.Random, draft: Draft) -> str | None:
    found = _attribute(rng, draft, (AttributeProto.INTS, AttributeProto.FLOATS, AttributeProto.STRINGS))
    if found is None:
        return None
    node, attr = found
    name, kind = attr.name, attr.type
    attr.Clear()
    attr.name, attr.type = name, kind
    return f"attribute {name!r} of {node.op_type} emptied"


def add_or_remove(rng: random.Random, draft: Draft) -> str | None:
    node = any_node(rng, draft.model)
    if node is None:
        return None
    if node.attribute and rng.random() < 0.5:
        attr = node.attribute.pop(rng.randrange(len(node.attribute)))
        return f"attribute {attr.name!r} removed from {node.op_type}"
    if node.attribute and rng.random() < 0.5:
        node.attribute.append(node.attribute[rng.randrange(len(node.attribute))])
        return f"attribute {node.attribute[-1].name!r} of {node.op_type} duplicated"
    name = rng.choice(sorted(SIZES | FLAGS) + ["bogus"])
    node.attribute.append(helper.make_attribute(name, rng.choice([1, -1, 2**40, 7, 1.0, "x", [1, 2], [-(2**62)]])))
    return f"attribute {name!r} added to {node.op_type}"


MUTATIONS = [wrong_type, absurd_value, absurd_value, flag_out_of_range, parity_and_size, parity_and_size, empty_list,
             add_or_remove]
