"""Which values of a graph are fixed by the shapes of its inputs: the shape arithmetic of exports.

TorchScript exports compute every Reshape target at run time (Shape -> Gather -> Unsqueeze ->
Concat -> Reshape), and both exporters build masks and position ids from Shape and Range.
Those results depend on the shapes of the graph inputs, never on their contents, so a run
whose inputs have the shapes of an earlier run can reuse them (``epoxy.run.shape_cache``).

The analysis is a forward pass over the nodes with two facts per value:
*shape-fixed* (its shape is a function of the input shapes) and *value-fixed* (its contents
are). Constants are value-fixed; graph inputs are shape-fixed; ``Shape``/``Size`` of a
shape-fixed value is value-fixed; a deterministic node whose inputs are all value-fixed has
value-fixed outputs; a node in :data:`SHAPE_RULES` whose inputs are shape-fixed (and whose
listed parameter inputs are value-fixed) has shape-fixed outputs. Anything else (an op not
listed, control flow, random ops, a data-dependent size like NonZero's) stops both facts: the
rules are a whitelist, so an op added later is safe until someone lists it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ..graph.graph_spec import CoreGraph

#: ops whose results may differ between runs with equal inputs, or that run subgraphs (which
#: may hold such ops): never value-fixed
NONDETERMINISTIC = frozenset({
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial",
    "Dropout", "If", "Loop", "Scan", "SequenceMap",
})

#: domains whose ops are pure functions of their inputs (bar :data:`NONDETERMINISTIC`)
PURE_DOMAINS = frozenset({"", "ai.onnx.ml", "com.microsoft", "com.epoxy.cpu"})


@dataclass(frozen=True)
class ShapeRule:
    """The output shapes of an op follow from its inputs' shapes, its attributes and the
    contents of the inputs at ``value_inputs`` (positions; absent optional ones are fine)."""

    value_inputs: tuple[int, ...] = ()


_FOLLOWS = ShapeRule()
_UNARY = (
    "Abs Acos Acosh Asin Asinh Atan Atanh BitwiseNot Cast Ceil Celu Cos Cosh Elu Erf Exp Floor Gelu HardSigmoid "
    "HardSwish Identity IsInf IsNaN LeakyRelu Log Mish Neg Not Reciprocal Relu Round Selu Shrink Sigmoid Sign Sin "
    "Sinh Softplus Softsign Sqrt Tan Tanh ThresholdedRelu CastLike Clip Dropout RandomNormalLike RandomUniformLike "
    "Bernoulli"
)
_BROADCASTING = (
    "Add Sub Mul Div Pow Mod Max Min Sum Mean Equal Less Greater LessOrEqual GreaterOrEqual And Or Xor Where PRelu "
    "BitShift BitwiseAnd BitwiseOr BitwiseXor"
)
_LAYOUT = (
    "MatMul Gemm Conv ConvTranspose MaxPool AveragePool LpPool GlobalAveragePool GlobalMaxPool GlobalLpPool "
    "BatchNormalization InstanceNormalization LayerNormalization GroupNormalization RMSNormalization LpNormalization "
    "LRN Softmax LogSoftmax Hardmax Transpose Flatten Concat Gather GatherElements GatherND ScatterND "
    "ScatterElements Trilu CumSum Einsum DepthToSpace SpaceToDepth QuantizeLinear DequantizeLinear ArgMax ArgMin "
    "MatMulInteger ConvInteger"
)
_WITH_VALUES: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Squeeze": (1,), "Unsqueeze": (1,),
    "Split": (1,), "Pad": (1, 3), "Resize": (1, 2, 3), "Upsample": (1,), "TopK": (1,), "OneHot": (1,),
    "ConstantOfShape": (0,), "Range": (0, 1, 2), "CenterCropPad": (1,), "Col2Im": (1, 2),
    **{op: (1,) for op in ("ReduceMean ReduceSum ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum "
                          "ReduceLogSumExp ReduceSumSquare").split()},
}

#: (domain, op) -> rule; whitelisted only (see the module docstring)
SHAPE_RULES: dict[tuple[str, str], ShapeRule] = {
    **{("", op): _FOLLOWS for op in f"{_UNARY} {_BROADCASTING} {_LAYOUT}".split()},
    **{("", op): ShapeRule(inputs) for op, inputs in _WITH_VALUES.items()},
    # fused forms written by the optimizer passes (core's and ep-cpu's) and onnxruntime's names
    **{(domain, op): _FOLLOWS for domain in ("com.microsoft", "com.epoxy.cpu")
       for op in ("FusedConv", "FusedGemm", "FusedMatMul", "FusedAttention", "FusedAttentionCore", "Gelu",
                  "BiasGelu", "FastGelu", "QuickGelu", "FusedRotary", "SqueezeExcite")},
}

#: ops whose output is value-fixed once their input's *shape* is
SHAPE_READERS = frozenset({"Shape", "Size"})


def shape_fixed_values(graph: CoreGraph, overridable: Collection[str] = ()) -> frozenset[str]:
    """Names of the values (constants excluded) whose contents follow from the input shapes.

    ``overridable``: initializers a feed may replace; their contents are not fixed."""
    constants = graph.constants()
    value_fixed = {name for name in constants if name not in overridable}
    shape_fixed = set(value_fixed) | set(graph.inputs) | set(overridable)
    derived: set[str] = set()
    for node in graph.nodes:
        if node.index in graph.implicit_inputs or not _tensor_outputs(graph, node.outputs):
            continue
        inputs = [name for name in node.inputs if name]
        if node.domain == "" and node.op_type in SHAPE_READERS:
            if len(inputs) == 1 and inputs[0] in shape_fixed:
                _mark(node.outputs, value_fixed, shape_fixed, derived)
            continue
        if (node.domain in PURE_DOMAINS and _deterministic(node.op_type)
                and all(name in value_fixed for name in inputs)):
            _mark(node.outputs, value_fixed, shape_fixed, derived)
            continue
        rule = SHAPE_RULES.get((node.domain, node.op_type))
        if rule is not None and _rule_holds(rule, node.inputs, shape_fixed, value_fixed):
            shape_fixed.update(name for name in node.outputs if name)
    return frozenset(derived)


def _deterministic(op_type: str) -> bool:
    """Not random and no subgraph (contrib ops spell dropouts and randoms many ways)."""
    return op_type not in NONDETERMINISTIC and "Dropout" not in op_type and "Random" not in op_type


def _rule_holds(rule: ShapeRule, inputs: tuple[str, ...], shape_fixed: set[str], value_fixed: set[str]) -> bool:
    if not all(name in shape_fixed for name in inputs if name):
        return False
    return all(inputs[i] in value_fixed for i in rule.value_inputs if i < len(inputs) and inputs[i])


def _mark(outputs: tuple[str, ...], value_fixed: set[str], shape_fixed: set[str], derived: set[str]) -> None:
    named = [name for name in outputs if name]
    value_fixed.update(named)
    shape_fixed.update(named)
    derived.update(named)


def _tensor_outputs(graph: CoreGraph, outputs: tuple[str, ...]) -> bool:
    """Sequences, maps and optionals are never cached (only arrays are snapshotted)."""
    return all(graph.value_type(name).kind in ("tensor", "unknown") for name in outputs if name)


def skippable_steps(steps: list, slot_names: list[str], fixed: frozenset[str],
                    graph_outputs: Mapping[str, int]) -> tuple[set[int], tuple[int, ...]]:
    """Steps a run with cached shape values can skip, and the slots it must be given instead.

    A step is skipped when every output it writes is a host value in ``fixed`` and none is
    a graph output (a returned array must be fresh each run). The returned slots are the
    skipped steps' outputs read by a step that still runs."""
    outputs = set(graph_outputs.values())
    real = len(slot_names) - 2  # the last two slots are the plan's "<none>" and "<discard>"
    skip: set[int] = set()
    produced: set[int] = set()
    for index, step in enumerate(steps):
        named = [s for s in step.outputs if s < real]
        if step.provider == "copy" or not named:
            continue
        if any(s in outputs or slot_names[s] not in fixed for s in named):
            continue
        skip.add(index)
        produced.update(named)
    needed = sorted({s for index, step in enumerate(steps) if index not in skip for s in step.inputs if s in produced})
    return skip, tuple(needed)
