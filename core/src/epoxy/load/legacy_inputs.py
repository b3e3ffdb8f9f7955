"""IR < 4 models' initializers taken out of the graph inputs on the protobuf, before onnx_ir
builds the graph.

Why here and not only in the optimizer: such a model (onnx's ``light`` models among them)
lists every weight as a graph input too, so onnx_ir made an input value for each one that
the optimizer's :class:`~epoxy.optimize.passes.LegacyInitializerInputsPass` then dropped;
and the ConstantOfShape fold done while loading (:mod:`.constant_fills`) must see them as
the constants they are. The rule is the pass's: with ``ir_version < 4``, the main graph's
inputs that are initializers stop being inputs and the model reads as IR version 4.
"""

from __future__ import annotations

import onnx


def drop_initializer_inputs(proto: onnx.ModelProto) -> bool:
    """Apply the rule to ``proto`` (edited in place); whether it changed anything."""
    if proto.ir_version >= 4:
        return False
    graph = proto.graph
    names = {t.name for t in graph.initializer}
    kept = [v for v in graph.input if v.name not in names]
    if len(kept) == len(graph.input):
        return False
    del graph.input[:]
    graph.input.extend(kept)
    proto.ir_version = 4
    return True
