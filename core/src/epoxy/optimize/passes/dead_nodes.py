"""Dead-node removal: onnx_ir's ``RemoveUnusedNodesPass``, with each op's schema read once.

What it does is that pass's (the tests hold it to that pass's output): nodes none of whose
outputs is read or a graph output are removed, last first, so chains go in one sweep
(subgraphs and function bodies too); a kept node loses its trailing empty inputs and, for an
ONNX op, its unused optional outputs (a BatchNormalization statically in inference mode
first drops ``training_mode``); initializers of the main graph nothing reads are removed.

Why not that pass: it asks onnx for the schema of every kept node and walks the schema's
outputs each time (~3-5 us a node: 1.9 ms of a 48 ms session creation on a TorchScript
Llama). Here the answer is kept per op type and opset.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

from ...graph.walk import node_subgraphs

_OPTIONAL = onnx.defs.OpSchema.FormalParameterOption.Optional
_VARIADIC = onnx.defs.OpSchema.FormalParameterOption.Variadic


class _OutputSchemas:
    """Per (op type, opset): which outputs are optional (None: nothing to drop, or no
    schema), and whether the op has a ``training_mode`` attribute."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, int], tuple[tuple[bool, ...] | None, bool]] = {}

    def get(self, op_type: str, opset: int) -> tuple[tuple[bool, ...] | None, bool]:
        key = (op_type, opset)
        found = self._found.get(key)
        if found is None:
            found = self._found[key] = self._read(op_type, opset)
        return found

    @staticmethod
    def _read(op_type: str, opset: int) -> tuple[tuple[bool, ...] | None, bool]:
        try:
            schema = onnx.defs.get_schema(op_type, opset, domain="")
        except Exception:  # noqa: BLE001 - an op onnx does not know: nothing to drop
            return None, False
        options = [o.option for o in schema.outputs]
        optional = None if _VARIADIC in options or _OPTIONAL not in options else tuple(o == _OPTIONAL for o in options)
        return optional, "training_mode" in schema.attributes


def _inference_mode_batch_norm(node: ir.Node) -> bool:
    """Drop a BatchNormalization's ``training_mode`` when it statically says inference
    (then its unused training outputs may go); False when it may train."""
    mode = node.attributes.get("training_mode")
    if mode is not None and (mode.is_ref() or mode.type != ir.AttributeType.INT or mode.as_int() != 0):
        return False
    node.attributes.pop("training_mode", None)
    return True


def _drop_unused_optional_outputs(node: ir.Node, graph_outputs: frozenset[ir.Value], opset: int,
                                  schemas: _OutputSchemas) -> None:
    optional, has_training_mode = schemas.get(node.op_type, opset)
    if node.op_type == "BatchNormalization" and (not has_training_mode or not _inference_mode_batch_norm(node)):
        return
    if optional is None:
        return
    outputs = node.outputs
    for i, out in enumerate(outputs[:len(optional)]):
        if optional[i] and out not in graph_outputs and not out.uses():
            out.name = ""
    count = len(outputs)
    while count and not outputs[count - 1].name:
        count -= 1
    if count != len(outputs):
        node.resize_outputs(count)


def _sweep(graph: ir.Graph | ir.Function, opset: int | None, schemas: _OutputSchemas) -> int:
    """Remove ``graph``'s dead nodes (and its subgraphs'); how many were removed."""
    graph_outputs = frozenset(graph.outputs)
    removed = 0
    for node in reversed(graph):
        outputs = node.outputs
        if not any(out in graph_outputs or out.uses() for out in outputs):
            graph.remove(node, safe=True)
            removed += 1
            continue
        inputs = node.inputs
        count = len(inputs)
        while count and inputs[count - 1] is None:
            count -= 1
        if count != len(inputs):
            node.resize_inputs(count)
        if opset is not None and node.domain == "":
            _drop_unused_optional_outputs(node, graph_outputs, opset, schemas)
        if node.attributes:
            for sub in node_subgraphs(node):
                removed += _sweep(sub, opset, schemas)
    return removed


class DeadNodeRemovalPass(ir.passes.InPlacePass):
    """Remove nodes and main-graph initializers nothing reads (see the module docstring)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        schemas = _OutputSchemas()
        graph = model.graph
        removed = _sweep(graph, graph.opset_imports.get(""), schemas)
        kept = frozenset(graph.outputs) | frozenset(graph.inputs)
        initializers = graph.initializers
        for name, value in list(initializers.items()):
            if not value.uses() and value not in kept:
                del initializers[name]
                removed += 1
        for function in model.functions.values():
            removed += _sweep(function, function.opset_imports.get(""), schemas)
        return ir.passes.PassResult(model, modified=bool(removed))
