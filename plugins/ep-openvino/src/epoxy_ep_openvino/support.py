"""Our own gates, applied before OpenVINO's frontend is asked.

OpenVINO's ONNX frontend accepts opsets newer than it implements (Relu at opset 26 converts),
and converts some nodes into graphs that compute wrong values. So a node is offered to
OpenVINO only when

* its op is in :data:`OPS` and the ONNX schema version it resolves to (``since_version`` at
  the model's opset) is at most the version we checked,
* every input and output is a tensor of a dtype in :data:`DTYPES`,
* no entry of :data:`KNOWN_WRONG` matches it (cases our tests found OpenVINO to get wrong),

and OpenVINO's own partial conversion then converts it (see ``provider.py``).

The versions below were checked with the ONNX backend suite (every node case run with
openvino first and ``min_group_cost=0``): a case passing on cpu alone must pass with
openvino first. Raise a version only after re-running that check.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np
from epoxy.contract import GraphSpec, NodeSpec

# op -> highest ONNX schema version (since_version) verified. ai.onnx domain only.
OPS: dict[str, int] = {
    "Abs": 13, "Acos": 22, "Acosh": 22, "Add": 14, "And": 7, "ArgMax": 13, "ArgMin": 13,
    "Asin": 22, "Asinh": 22, "Atan": 22, "Atanh": 22, "AveragePool": 22,
    "BatchNormalization": 15, "BitShift": 11, "BitwiseAnd": 18, "BitwiseNot": 18,
    "BitwiseOr": 18, "BitwiseXor": 18, "Cast": 24, "CastLike": 24, "Ceil": 13, "Celu": 12,
    "Clip": 13, "Compress": 11, "Concat": 13, "Constant": 24, "ConstantOfShape": 24,
    "Conv": 22, "ConvInteger": 10, "ConvTranspose": 22, "Cos": 22, "Cosh": 22, "CumSum": 14,
    "DepthToSpace": 13, "DequantizeLinear": 24, "Div": 14, "Dropout": 22,
    "DynamicQuantizeLinear": 11, "Einsum": 12, "Elu": 22, "Equal": 19, "Erf": 13, "Exp": 13,
    "Expand": 13, "EyeLike": 22, "Flatten": 24, "Floor": 13, "Gather": 13,
    "GatherElements": 13, "GatherND": 13, "Gelu": 20, "Gemm": 13, "GlobalAveragePool": 22,
    "GlobalLpPool": 22, "GlobalMaxPool": 22, "Greater": 13, "GreaterOrEqual": 16,
    "GridSample": 22, "GroupNormalization": 21, "GRU": 22, "HammingWindow": 17,
    "HannWindow": 17, "BlackmanWindow": 17, "HardSigmoid": 22, "HardSwish": 22,
    "Hardmax": 13, "Identity": 24, "InstanceNormalization": 22, "IsFinite": 20,
    "IsInf": 20, "IsNaN": 20, "LayerNormalization": 17, "LeakyRelu": 16, "Less": 13,
    "LessOrEqual": 16, "Log": 13, "LogSoftmax": 13, "LpNormalization": 22, "LRN": 13,
    "LSTM": 22, "MatMul": 13, "MatMulInteger": 10, "Max": 13, "MaxPool": 22,
    "MaxRoiPool": 22, "Mean": 13, "MeanVarianceNormalization": 13, "Min": 13, "Mish": 22,
    "Mod": 13, "Mul": 14, "Neg": 13, "NonMaxSuppression": 11, "NonZero": 13, "Not": 1,
    "OneHot": 11, "Or": 7, "Pad": 24, "Pow": 15, "PRelu": 16, "QLinearConv": 10,
    "QLinearMatMul": 21, "QuantizeLinear": 24, "Range": 11, "Reciprocal": 13,
    "ReduceL1": 18, "ReduceL2": 18, "ReduceLogSum": 18, "ReduceLogSumExp": 18,
    "ReduceMax": 20, "ReduceMean": 18, "ReduceMin": 20, "ReduceProd": 18, "ReduceSum": 13,
    "ReduceSumSquare": 18, "Relu": 14, "Reshape": 24, "Resize": 19, "ReverseSequence": 10,
    "RNN": 22, "RoiAlign": 22, "Round": 22, "ScatterElements": 18, "ScatterND": 18,
    "Selu": 22, "Shape": 24, "Shrink": 9, "Sigmoid": 13, "Sign": 13, "Sin": 22, "Sinh": 22,
    "Size": 24, "Slice": 13, "Softmax": 13, "Softplus": 22, "Softsign": 22,
    "SpaceToDepth": 13, "Split": 18, "Sqrt": 13, "Squeeze": 24, "Sub": 14, "Sum": 13,
    "Tan": 22, "Tanh": 13, "ThresholdedRelu": 22, "Tile": 13, "TopK": 11, "Transpose": 24,
    "Trilu": 14, "Unique": 11, "Unsqueeze": 24, "Upsample": 10, "Where": 16, "Xor": 7,
}

#: dtypes OpenVINO computes exactly (no bfloat16/float8/int4/strings in its numpy binding;
#: float64 is computed in float32 by the CPU plugin: out-of-range values saturate).
#: float16 is added by the ``float16`` option: OpenVINO computes it in float32 and rounds once,
#: 1 ulp away from ONNX's step-by-step float16 results (test_attention_4d_causal_fp16_expanded).
DTYPES = frozenset(np.dtype(t) for t in (
    np.float32, np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64, np.bool_,
))

#: ops that never go to OpenVINO whatever the version: random (values differ from the cpu
#: provider's generator), control flow (the core runs it), strings and sequences.
NEVER = frozenset({
    "If", "Loop", "Scan", "SequenceMap", "RandomNormal", "RandomNormalLike", "RandomUniform",
    "RandomUniformLike", "Bernoulli", "Multinomial",
})

Predicate = Callable[[NodeSpec, GraphSpec], bool]


def _in_dtype(i: int, *dtypes: type) -> Predicate:
    wanted = {np.dtype(d) for d in dtypes}

    def check(node: NodeSpec, graph: GraphSpec) -> bool:
        return len(node.input_types) > i and node.input_types[i].dtype in wanted

    return check


def _out_dtype(i: int, *dtypes: type) -> Predicate:
    wanted = {np.dtype(d) for d in dtypes}

    def check(node: NodeSpec, graph: GraphSpec) -> bool:
        return len(node.output_types) > i and node.output_types[i].dtype in wanted

    return check


def _attr(name: str, *values: object) -> Predicate:
    def check(node: NodeSpec, graph: GraphSpec) -> bool:
        return node.attr(name) in values

    return check


def _always(node: NodeSpec, graph: GraphSpec) -> bool:
    return True


def _not_constant(i: int) -> Predicate:
    """Input ``i`` is present and not an initializer (computed at run time)."""

    def check(node: NodeSpec, graph: GraphSpec) -> bool:
        if len(node.inputs) <= i or not node.inputs[i]:
            return False
        if graph.constant(node.inputs[i]) is not None:
            return False
        producer = graph.producer(node.inputs[i])
        return producer is None or graph.nodes[producer].op_type != "Constant"

    return check


def _has_input(i: int) -> Predicate:
    def check(node: NodeSpec, graph: GraphSpec) -> bool:
        return len(node.inputs) > i and bool(node.inputs[i])

    return check


def _float_input(node: NodeSpec, graph: GraphSpec) -> bool:
    return bool(node.input_types) and node.input_types[0].dtype is not None and node.input_types[0].dtype.kind == "f"


def _zero_sized(node: NodeSpec, graph: GraphSpec) -> bool:
    return any(vt.shape is not None and 0 in vt.shape for vt in (*node.input_types, *node.output_types))


#: (op or "*", predicate, reason): OpenVINO converts these but computes wrong values.
#: Each entry comes from an ONNX backend case that passes on cpu and failed with openvino first.
KNOWN_WRONG: list[tuple[str, Predicate, str]] = [
    ("*", _zero_sized, "tensors with a zero-sized dim (e.g. ReduceMax over an empty set)"),
    ("Tile", _not_constant(1), "Tile with run-time repeats returns garbage (test_tile)"),
    ("ReduceMax", _float_input, ("float ReduceMax drops NaN and maps an all -inf row to -FLT_MAX "
                                 "(test_attention_*_nan_robustness_expanded, *_fullymasked_*)")),
    ("ReduceMin", _float_input, "float ReduceMin drops NaN (same kernel as ReduceMax)"),
    ("QuantizeLinear", _not_constant(1), "QuantizeLinear with a run-time scale (test_dynamicquantizelinear_expanded)"),
    ("QuantizeLinear", _not_constant(2), "QuantizeLinear with a run-time zero point"),
    ("DequantizeLinear", _not_constant(1), "DequantizeLinear with a run-time scale (same lowering as QuantizeLinear)"),
    ("DequantizeLinear", _not_constant(2), "DequantizeLinear with a run-time zero point"),
    ("DynamicQuantizeLinear", _always, "rounding of the computed zero point differs (test_dynamicquantizelinear)"),
    ("GRU", _attr("layout", 1), "layout=1 (batch first) (test_gru_batchwise)"),
    ("LSTM", _attr("layout", 1), "layout=1 (batch first) (test_lstm_batchwise)"),
    ("RNN", _attr("layout", 1), "layout=1 (batch first) (test_simple_rnn_batchwise)"),
    ("LSTM", _has_input(7), "peephole weights P (test_lstm_with_peepholes)"),
    ("MaxPool", _attr("ceil_mode", 1), "ceil_mode=1 output size (test_maxpool_2d_ceil_output_size_reduce_by_one)"),
    ("NonMaxSuppression", _always, "IoU threshold boundary (test_nonmaxsuppression_iou_threshold_boundary)"),
    ("Resize", _attr("mode", "cubic"), "cubic mode (test_resize_*_cubic_*)"),
    ("Resize", _attr("antialias", 1), "antialias=1 (test_resize_downsample_*_antialias)"),
    ("Resize", _attr("coordinate_transformation_mode", "align_corners"),
     "align_corners (test_resize_downsample_scales_linear_align_corners)"),
    ("Resize", _attr("keep_aspect_ratio_policy", "not_larger", "not_smaller"),
     "keep_aspect_ratio_policy (test_resize_*_nearest_not_larger/not_smaller)"),
    ("Resize", _attr("exclude_outside", 1), "exclude_outside=1"),
    ("RoiAlign", _attr("mode", "max"), "mode=max (test_roialign_mode_max)"),
]


@lru_cache(maxsize=4096)
def schema_version(op_type: str, opset: int) -> int | None:
    """``since_version`` of the ONNX schema ``op_type`` resolves to at ``opset``; None if unknown."""
    import onnx.defs

    try:
        return onnx.defs.get_schema(op_type, opset, "").since_version
    except Exception:  # noqa: BLE001 - unknown op or opset
        return None


def _type_reason(kind: str, index: int, vt: object, dtypes: frozenset) -> str | None:
    from epoxy.contract import ValueType

    assert isinstance(vt, ValueType)
    if vt.kind != "tensor":
        return f"{kind} {index} is a {vt.kind} value, openvino takes tensors only"
    if vt.dtype is None or vt.dtype not in dtypes:
        return f"{kind} {index} has dtype {vt.dtype}, not one openvino carries exactly"
    return None


DTYPES_WITH_FLOAT16 = DTYPES | {np.dtype(np.float16)}


def gate(node: NodeSpec, graph: GraphSpec, *, float16: bool = False) -> str | None:
    """Why our gates refuse ``node`` (``None``: offer it to OpenVINO's frontend)."""
    dtypes = DTYPES_WITH_FLOAT16 if float16 else DTYPES
    if node.domain:
        return f"domain {node.domain!r} is not offered to openvino"
    if node.op_type in NEVER:
        return f"{node.op_type} is not offered to openvino"
    limit = OPS.get(node.op_type)
    if limit is None:
        return f"{node.op_type} is not in the openvino allowlist"
    version = schema_version(node.op_type, node.opset)
    if version is None:
        return f"{node.qualified_op}: no ONNX schema at this opset"
    if version > limit:
        return f"{node.op_type} version {version} (opset {node.opset}) is newer than checked ({limit})"
    for k, (name, vt) in enumerate(zip(node.inputs, node.input_types)):
        if name:
            why = _type_reason("input", k, vt, dtypes)
            if why:
                return why
    for k, (name, vt) in enumerate(zip(node.outputs, node.output_types)):
        if name:
            why = _type_reason("output", k, vt, dtypes)
            if why:
                return why
    for op, predicate, reason in KNOWN_WRONG:
        if op in (node.op_type, "*") and predicate(node, graph):
            return f"known wrong in openvino: {reason}"
    return None
