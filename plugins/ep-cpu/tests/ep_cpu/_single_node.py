"""The graph inputs of a single-node test model: one name per array, "" for an omitted optional."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from onnx import helper


def node_inputs(inputs: Sequence[np.ndarray | None],
                elem_type: Callable[[np.dtype], int] = helper.np_dtype_to_tensor_dtype) -> tuple[list[str], list[Any]]:
    """Input names ``x0, x1, ...`` (``""`` where the array is None) and their value infos."""
    names, infos = [], []
    for i, x in enumerate(inputs):
        if x is None:
            names.append("")
            continue
        names.append(f"x{i}")
        infos.append(helper.make_tensor_value_info(f"x{i}", elem_type(x.dtype), x.shape))
    return names, infos
