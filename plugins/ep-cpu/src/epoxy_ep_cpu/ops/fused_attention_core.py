"""The scaled dot-product core of attention -> ``com.epoxy.cpu::FusedAttentionCore``.

The pattern, as both torch.onnx exporters write ``scaled_dot_product_attention`` (and as
any exporter writes the core of attention, whatever reshapes make its heads)::

    s = MatMul([Mul(q, cq)], [Mul(k, ck)]) [Div c | Mul c] [Add mask]
    p = Softmax(s, axis=-1)
    p = Where(IsNaN(p), 0, p)          # optional: torch's guard for fully masked rows
    Y = MatMul(p, v)

becomes ``FusedAttentionCore(q, k, v, mask?)`` with ``q_scale`` (``cq``), ``k_scale``
(``ck``), ``scale`` (``c`` or ``1/c``) and ``nan_to_zero`` as attributes. Why: on the small
tensors of the models users export (a BERT layer at batch 1, 16 tokens) these 5-7 nodes cost
~22 us a layer in per-node overhead for ~3 us of arithmetic; the q/k/v head views stay as
they are (they are views: Reshape and Transpose cost ~1 us each).

``FusedAttention`` (ops/fused_attention.py) takes the whole block when its head reshapes are
constants (BERT exporters op by op); this pass runs after it and takes the core of the rest,
whose head shapes are computed at run time (torch's exporters). The float32/float64 kernel
scales q once by ``q_scale * k_scale * scale`` (the graph multiplies q and k apart: a
difference of float rounding), adds the mask in place, runs the registered Softmax kernel
(the unfused graph's, bit for bit on the same scores) and zeroes NaN probabilities when the
guard was there, elementwise as ``Where(IsNaN)`` does. Other dtypes run the original ops'
registered kernels one after another.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_ir as ir

from epoxy.contract import NodeSpec
from epoxy.kit.passes import (
    attr,
    constant,
    consumers,
    is_op,
    opset_of,
    producer_of,
)

from .. import jit
from ..registry import KERNELS
from ._broadcast import fits_into
from .fused import DOMAIN, DOMAIN_VERSION, _kernel
from .fused_attention import (
    CpuAttentionFusionPass,
    SoftmaxAnchoredPass,
    _only_reader,
    _scalar_for,
    _scale_of,
    _spec,
    context_matmul,
    scores_of,
)

_FAST = (np.dtype(np.float32), np.dtype(np.float64))
_F32 = np.dtype(np.float32)
#: scores shapes a node keeps a prepared softmax for (a decoder's grow token by token)
_SHAPES_KEPT = 8


# ============================================================================ kernel
@KERNELS.register("FusedAttentionCore", DOMAIN_VERSION, domain=DOMAIN)
def fused_attention_core(node: NodeSpec):
    q_scale = float(node.attr("q_scale", 1.0))
    k_scale = float(node.attr("k_scale", 1.0))
    scale = float(node.attr("scale", 1.0))
    nan_to_zero = bool(node.attr("nan_to_zero", 0))
    has_mask = len(node.inputs) > 3 and bool(node.inputs[3])
    softmax = _kernel(_spec(node, "Softmax", 13, 1, {"axis": -1}))
    slow = _op_by_op(node, softmax, q_scale, k_scale, scale, nan_to_zero)
    combined = q_scale * k_scale * scale
    compiled = jit.kernels("softmax")
    nthreads = jit.thread_count() if compiled is not None else 0
    rows: dict[tuple[int, ...], Any] = {}  # float32 scores shape -> prepared ``LastAxisRows``

    def softmax_of(s: np.ndarray) -> np.ndarray:
        """The Softmax node's result for ``s``, float32 scores (the product's own array)
        in place on its compiled rows kernel."""
        if compiled is None or s.dtype != _F32 or s.size == 0 or not s.flags.c_contiguous:
            return softmax(s)  # type: ignore[no-any-return]
        prepared = rows.get(s.shape)
        if prepared is None:
            if len(rows) >= _SHAPES_KEPT:
                rows.clear()
            prepared = rows[s.shape] = compiled.LastAxisRows(s.shape, nthreads)
        return prepared(s)  # type: ignore[no-any-return]

    splits = [(int(node.attr(f"{name}_split", 0)), int(node.attr(f"{name}_split_layout", 1))) for name in "qkv"]
    merge = bool(node.attr("merge", 0))

    def run(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        if splits[0][0]:
            q = _heads(q, *splits[0])
        if splits[1][0]:
            k = _heads(k, *splits[1])
        if splits[2][0]:
            v = _heads(v, *splits[2])
        y = attend(q, k, v, mask)
        return _merged(y) if merge else y

    def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        mask = mask if has_mask else None
        dt = q.dtype
        if dt not in _FAST or k.dtype != dt or v.dtype != dt or (mask is not None and mask.dtype != dt):
            return slow(q, k, v, mask)
        s = np.matmul(q * dt.type(combined) if combined != 1.0 else q, k)
        if mask is not None:
            s = np.add(s, mask, out=s) if fits_into(mask.shape, s.shape) else s + mask
        p = softmax_of(s)
        if nan_to_zero:
            p = _zero_nans(p, s)
        return np.matmul(p, v)

    return run


def _heads(x: np.ndarray, depth: int, layout: int) -> np.ndarray:
    """A [b, s, h x d] projection split into heads, as the Reshape and Transpose the graph had
    made them (``attention_heads.py``): [b, h, s, d], or [b, h, d, s] for layout 2 (a key
    already transposed); C-contiguous like the Transpose step's copy, so the products after
    it read the same bits in the same layout."""
    if x.ndim != 3 or x.shape[2] % depth:
        raise ValueError(f"FusedAttentionCore: an input of shape {list(x.shape)} does not split into heads of "
                         f"{depth}")
    b, s, width = x.shape
    heads = x.reshape(b, s, width // depth, depth)
    return np.ascontiguousarray(heads.transpose((0, 2, 3, 1) if layout == 2 else (0, 2, 1, 3)))


def _merged(y: np.ndarray) -> np.ndarray:
    """The context [b, h, s, d] merged back to [b, s, h x d] (Transpose then Reshape)."""
    b, h, s, d = y.shape
    return np.ascontiguousarray(y.transpose(0, 2, 1, 3)).reshape(b, s, h * d)


def _zero_nans(p: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """``Where(IsNaN(p), 0, p)``; in place when ``p`` is the kernel's own fresh array."""
    nans = np.isnan(p)
    if not nans.any():
        return p
    if p is scores or p.base is not None or not p.flags.writeable:
        p = p.copy()
    p[nans] = 0
    return p


def _op_by_op(node: NodeSpec, softmax: Callable[..., Any], q_scale: float, k_scale: float, scale: float,
              nan_to_zero: bool) -> Callable[..., np.ndarray]:
    """The original graph through the registered kernels (for dtypes the fast path skips)."""
    matmul = _kernel(_spec(node, "MatMul", 13, 2, {}))
    mul = _kernel(_spec(node, "Mul", 14, 2, {}))
    add = _kernel(_spec(node, "Add", 14, 2, {}))

    def scaled(x: np.ndarray, c: float) -> np.ndarray:
        return x if c == 1.0 else mul(x, np.asarray(c, dtype=x.dtype))

    def run(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        s = scaled(matmul(scaled(q, q_scale), scaled(k, k_scale)), scale)
        p = softmax(s if mask is None else add(s, mask))
        if nan_to_zero:
            p = np.where(np.isnan(p), p.dtype.type(0), p)
        return matmul(p, v)

    return run


# ============================================================================ pass
def _scaled_input(value: ir.Value, reader: ir.Node) -> tuple[ir.Value, float, ir.Node | None]:
    """``value = Mul(x, c)`` (or ``Mul(c, x)``) with a one-element float constant, read only by
    ``reader``: (x, c, the Mul); else (value, 1.0, None)."""
    mul = producer_of(value)
    if is_op(mul, "Mul") and len(mul.outputs) == 1 and _only_reader(value, reader):
        for x in mul.inputs:
            c = _scale_of(mul, x)
            if c is not None:
                return x, c, mul
    return value, 1.0, None


def _nan_guard(probs: ir.Value) -> tuple[ir.Value, list[ir.Node]] | None:
    """``Where(IsNaN(probs), 0, probs)`` when those two nodes are all that read ``probs``:
    (the Where's output, [IsNaN, Where])."""
    readers = consumers(probs)
    isnan = next((n for n in readers if is_op(n, "IsNaN")), None)
    where = next((n for n in readers if is_op(n, "Where")), None)
    if len(readers) != 2 or isnan is None or where is None or probs.is_graph_output():
        return None
    flag = isnan.outputs[0]
    if len(where.inputs) != 3 or where.inputs[0] is not flag or where.inputs[2] is not probs:
        return None
    if not _only_reader(flag, where) or flag.is_graph_output():
        return None
    if _scalar_for(constant(where.inputs[1]), probs) != 0.0:  # a 0 that cannot raise the rank
        return None
    return where.outputs[0], [isnan, where]


class CpuAttentionCoreFusionPass(SoftmaxAnchoredPass):
    """The core pattern above -> ``com.epoxy.cpu::FusedAttentionCore``."""

    fused_op = "FusedAttentionCore"

    def accepts(self, model: ir.Model, sm: ir.Node) -> bool:
        return _softmax_over_last_axis(model, sm)

    def match(self, sm: ir.Node):  # type: ignore[no-untyped-def]
        scores = scores_of(sm)
        if scores is None:
            return None
        mm1, mask, scale, steps = scores
        nodes = [sm, *steps, mm1]
        q, q_scale, q_mul = _scaled_input(mm1.inputs[0], mm1)
        k, k_scale, k_mul = _scaled_input(mm1.inputs[1], mm1)
        nodes += [n for n in (q_mul, k_mul) if n is not None]
        probs = sm.outputs[0]
        nan_to_zero = 0
        guard = _nan_guard(probs)
        if guard is not None:
            probs, guard_nodes = guard
            nodes += guard_nodes
            nan_to_zero = 1
        mm2 = context_matmul(probs)
        if mm2 is None:
            return None
        nodes.append(mm2)
        if len({id(n) for n in nodes}) != len(nodes) or mm2.inputs[1] is probs:
            return None
        inputs = [q, k, mm2.inputs[1]] + ([mask] if mask is not None else [])
        attrs = {"q_scale": float(q_scale), "k_scale": float(k_scale), "scale": float(scale),
                 "nan_to_zero": nan_to_zero}
        return inputs, attrs, nodes, mm2.outputs[0]


def _softmax_over_last_axis(model: ir.Model, node: ir.Node) -> bool:
    """Softmax (opset 13 on) over the last axis: ``axis=-1``, or the scores' last axis by a
    known rank. Older Softmax flattens from its axis, which the kernel does not assume."""
    if opset_of(model, node) < 13:
        return False
    axis = int(attr(node, "axis", -1))
    shape = node.inputs[0].shape
    return axis == -1 or (shape is not None and axis == len(shape) - 1)


def attention_passes() -> list[ir.passes.PassBase]:
    """The whole block first (``FusedAttention``), then the core of the attention it leaves,
    then the head views around that core (``attention_heads.py``)."""
    from .attention_heads import CpuAttentionHeadViewsPass

    return [CpuAttentionFusionPass(), CpuAttentionCoreFusionPass(), CpuAttentionHeadViewsPass()]
