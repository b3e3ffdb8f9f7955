"""IR version < 4 models list every initializer among the graph inputs; treat them as constants.

Before IR version 4 an initializer *had* to be declared as a graph input too, so being an
input did not mean "the caller may override it". onnxruntime reads such models the same
way (initializers of IR < 4 models are not overridable). Without this pass, every weight
of such a model is an overridable input: nothing computed from them can be folded, and
e.g. ``ConstantOfShape`` weight generators run on every call.
"""

from __future__ import annotations

import onnx_ir as ir


class LegacyInitializerInputsPass(ir.passes.InPlacePass):
    """Drop initializers from the graph inputs of models with ``ir_version < 4``."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if model.ir_version is None or model.ir_version >= 4:
            return ir.passes.PassResult(model, modified=False)
        graph = model.graph
        keep = [v for v in graph.inputs if not v.is_initializer()]
        if len(keep) == len(graph.inputs):
            return ir.passes.PassResult(model, modified=False)
        graph.inputs.clear()
        graph.inputs.extend(keep)
        model.ir_version = 4  # the first version where that layout is valid
        return ir.passes.PassResult(model, modified=True)
