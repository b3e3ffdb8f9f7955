"""See and trust what ran: compare providers value by value, and shrink a failure.

``validate(model, providers=[...], reference="cpu"|"onnxruntime")`` runs the model on the
providers under test and on a reference, compares every intermediate value both computed
and names the first node whose output diverges (its provider, op, error statistics and the
drift after it). ``reduce(model, providers=[X], mode="fails"|"diverges")`` delta-debugs the
graph to a few nodes that still fail or still diverge, fed with the real intermediate values.
docs/VALIDATE.md shows the workflow; ``epoxy validate`` and ``epoxy reduce`` are the CLI.
"""

from __future__ import annotations

# light on import (the CLI parser reads the default tolerances): onnx, onnxruntime, the
# session and the executor load when a check runs
from .capture import Capture, capture_session
from .compare import DEFAULT_ATOL, DEFAULT_RTOL, Stats, compare
from .reduce import ReducedCase, reduce
from .validate import ValidationReport, ValueDiff, validate

__all__ = [
    "DEFAULT_ATOL", "DEFAULT_RTOL", "Capture", "ReducedCase", "Stats", "ValidationReport", "ValueDiff",
    "capture_session", "compare", "reduce", "validate",
]
