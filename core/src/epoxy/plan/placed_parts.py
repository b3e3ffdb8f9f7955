"""Values written where their consumer wants them: the parts of a concatenation in its buffer.

Why: a Concat over channels of one image copies every branch output into a new array
(squeezenet's fire modules, inception's branches, densenet's growing feature stacks: 7-8 % of
those models' runs on ep-cpu). When the concatenation's output is a planned arena buffer and
each input is the output of an ``out=``-capable kernel, that kernel can write its result
straight into its part of the buffer; the concatenation then finds its inputs in place and
copies nothing. DenseNet's chain of concatenations (each one an input of the next) nests: a
whole dense block lives in one buffer.

The protocol (``contract.OUT_PARTS``): a kernel that sets ``out_parts`` says, for its output's
shape and its inputs' shapes, where each input would lie in its ``out=`` buffer as one
C-contiguous block (an element offset) or None. Called with ``out=``, it must skip the inputs
already at their place and copy the others, so a producer that could not use its view (a
shape other than declared, a path without ``out=``) only costs the copy it always cost.

Safety: a part's region belongs to that one value for the group's whole life (the root
buffer's liveness is stretched from the first part's producer to the last use of any part or
of whatever may view them); graph outputs and what may alias them are never parts; parts start
on a cache line (the kernels' vector stores assume no more than the allocator gives them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..contract import OUT_PARTS
from ..kit.aligned import CACHE_LINE

#: (dtype, shape) of a slot's declared value, or None when it has no credible static size
SpecOf = Callable[[int], tuple[np.dtype, tuple[int, ...]] | None]


def place_parts(step_fns: Sequence[Any], step_inputs: Sequence[Sequence[int]],
                step_outputs: Sequence[Sequence[int]], capable: Sequence[bool], protected: set[int],
                spec_of: SpecOf) -> dict[int, tuple[int, int]]:
    """Part slot -> (root slot, byte offset in the root's buffer), for every input of an
    ``out_parts`` kernel that its producer can write in place. Steps are visited last to
    first, so a concatenation that is itself a part (densenet) places its own parts inside
    its parent's buffer."""
    producer = {outs[0]: index for index, outs in enumerate(step_outputs) if capable[index] and len(outs) == 1}
    placed: dict[int, tuple[int, int]] = {}
    for index in range(len(step_fns) - 1, -1, -1):
        parts_of = getattr(step_fns[index], OUT_PARTS, None)
        if parts_of is None or not capable[index]:
            continue
        slot = step_outputs[index][0]
        if slot in placed:
            root, base = placed[slot]
        elif slot in protected:
            continue
        else:
            root, base = slot, 0
        out_spec = spec_of(slot)
        in_specs = [spec_of(s) if s >= 0 else None for s in step_inputs[index]]
        if out_spec is None or any(spec is None for spec in in_specs):
            continue
        offsets = _checked_offsets(parts_of, out_spec[1], [spec[1] for spec in in_specs])  # type: ignore[index]
        if offsets is None:
            continue
        itemsize = out_spec[0].itemsize
        seen: set[int] = set()
        for part, offset in zip(step_inputs[index], offsets):
            first_use = part not in seen
            seen.add(part)  # a value given twice lives at its first place only
            if offset is None or not first_use or part in placed or part in protected or part not in producer:
                continue
            at = base + offset * itemsize
            spec = spec_of(part)
            if at % CACHE_LINE or spec is None or spec[0] != out_spec[0] or math.prod(spec[1]) == 0:
                continue
            if producer[part] >= index:  # (a plan in step order never has this)
                continue
            placed[part] = (root, at)
    return placed


def _checked_offsets(parts_of: Any, out_shape: tuple[int, ...],
                     shapes: list[tuple[int, ...]]) -> list[int | None] | None:
    """A kernel's ``out_parts`` answer, or None when it raised or is not one the planner can
    trust (a plugin's declaration must never make two values share memory): one entry per
    input, each None or a block inside the output, no two blocks overlapping."""
    try:
        offsets = parts_of(out_shape, shapes)
    except Exception:  # noqa: BLE001 - a provider's bug costs the placement, never the session
        return None
    if offsets is None or len(offsets) != len(shapes):
        return None
    total = math.prod(out_shape)
    blocks: list[tuple[int, int]] = []
    checked: list[int | None] = []
    for offset, shape in zip(offsets, shapes):
        if offset is None:
            checked.append(None)
            continue
        if not isinstance(offset, (int, np.integer)) or isinstance(offset, bool) or not 0 <= offset <= total:
            return None
        end = int(offset) + math.prod(shape)
        if end > total:
            return None
        blocks.append((int(offset), end))
        checked.append(int(offset))
    blocks.sort()
    if any(a_end > b_start for (_, a_end), (b_start, _) in zip(blocks, blocks[1:])):
        return None
    return checked
