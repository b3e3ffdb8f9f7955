"""What a failing step becomes: errors naming the node, its provider and its outputs.

Shared by every executor (sequential, generated straight-line, parallel), so that a kernel's
failure reads the same whichever ran it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import EpoxyError, KernelError, ResourceLimitError

if TYPE_CHECKING:
    from .executor import Step


def step_error(step: Step, exc: Exception, slot_names: Sequence[str]) -> EpoxyError:
    """What a step's non-epoxy exception becomes, naming the node, provider and outputs: a
    :class:`ResourceLimitError` when it ran out of memory, else a :class:`KernelError`."""
    outputs = [slot_names[s].split("@", 1)[0] for s in step.outputs
               if 0 <= s < len(slot_names) and not slot_names[s].startswith("<")]
    computing = ", ".join(repr(n) for n in outputs) or "no named output"
    if isinstance(exc, MemoryError):
        return ResourceLimitError(
            f"node {step.label!r} ({step.op_type}) on provider {step.provider!r} ran out of memory computing "
            f"{computing}: {exc or 'MemoryError'}", value=outputs[0] if outputs else step.label)
    return KernelError(
        f"node {step.label!r} ({step.op_type}) failed on provider {step.provider!r}: {type(exc).__name__}: {exc} "
        f"(computing {computing})", node=step.label, op_type=step.op_type, provider=step.provider)


def output_count_error(result: Any, expected: int) -> TypeError | None:
    """Why a multi-output step's ``result`` cannot be stored: every executor refuses a kernel
    that returns fewer outputs than its node has (instead of an IndexError or silent Nones)."""
    if isinstance(result, tuple) and len(result) >= expected:
        return None
    got = f"a tuple of {len(result)}" if isinstance(result, tuple) else type(result).__name__
    return TypeError(f"kernel returned {got}, expected a tuple of {expected} outputs")
