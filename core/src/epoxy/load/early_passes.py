"""The optimizer's first passes done on the protobuf while loading, by their rules.

Loading does their work when the session says they will run (``optimize.LoadTimePasses``)
and the proto is its own to edit: Constant nodes lifted (:mod:`.constant_nodes`), an IR < 4
model's initializer inputs dropped (:mod:`.legacy_inputs`), constant-shape ConstantOfShape
fills folded and the shapes they leave unread removed (:mod:`.constant_fills`). Done before
the checks and shape inference, those read a third fewer nodes of a TorchScript export and
half those of a model that makes its weights with ConstantOfShape; each step that cannot
run there yet waits for after inference (see :func:`apply`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from .constant_fills import FoldedFills, fold_constant_fills
from .constant_nodes import lift_constant_nodes
from .legacy_inputs import drop_initializer_inputs


@dataclass(frozen=True)
class EarlyAsk:
    """Which steps to do (the passes that will run) and the fold's limits."""

    lift_constants: bool = False
    legacy_inputs: bool = False
    fold_fills: int | None = None  # the fold's element limit; None: no fold
    drop_unread: bool = False
    memory_limit: int | None = None

    @property
    def anything(self) -> bool:
        return self.lift_constants or self.legacy_inputs or self.fold_fills is not None


@dataclass
class EarlyWork:
    """What was done (the session reports those passes as applied) and what is left."""

    lifted: int = 0
    legacy_dropped: bool = False
    fold: FoldedFills = field(default_factory=FoldedFills)
    left: set[str] = field(default_factory=lambda: {"legacy", "lift", "fold"})


def settled_layout(proto: onnx.ModelProto) -> bool:
    """False for an IR < 4 model whose initializers are not all graph inputs: the graph
    checks repair that layout (and name those initializers), so nothing is done before them."""
    if proto.ir_version >= 4:
        return True
    inputs = {v.name for v in proto.graph.input}
    return all(t.name in inputs for t in proto.graph.initializer)


def apply(proto: onnx.ModelProto, ask: EarlyAsk, work: EarlyWork, *, before_checks: bool) -> None:
    """Do the steps ``ask`` wants that ``work`` has left, on ``proto`` (edited in place).
    Before the checks, lifting waits while the model is IR < 4 (its lifted initializers would
    not be inputs, which the checks would report of a model that never had them)."""
    if "legacy" in work.left:
        work.legacy_dropped = ask.legacy_inputs and drop_initializer_inputs(proto)
        work.left.discard("legacy")
    if "lift" in work.left and not (before_checks and proto.ir_version < 4):
        work.lifted = lift_constant_nodes(proto) if ask.lift_constants else 0
        work.left.discard("lift")
    if "fold" in work.left:
        if ask.fold_fills is not None:
            work.fold = fold_constant_fills(proto, ask.fold_fills, ask.drop_unread, max_bytes=ask.memory_limit)
        work.left.discard("fold")
