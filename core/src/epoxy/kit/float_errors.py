"""numpy's floating-point error state during a run: one ``np.errstate`` per run, not per step.

Kernels return IEEE results (inf, NaN) without numpy's RuntimeWarnings. Entering
``np.errstate`` costs ~1.5 us, more than an Add of two small tensors, so the executors run
all steps under one :func:`quiet_floats` (numpy keeps the state per thread/context, so
concurrent runs are unaffected and the caller's own state is restored after), and a kernel's
fast path may skip its own. Plan-time constant folding runs kernels under it too.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def quiet_floats() -> Any:
    """The context every step runs in: floating-point errors neither warn nor raise."""
    return np.errstate(all="ignore")
