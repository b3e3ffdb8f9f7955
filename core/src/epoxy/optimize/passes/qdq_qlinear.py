"""Run a QDQ convolution on its integer codes: ``DQ(x_q) -> Conv(DQ(W_q), DQ(B_q)) [-> Relu] ->
Q(y_scale, y_zp)`` becomes ``QLinearConv(x_q, ..., W_q, ..., B_q) [-> Max(., y_zp)]``.

Why: a static QDQ model written for int8 (epoxy's ``quantize_static``, onnxruntime's tool,
quantization-aware training exports) describes each layer as float math between quantize and
dequantize nodes; run as written it is float speed at best. The cpu provider runs QLinearConv
on its int8 GEMM (AVX512-VNNI: 1.7-2.8x the float32 conv on resnet-sized layers), as
onnxruntime's CPU provider turns the same pattern into its QLinearConv.

Which layers: those the cpu provider's int8 GEMM takes (``MIN_MACS``, ``MIN_CHANNELS``, ``MIN_FIELD``), where
running on codes is faster than its float kernels; smaller ones keep the float reading.

What changes in the values: QLinearConv rounds once, from the exact integer sums scaled by
``x_scale * w_scale / y_scale``; the QDQ graph rounds the float32 convolution of the
dequantized values. The codes agree but for values within float32 rounding of a half step,
where they differ by one (tests bound it); this is the int8 execution the model was written
for, and why the pass is at level ``extended`` (``basic`` keeps the float reading of the graph).

A Relu between the Conv and the Q is ``max(code, y_zp)`` on the codes (Q is monotonic and
maps 0 to y_zp), so it becomes an integer Max, or nothing when ``y_zp`` is the codes' lowest
value (a range calibrated after the Relu starts at 0: uint8 zero point 0), since no code lies
below it. A Clip with constant bounds (ReLU6: MobileNet's activation) is the same on both
sides: ``clip(code, Q(lo), Q(hi))`` as an integer Max and/or Min, each left out where its bound
is the codes' own limit (a range calibrated after a ReLU6 is [0, 6]: nothing is left). The
bias must be a DQ of int32 codes whose
scale is ``x_scale * w_scale`` (as quantizers write it) with zero points 0; per-channel weights
quantized along the output axis; scalar activation scales and zero points.

Why provider-scoped (``builtin.py``: cpu first, before ``DequantizeWeightsPass``): a provider
running QDQ natively (OpenVINO) reads the pattern itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from ...kit.passes import (
    Namer,
    RewritePass,
    add_initializer,
    attr,
    constant,
    copy_attributes,
    is_op,
    make_node,
    opset_of,
    replace,
    sole_consumer,
)
from .qdq_match import F32, channel_weights, constant_dq, dq_parts, drop_if_unread, layer_nodes, scalar_params


def _bias(conv: ir.Node, x_scale: np.ndarray, w_scale: np.ndarray) -> tuple[ir.Node | None, ir.Value | None] | None:
    """(its DQ, the int32 codes) of an exactly representable bias, (None, None) without one."""
    value = conv.inputs[2] if len(conv.inputs) > 2 else None
    if value is None:
        return None, None
    found = constant_dq(value)
    if found is None:
        return None
    b, s, z = found.codes_value, found.scale_value, found.zero_point_value
    if b.dtype != np.int32 or b.ndim != 1 or s.dtype != F32 or (z is not None and z.any()):
        return None
    want = (x_scale.reshape(()) * w_scale).astype(F32)  # the product the quantizers write
    try:
        given, product = np.broadcast_arrays(s.reshape(-1) if s.size > 1 else s.reshape(()), want)
    except ValueError:
        return None
    return (found.node, found.codes) if np.array_equal(given, product) else None


@dataclass
class _Match:
    """A convolution the pass rewrites: the nodes it replaces, QLinearConv's inputs, the Relu
    taken in (or None), the output Q, and the DQs that may be left without a reader."""

    old: list[ir.Node]
    inputs: list[ir.Value | None]
    relu: ir.Node | None
    q: ir.Node
    dqs: list[ir.Node]


#: the layers worth running on codes, as the cpu provider's int8 GEMM takes them
#: (``epoxy_ep_cpu/jit/kernels_int8_conv.py``): at least this many multiply-adds per image and
#: input channels per group. Smaller layers run its float kernels faster than integer sums
#: (squeezenet's 1x1 squeeze layers: 17.9 ms for the model in float, 24.4 ms on codes, before
#: the GEMM kept channels-last codes). 2**22 since session 20: with channels-last codes between
#: layers, whole models on their QDQ files, median ms from 2**24 to 2**22, 1 / 2 threads:
#: inception_v1 27.2 -> 24.9 / 23.3 -> 22.1, squeezenet 10.2 -> 9.5 / 11.0 -> 10.4, resnet50
#: unchanged (54 / 53); at 2**20 squeezenet on one thread lost (11.0). 2**20 since session 22,
#: with the GEMM's 6 x 64 register tiles and its requantizing epilogue (epoxy's whole-chain QDQ
#: files, 1 / 2 threads, median ms from 2**22 to 2**20: squeezenet 6.61 -> 5.70 / 6.22 -> 5.35,
#: inception_v1 18.6 -> 17.4 / 18.5 -> 17.3, inception_v2 unchanged; lower gained nothing more).
#: Grouped layers (several input channels per group) are taken by this rewrite alone, on the
#: same thresholds: the cpu provider runs them as one GEMM per group (``kernels_int8_grouped``);
#: ``QDQConvToIntegerPass`` leaves them in float (ConvInteger has no grouped kernel). ShuffleNet's
#: 1x1 groups of 34 codes run slower on codes than in the float kernel alone (0.12 against 0.07
#: ms), but the float reading adds a dequantize and a quantize pass: the model, epoxy's QDQ file,
#: 1 thread, median ms, all grouped layers in float / on codes / those of 40 codes or more on
#: codes: 7.31 / 6.41 / 6.33, then 6.32 / 6.42 with the channel shuffle on codes (session 23)
MIN_MACS = 1 << 20
MIN_CHANNELS = 16
#: a layer with fewer input channels is taken when one output pixel's receptive field (C * kh *
#: kw codes, the GEMM's K) reaches this: a 3-channel 7x7 stem (K = 147) on codes made resnet50's
#: QDQ file 1.04-1.07x faster and inception_v1's 1.03-1.09x (1 / 2 threads, session 22), a
#: 3-channel 3x3 stem (K = 27, squeezenet) 0.95-1.06x
MIN_FIELD = 128
#: or reaches this with this many output channels: a 3x3 stem (27 codes) since session 23, with
#: the GEMM's 6 x 64 register tiles (epoxy's QDQ files, median ms, 1 / 2 threads, float stem ->
#: stem on codes: squeezenet's 3 -> 64 5.07 -> 4.73 / 5.05 -> 4.84, MobileNetV2's 3 -> 32 7.29
#: -> 6.94 / 7.39 -> 7.13; ShuffleNet's 3 -> 24 lost, 6.06 -> 6.15 / 5.97 -> 6.17)
MIN_NARROW_FIELD, MIN_NARROW_OUTPUTS = 27, 32
#: whether ``QDQConvToIntegerPass`` rewrites grouped layers too (see MIN_MACS: not on the cpu
#: provider; the rewrite itself is exact for them, and its tests switch this on)
TAKE_GROUPED = False
#: multiply-adds per image from which a depthwise layer (one input channel per output channel)
#: runs on codes: the cpu provider's channels-last depthwise kernel (``kernels_int8_depthwise``).
#: Every one (session 22: a torch-exported MobileNetV2 at 224x224, epoxy's QDQ file, 1 / 2
#: threads, median ms with its 17 depthwise layers in float against on codes: 11.6 -> 7.2 /
#: 12.1 -> 7.5; from 2**16 or 2**18 no faster)
MIN_DEPTHWISE_MACS = 0
#: weight ranks of 1-D to 3-D convolutions and beyond (output channels first)
CONV_RANKS = tuple(range(3, 9))


def large_enough(conv: ir.Node, w: np.ndarray, *, depthwise: bool = False, grouped: bool = False) -> bool:
    """Whether the layer (group 1) reaches MIN_MACS per image (its inferred output's spatial
    dims are known) with MIN_CHANNELS input channels, or a receptive field of MIN_FIELD codes
    (MIN_NARROW_FIELD with MIN_NARROW_OUTPUTS output channels);
    with ``depthwise`` (QLinearConv, which the cpu provider runs depthwise on codes), also a 2-D
    depthwise layer of MIN_DEPTHWISE_MACS; with ``grouped`` (QLinearConv, which it runs one GEMM
    per group), a 2-D grouped layer on the group-1 thresholds, its channels counted per group."""
    shape = conv.outputs[0].shape
    if shape is None or len(shape) != w.ndim or not all(isinstance(d, int) for d in list(shape)[2:]):
        return False
    spatial = int(np.prod([int(d) for d in list(shape)[2:]]))  # type: ignore[arg-type]
    group = int(attr(conv, "group", 1) or 1)
    if group != 1 and depthwise and w.ndim == 4 and w.shape[1] == 1 and w.shape[0] == group:
        return spatial * int(np.prod(w.shape)) >= MIN_DEPTHWISE_MACS
    if group != 1 and not (TAKE_GROUPED or (grouped and w.ndim == 4)):
        return False
    field = int(np.prod(w.shape[1:]))
    narrow = group == 1 and field >= MIN_NARROW_FIELD and w.shape[0] >= MIN_NARROW_OUTPUTS
    return (w.shape[1] >= MIN_CHANNELS or field >= MIN_FIELD or narrow) and spatial * int(np.prod(w.shape)) >= MIN_MACS


def _match(model: ir.Model, conv: ir.Node) -> _Match | None:
    x = dq_parts(conv.inputs[0])
    weights = channel_weights(conv.inputs[1], model, channel_axis=0, ranks=CONV_RANKS)
    if x is None or weights is None or not large_enough(conv, weights.codes_value, depthwise=True, grouped=True):
        return None
    x_node, x_codes, x_scale, x_zp = x
    w_node, w_codes, w_scale, w_zp = weights.node, weights.codes, weights.scale, weights.zero_point
    w_scale_value = weights.scale_value
    x_params = scalar_params(x_scale, x_zp)
    # QLinearConv's zero points are required inputs; the codes' type is their zero point's (8-bit)
    if x_params is None or x_zp is None or w_zp is None:
        return None
    bias = _bias(conv, x_params[0], w_scale_value)
    if bias is None:
        return None
    nxt = sole_consumer(conv.outputs[0])
    relu = nxt if is_op(nxt, "Relu") or (is_op(nxt, "Clip") and _clip_bounds(model, nxt) is not None) else None
    q = sole_consumer(relu.outputs[0]) if relu is not None else nxt
    if q is None or not is_op(q, "QuantizeLinear") or len(q.inputs) < 3 or q.inputs[2] is None:
        return None
    if scalar_params(q.inputs[1], q.inputs[2]) is None or int(attr(q, "output_dtype", 0) or 0):  # type: ignore[arg-type]
        return None
    inputs = [x_codes, x_scale, x_zp, w_codes, w_scale, w_zp, q.inputs[1], q.inputs[2]]
    if bias[1] is not None:
        inputs.append(bias[1])
    old = [conv] + ([relu] if relu is not None else []) + [q]
    dqs = [x_node, w_node] + ([bias[0]] if bias[0] is not None else [])
    return _Match(old, inputs, relu, q, dqs)


def _clip_bounds(model: ir.Model, clip: ir.Node) -> tuple[float | None, float | None] | None:
    """A Clip's constant (min, max), None for an absent bound; None when a bound is computed at
    run time (then the Clip is no activation this pass can take)."""
    if opset_of(model, clip) < 11:
        lo, hi = attr(clip, "min"), attr(clip, "max")
        return (None if lo is None else float(lo), None if hi is None else float(hi))
    bounds: list[float | None] = []
    for index in (1, 2):
        value = clip.inputs[index] if len(clip.inputs) > index else None
        if value is None:
            bounds.append(None)
            continue
        array = constant(value)
        if array is None or array.size != 1:
            return None
        bounds.append(float(array.reshape(())))
    return bounds[0], bounds[1]


def _bound_code(bound: float, q: ir.Node) -> int | None:
    """``QuantizeLinear(bound)`` with the Q's constant parameters, as its kernel computes it
    (float32 division, rounding half to even, saturation): Q is monotonic, so
    ``Q(clip(v, lo, hi)) = clip(Q(v), Q(lo), Q(hi))`` and the Clip can act on the codes."""
    scale, zp = constant(q.inputs[1]), constant(q.inputs[2])
    if scale is None or zp is None:
        return None
    info = np.iinfo(zp.dtype)
    with np.errstate(all="ignore"):
        code = np.rint(np.float32(bound) / np.float32(scale.reshape(()))) + float(zp.reshape(()))
    return int(np.clip(code, info.min, info.max))


def _code_clamps(model: ir.Model, found: _Match) -> list[tuple[str, int]]:
    """The integer ops that do the match's activation on QLinearConv's codes: ``("Max", code)``
    and/or ``("Min", code)``, leaving out a bound at the codes' own limit (a Relu's bound is
    the zero point: nothing when that is the lowest code)."""
    relu, q = found.relu, found.q
    if relu is None:
        return []
    zp = constant(q.inputs[2])
    if zp is None:
        return []
    info = np.iinfo(zp.dtype)
    lo, hi = (0.0, None) if is_op(relu, "Relu") else _clip_bounds(model, relu) or (None, None)
    clamps = []
    for op, bound, limit in (("Max", lo, info.min), ("Min", hi, info.max)):
        code = None if bound is None else _bound_code(bound, q)
        if code is not None and code != limit:
            clamps.append((op, code))
    return clamps


class QDQConvToQLinearPass(RewritePass):
    """``DQ -> Conv [-> Relu | Clip] -> Q`` with quantized weights (and bias) -> ``QLinearConv``
    [-> Max / Min on the codes]."""

    needs = (frozenset({"Conv"}), frozenset({"DequantizeLinear"}))

    max_sweeps = 1

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for conv in layer_nodes(model, graph, "Conv", since=10):  # QLinearConv is opset 10
            found = _match(model, conv)
            clamps = _code_clamps(model, found) if found is not None else []
            # Max and Min take 8-bit codes from opset 12
            if found is None or (clamps and opset_of(model, conv) < 12):
                continue
            qconv = make_node(namer, "QLinearConv", found.inputs, name=conv.name or "conv")
            copy_attributes(conv, qconv)
            new = [qconv]
            zp = constant(found.q.inputs[2])
            for op, code in clamps:  # Q(clip(y, lo, hi)) = clip(Q(y), Q(lo), Q(hi)): the activation on the codes
                assert zp is not None and found.relu is not None
                bound = add_initializer(graph, namer, f"{conv.name or 'conv'}_{op.lower()}_code",
                                        np.array(code, dtype=zp.dtype))
                new.append(make_node(namer, op, [new[-1].outputs[0], bound], name=found.relu.name or "activation"))
            replace(graph, found.old, new, [found.q.outputs[0]], [new[-1].outputs[0]])
            for dq in found.dqs:  # a DQ only the Conv read goes with it
                drop_if_unread(graph, dq)
            count += 1
        return count
