"""Rotary position embedding in the "rotate half" form -> ``com.epoxy.cpu::FusedRotary``.

Hugging Face's ``apply_rotary_pos_emb`` (Llama, Mistral, Qwen, GPT-NeoX...), as both torch.onnx
exporters write it for each of q and k::

    y = Add(Mul(x, cos), Mul(Concat(Neg(Slice(x, h, end)), Slice(x, 0, h), axis=-1), sin))

with the slices on the last axis. Seven nodes on a head tensor of a few hundred elements at
batch 1 (a Llama layer of 16 tokens: [1, 4, 16, 8]) cost ~25 us a layer for q and ~20 for k
inside the model, a fifth of an exported Llama's run; onnxruntime's default CPU session
does not fuse this pattern either (its transformers optimizer does). ``FusedRotary(x, cos,
sin)`` with ``split = h`` (-1: half the last dimension, where the TorchScript exporter
computes ``h`` from the shape at run time) runs the same numpy operations in one step: the same values, bit
for bit (negation is exact, and the products and the sum are the graph's own).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from epoxy.contract import NodeSpec
from epoxy.kit.passes import (
    Namer,
    RewritePass,
    attr,
    constant,
    dtype_of,
    ensure_opset,
    graph_nodes,
    is_op,
    make_node,
    opset_of,
    other_input,
    producer_of,
    rank_of,
    replace,
    sole_consumer,
)

from ..registry import KERNELS
from .fused import DOMAIN, DOMAIN_VERSION

#: element types fused (float16 keeps its ops: each of its kernels widens on its own)
_FUSED_TYPES = (ir.DataType.FLOAT, ir.DataType.DOUBLE)
#: a Slice end at least this large reads to the end of any axis
_TO_THE_END = 1 << 31


#: a slice bound that is half the sliced tensor's last dimension, computed at run time
HALF = -1


def _is_half_of_last_dim(value: ir.Value | None, x: ir.Value, rank: int | None) -> bool:
    """Whether ``value`` is ``[Unsqueeze(.., 0)] [Cast to int64]* Div(Gather(Shape(x), -1), 2)``:
    torch.onnx's TorchScript exporter writes ``x[..., : x.shape[-1] // 2]`` so when the head
    size is not a constant of its trace (the Gather is a constant once the core's static-shape
    pass has read a static last dimension)."""
    node = producer_of(value)
    if is_op(node, "Unsqueeze"):
        axes = attr(node, "axes") if len(node.inputs) < 2 else constant(node.inputs[1])
        if axes is None or [int(a) for a in np.asarray(axes).reshape(-1)] != [0]:
            return False
        value = node.inputs[0]
        node = producer_of(value)
    while is_op(node, "Cast") and int(attr(node, "to", 0)) == ir.DataType.INT64:
        value = node.inputs[0]
        node = producer_of(value)
    if not is_op(node, "Div") or len(node.inputs) != 2:
        return False
    two = constant(node.inputs[1])
    if two is None or two.size != 1 or int(two.reshape(-1)[0]) != 2 or two.dtype.kind not in "iu":
        return False
    folded = constant(node.inputs[0])  # the dimension already a constant (static shapes)
    if folded is not None:
        last = x.shape[-1] if x.shape is not None and len(x.shape) else None
        return folded.size == 1 and isinstance(last, int) and int(folded.reshape(-1)[0]) == last
    gather = producer_of(node.inputs[0], "Gather")
    if gather is None or len(gather.inputs) != 2 or int(attr(gather, "axis", 0)) != 0:
        return False
    index = constant(gather.inputs[1])
    if index is None or index.size != 1:
        return False
    i = int(index.reshape(-1)[0])
    shape = producer_of(gather.inputs[0], "Shape")
    if shape is None or shape.inputs[0] is not x or attr(shape, "start") is not None or attr(shape, "end") is not None:
        return False
    return i == -1 or (rank is not None and i == rank - 1)


def _bound(value: ir.Value | None, x: ir.Value, rank: int | None) -> int | None:
    """A Slice bound: a constant (non-negative, where ONNX clamps as Python's slices do),
    :data:`HALF`, or None for anything else."""
    c = constant(value)
    if c is not None:
        if c.size != 1 or int(c.reshape(-1)[0]) < 0:
            return None
        return int(c.reshape(-1)[0])
    return HALF if _is_half_of_last_dim(value, x, rank) else None


def _last_axis_slice(model: ir.Model, node: ir.Node | None, rank: int | None) -> tuple[ir.Value, int, int] | None:
    """(data, start, end) of a Slice (opset 10 on) with step 1 on the last axis of its
    rank-``rank`` input (axis -1, or ``rank - 1``) whose bounds are :func:`_bound`'s, else None."""
    if not is_op(node, "Slice") or opset_of(model, node) < 10 or not 4 <= len(node.inputs) <= 5:
        return None
    x = node.inputs[0]
    axes = constant(node.inputs[3])
    if x is None or axes is None or axes.size != 1:
        return None
    if len(node.inputs) > 4 and node.inputs[4] is not None:
        steps = constant(node.inputs[4])
        if steps is None or steps.size != 1 or int(steps.reshape(-1)[0]) != 1:
            return None
    axis = int(axes.reshape(-1)[0])
    if axis != -1 and (rank is None or axis != rank - 1):
        return None
    start, end = _bound(node.inputs[1], x, rank), _bound(node.inputs[2], x, rank)
    if start is None or end is None:
        return None
    return x, start, end


def _rotated_half(model: ir.Model, concat: ir.Node) -> tuple[ir.Value, int, list[ir.Node]] | None:
    """(x, h, [the Neg, both Slices]) when ``concat`` is ``Concat(Neg(x[..., h:]), x[..., :h],
    axis=-1)``, each intermediate read once, else None; ``h`` may be :data:`HALF`."""
    if len(concat.inputs) != 2 or len(concat.outputs) != 1:
        return None
    neg = producer_of(concat.inputs[0], "Neg")
    first = producer_of(concat.inputs[1], "Slice")
    if neg is None or first is None or sole_consumer(concat.inputs[0]) is not concat:
        return None
    second = producer_of(neg.inputs[0], "Slice") if neg.inputs else None
    if second is None or sole_consumer(neg.inputs[0]) is not neg or sole_consumer(concat.inputs[1]) is not concat:
        return None
    rank = rank_of(first.inputs[0])
    low, high = _last_axis_slice(model, first, rank), _last_axis_slice(model, second, rank)
    if low is None or high is None or low[0] is not high[0] or low[1] != 0:
        return None
    x = low[0]
    h = low[2]
    to_the_end = high[2] >= _TO_THE_END or (
        high[2] != HALF and x.shape is not None and isinstance(x.shape[-1], int) and high[2] >= x.shape[-1])
    if high[1] != h or not to_the_end:
        return None
    axis = int(attr(concat, "axis", 0))
    if axis != -1 and (rank is None or axis != rank - 1):
        return None
    return x, h, [neg, first, second]


class CpuRotaryFusionPass(RewritePass):
    """The rotate-half rotary pattern above -> ``FusedRotary(x, cos, sin)``."""

    needs = (frozenset({"Concat"}), frozenset({"Neg"}), frozenset({"Slice"}))

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for concat in graph_nodes(graph):
            if concat.graph is not graph or not is_op(concat, "Concat"):
                continue
            rotated = _rotated_half(model, concat)
            if rotated is None or dtype_of(rotated[0]) not in _FUSED_TYPES:
                continue
            x, h, inner = rotated
            terms = _mixing_terms(concat, x)
            if terms is None:
                continue
            cos, sin, outer = terms
            add = outer[-1]
            fused = make_node(namer, "FusedRotary", [x, cos, sin], {"split": h}, name=add.name or "rotary",
                              domain=DOMAIN)
            ensure_opset(model, DOMAIN, DOMAIN_VERSION)
            replace(graph, [*inner, concat, *outer], [fused], [add.outputs[0]], [fused.outputs[0]])
            count += 1
        return count


def _mixing_terms(concat: ir.Node, x: ir.Value) -> tuple[ir.Value, ir.Value, list[ir.Node]] | None:
    """(cos, sin, [the two Muls, the Add]) when the rotated ``concat`` output is read only as
    ``Add(Mul(x, cos), Mul(rotated, sin))`` (any operand order), each product read once."""
    mul_sin = sole_consumer(concat.outputs[0])
    if not is_op(mul_sin, "Mul"):
        return None
    sin = other_input(mul_sin, concat.outputs[0])
    add = sole_consumer(mul_sin.outputs[0])
    if sin is None or sin[0] is None or not is_op(add, "Add"):
        return None
    cos_term = other_input(add, mul_sin.outputs[0])
    if cos_term is None or cos_term[0] is None or sole_consumer(cos_term[0]) is not add:
        return None
    mul_cos = cos_term[0].producer()
    if not is_op(mul_cos, "Mul"):
        return None
    cos = other_input(mul_cos, x)
    if cos is None or cos[0] is None:
        return None
    return cos[0], sin[0], [mul_sin, mul_cos, add]


@KERNELS.register("FusedRotary", DOMAIN_VERSION, domain=DOMAIN)
def fused_rotary(node: NodeSpec):
    split = int(node.attr("split"))

    def run(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        if x.ndim == 0:
            raise ValueError("FusedRotary: the input has no last axis to rotate")
        h = x.shape[-1] // 2 if split == HALF else split
        rotated = np.concatenate((np.negative(x[..., h:]), x[..., :h]), axis=-1)
        y = np.multiply(x, cos)
        b = np.multiply(rotated, sin)
        return np.add(y, b, out=y) if y.shape == b.shape else np.add(y, b)

    return run
