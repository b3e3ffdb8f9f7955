"""ONNX-level rewrites applied to a group before OpenVINO reads it.

Each rewrite replaces one op whose OpenVINO lowering gives a result that depends on more
than the op's inputs (so epoxy would hand out an answer the cpu provider never gives) with
an equivalent formulation that OpenVINO computes evenly. A rewrite only sees the group's
exported model and the value types of the session graph; it returns the replacement nodes
(and any initializers they need), or ``None`` to leave the node as it is.

GlobalAveragePool: after a convolution in OpenVINO's blocked channel layout, the last
``C mod 16`` channels (the tail block) are summed in another order than the full blocks, so
two channels holding the same data average to values an ulp or more apart (measured on
OpenVINO 2026.4: conv 512->1000 on 13x13, channels 992-999). The ONNX backend case
test_squeezenet turns that into a wrong softmax. AveragePool over the whole image (static
spatial size) or ReduceMean over the flattened image computes every channel the same way at
the same speed (bench: within 1-2% on the light models).

QuantizeLinear of a Concat: OpenVINO 2026.4's CPU plugin dies with SIGSEGV while compiling
``Concat -> Q -> DQ -> Mul/Add/Sub (constant) or BatchNormalization -> Q`` (found on densenet121
written by onnxruntime's ``quantize_static`` without its pre-processing: every BatchNormalization
after a dense block's Concat; reduced to a five-node model, the Concat's inputs float or
quantized alike). A segfault takes the whole process, the session and the user's program with
it, so the group never gets that shape: ``Q(Concat(x1, ..., xn))`` becomes
``Concat(Q(x1), ..., Q(xn))``, which is the same codes (per-tensor Q is elementwise), and which
OpenVINO compiles (int8 layer counts and speed unchanged on the QDQ light models).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from epoxy.graph.names import FreshNames


@dataclass
class RewriteContext:
    """What a rewrite may read: the group model's default-domain opset, value shapes, and a
    source of fresh value names."""

    opset: int
    shapes: Callable[[str], tuple[Any, ...] | None]
    fresh: FreshNames
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    #: value name -> the node writing it, and -> how many node inputs or group outputs read it
    producers: dict[str, onnx.NodeProto] = field(default_factory=dict)
    reads: dict[str, int] = field(default_factory=dict)
    #: nodes a rewrite took into its replacement (left out of the rewritten graph)
    absorbed: set[int] = field(default_factory=set)

    def sole_reader_of(self, name: str) -> onnx.NodeProto | None:
        """The node writing ``name`` when the node being rewritten is its only reader."""
        node = self.producers.get(name)
        return node if node is not None and self.reads.get(name) == 1 else None

    def constant(self, hint: str, array: np.ndarray) -> str:
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name


Rewrite = Callable[[onnx.NodeProto, RewriteContext], "list[onnx.NodeProto] | None"]


def _global_average_pool(node: onnx.NodeProto, ctx: RewriteContext) -> list[onnx.NodeProto] | None:
    shape = ctx.shapes(node.input[0])
    if shape is None or len(shape) < 3:
        return None
    spatial = shape[2:]
    x, y = node.input[0], node.output[0]
    if all(isinstance(d, int) and d > 0 for d in spatial):
        return [helper.make_node("AveragePool", [x], [y], name=node.name, kernel_shape=list(spatial))]
    # dynamic image size: mean over the image flattened to one axis
    flat = ctx.fresh(f"{y}__flat")
    mean = ctx.fresh(f"{y}__mean")
    to_flat = ctx.constant(f"{y}__flat_shape", np.array([0, 0, -1], np.int64))
    to_out = ctx.constant(f"{y}__out_shape", np.array([0, 0] + [1] * len(spatial), np.int64))
    if ctx.opset >= 18:
        axes = ctx.constant(f"{y}__axes", np.array([2], np.int64))
        reduce = helper.make_node("ReduceMean", [flat, axes], [mean], keepdims=1)
    else:
        reduce = helper.make_node("ReduceMean", [flat], [mean], axes=[2], keepdims=1)
    return [
        helper.make_node("Reshape", [x, to_flat], [flat], name=f"{node.name}__flatten"),
        reduce,
        helper.make_node("Reshape", [mean, to_out], [y], name=f"{node.name}__unflatten"),
    ]


def _is_scalar(ctx: RewriteContext, name: str) -> bool:
    shape = ctx.shapes(name)
    return shape is not None and all(d == 1 for d in shape)


def _quantize_concat_parts(node: onnx.NodeProto, ctx: RewriteContext) -> list[onnx.NodeProto] | None:
    """``Q(Concat(x1..xn))`` -> ``Concat(Q(x1)..Q(xn))`` for a per-tensor Q that alone reads
    the Concat (see the module docstring: OpenVINO crashes on the first form)."""
    concat = ctx.sole_reader_of(node.input[0])
    if concat is None or concat.op_type != "Concat" or concat.domain not in ("", "ai.onnx"):
        return None
    if any(a.name == "block_size" for a in node.attribute) or not all(_is_scalar(ctx, n) for n in node.input[1:] if n):
        return None
    parts = []
    for k, x in enumerate(concat.input):
        q = onnx.NodeProto()
        q.CopyFrom(node)
        q.name = ctx.fresh(f"{node.name or node.output[0]}__part{k}")
        del q.input[:]
        q.input.extend([x, *node.input[1:]])
        del q.output[:]
        q.output.append(ctx.fresh(f"{node.output[0]}__part{k}"))
        parts.append(q)
    ctx.absorbed.add(id(concat))
    joined = helper.make_node("Concat", [q.output[0] for q in parts], list(node.output), name=concat.name)
    joined.attribute.extend(concat.attribute)
    return [*parts, joined]


#: op type (default domain) -> its rewrite
REWRITES: dict[str, Rewrite] = {
    "GlobalAveragePool": _global_average_pool,
    "QuantizeLinear": _quantize_concat_parts,
}


def apply_rewrites(model: onnx.ModelProto, shapes: Callable[[str], tuple[Any, ...] | None]) -> int:
    """Rewrite ``model``'s main graph in place; returns how many nodes were replaced."""
    graph = model.graph
    if not any(n.domain in ("", "ai.onnx") and n.op_type in REWRITES for n in graph.node):
        return 0
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    taken = {v for n in graph.node for v in (*n.input, *n.output)}
    taken.update(t.name for t in graph.initializer)
    taken.update(v.name for v in graph.input)
    ctx = RewriteContext(opset, shapes, FreshNames(taken))
    for node in graph.node:
        ctx.producers.update((name, node) for name in node.output if name)
        for name in node.input:
            ctx.reads[name] = ctx.reads.get(name, 0) + 1
    for out in graph.output:
        ctx.reads[out.name] = ctx.reads.get(out.name, 0) + 1
    nodes: list[onnx.NodeProto] = []
    replaced = 0
    for node in graph.node:
        rewrite = REWRITES.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        new = rewrite(node, ctx) if rewrite is not None else None
        if new is None:
            nodes.append(node)
        else:
            nodes.extend(new)
            replaced += 1
    if replaced:
        del graph.node[:]
        graph.node.extend(n for n in nodes if id(n) not in ctx.absorbed)
        graph.initializer.extend(ctx.initializers)
    return replaced
