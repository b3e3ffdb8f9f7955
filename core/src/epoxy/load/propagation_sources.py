"""Whether onnx's data propagation could change any inferred type in a model, read from an
inference run without it.

Why: loading infers shapes twice, without data propagation (strict: declarations inference
disagrees with are found; long 1-D values, which propagation would crawl, are found) and
then with it. The second run costs as much as the first and, on most CNNs, infers exactly
what the first did; it is skipped when this module shows it must.

How: propagation computes values ("data") only at nodes whose op has a propagation function
(``Shape``, ``Size``, ``Concat``, ``Gather``, ``Slice``, ``Add``, ``Mul``...). It starts from
what such a node can read as data: any input of ``Shape``/``Size`` (its shape), and for the
others an integer initializer or any value of rank 0 or 1 (its elements, known or not), and
it flows to those nodes' outputs. Data changes a type only where a node's inference reads an
input's values (Reshape's shape, Expand's shape, Slice's starts, a reduction's axes...). So
the values that may carry data are followed from every start through the propagating nodes
(over-approximated: an output carries data when any input may); when every node that reads
one reads it where its inference reads no values (:data:`READS_NO_VALUES`: Conv, Relu,
BatchNormalization, MaxPool...; a propagating op at an input its inference reads the shape
of), the second run would infer what the first did.
densenet121's scale vectors (Unsqueeze -> Mul -> Add -> Relu), squeezenet's and resnet50's
Concat/Add of feature maps pass; an exported transformer's Shape -> Gather -> Concat ->
Reshape does not. A model with subgraphs or local functions always gets the second run.
"""

from __future__ import annotations

import functools

import onnx

from .attribute_checks import declared_rank
from .proto_tensors import node_graphs

#: ops whose shape alone is data to propagation (any input rank)
_SHAPE_READERS = frozenset({"Shape", "Size"})

#: ONNX ops whose shape inference reads no input's values, only types and attributes (so
#: data that reaches them changes nothing); every op of onnx's with a value-reading rule
#: (Reshape, Expand, Tile, Pad, Resize, Slice, Split, TopK, ConstantOfShape, Range,
#: reductions with axes inputs...) is left out, and so is every op not listed
READS_NO_VALUES = frozenset({
    "Abs", "And", "AveragePool", "BatchNormalization", "Ceil", "Clip", "Conv", "ConvTranspose", "Div", "Dropout",
    "Elu", "Equal", "Erf", "Exp", "Flatten", "Floor", "Gemm", "GlobalAveragePool", "GlobalMaxPool", "Greater",
    "HardSigmoid", "HardSwish", "Identity", "InstanceNormalization", "LRN", "LayerNormalization", "LeakyRelu", "Less",
    "Log", "LogSoftmax", "MatMul", "Max", "MaxPool", "Mean", "Min", "Neg", "Not", "Or", "PRelu", "Pow", "Reciprocal",
    "Relu", "Selu", "Sigmoid", "Softmax", "Softplus", "Softsign", "Sqrt", "Sum", "Tanh", "Transpose", "Where",
})


#: the inputs whose values the inference of a propagating op reads (Slice's starts, ends,
#: axes and steps; Squeeze's and Unsqueeze's axes); the others' inference reads shapes only.
#: A propagating op not listed here (a later onnx's) counts as reading every input
_PROPAGATING_VALUE_INPUTS: dict[str, frozenset[int]] = {
    **dict.fromkeys(("Add", "Sub", "Mul", "Cast", "Concat", "Gather", "Shape", "Size"), frozenset()),
    "Slice": frozenset({1, 2, 3, 4}), "Squeeze": frozenset({1}), "Unsqueeze": frozenset({1}),
}


@functools.cache
def _propagating_ops() -> frozenset[str]:
    """ONNX-domain op types with a data propagation function at any opset (onnx's schemas)."""
    return frozenset(schema.name for schema in onnx.defs.get_all_schemas_with_history()
                     if schema.domain in ("", "ai.onnx") and schema.has_data_propagation_function)


def _ranks(graph: onnx.GraphProto, names: set[str]) -> dict[str, int]:
    """The known ranks of ``names`` in ``graph``'s types (only those are read: a transformer
    declares thousands of values)."""
    ranks: dict[str, int] = {}
    for info in (*graph.input, *graph.value_info, *graph.output):
        if info.name in names and (rank := declared_rank(info)) is not None:
            ranks[info.name] = rank
    for tensor in graph.initializer:  # an initializer's dims win (a declaration may be wrong)
        if tensor.name in names:
            ranks[tensor.name] = len(tensor.dims)
    return ranks


def propagation_has_no_source(inferred: onnx.ModelProto) -> bool:
    """True when data propagation could change no type of ``inferred`` (a model with the
    types of an inference run without it): see the module docstring."""
    graph = inferred.graph
    if inferred.functions or node_graphs(graph.node):
        return False
    propagating = _propagating_ops()
    onnx_domain = ("", "ai.onnx")
    nodes = [node for node in graph.node if node.op_type in propagating and node.domain in onnx_domain]
    if not nodes:
        return True
    # what a Shape or Size makes carries data whatever the ranks: an exported transformer's
    # Shape -> Gather -> Concat -> Reshape is found here without reading any declared type
    # (the ranks below read every value_info: ~2 ms of a 600-node model's loading)
    if any(node.op_type in _SHAPE_READERS for node in nodes) and _value_read(graph, propagating, set()):
        return False
    read = {name for node in nodes for name in node.input if name}
    ranks = _ranks(graph, read)
    starts = {name for name in read if ranks.get(name, 0) < 2}  # rank 0/1 or unknown: may be data
    # an initializer's values are read by inference with or without propagation: only what
    # propagation makes, and a vector it reads from a feed, can change a type where read
    carries = starts - {tensor.name for tensor in graph.initializer}
    return not _value_read(graph, propagating, starts, carries)


def _value_read(graph: onnx.GraphProto, propagating: frozenset[str], starts: set[str],
                carries: set[str] | None = None) -> bool:
    """Whether data from ``starts`` (and every Shape and Size) reaches an input whose values a
    node's inference reads. One walk in graph order (data made upstream is known when read);
    ``carries`` (what may hold data, grown here) defaults to empty."""
    carries = set() if carries is None else carries
    onnx_domain = ("", "ai.onnx")
    for node in graph.node:
        fed = [index for index, name in enumerate(node.input) if name in carries]
        if fed and not _reads_no_values(node, fed, propagating):
            return True
        if node.op_type in propagating and node.domain in onnx_domain and (
                node.op_type in _SHAPE_READERS or fed or any(name in starts for name in node.input)):
            carries.update(name for name in node.output if name)
    return False


def _reads_no_values(node: onnx.NodeProto, inputs: list[int], propagating: frozenset[str]) -> bool:
    """Whether ``node``'s inference reads none of ``inputs``' values (only their types)."""
    if node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type in propagating:
        value_inputs = _PROPAGATING_VALUE_INPUTS.get(node.op_type)
        return value_inputs is not None and not value_inputs.intersection(inputs)
    return node.op_type in READS_NO_VALUES
