"""Which precision OpenVINO's CPU plugin really runs each layer in.

A QDQ model only pays off when OpenVINO folds the Q/DQ pairs into integer kernels; when it
cannot, it dequantizes and runs the float kernel, silently. The compiled model's execution
graph (``get_runtime_model()``) says per layer which kernel type (``layerType``) ran in which
precision (``runtimePrecision``), so tests and the quantization bench can check it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

#: layer types that carry the model's arithmetic (what int8 is meant to speed up)
COMPUTE_LAYERS = frozenset({"Convolution", "Deconvolution", "FullyConnected", "MatMul", "GroupConvolution"})
#: runtime precisions that mean an integer kernel
INT8_PRECISIONS = frozenset({"i8", "u8"})


def layer_precisions(compiled_model: Any) -> Counter[tuple[str, str]]:
    """(layerType, runtimePrecision) -> number of layers in ``compiled_model``'s execution graph."""
    counts: Counter[tuple[str, str]] = Counter()
    for op in compiled_model.get_runtime_model().get_ops():
        info = op.get_rt_info()
        layer = info["layerType"].astype(str) if "layerType" in info else op.get_type_name()
        precision = info["runtimePrecision"].astype(str) if "runtimePrecision" in info else "?"
        counts[(layer, precision)] += 1
    return counts


def int8_compute_layers(counts: Counter[tuple[str, str]]) -> tuple[int, int]:
    """(compute layers running in i8/u8, all compute layers) of :func:`layer_precisions` counts."""
    total = sum(n for (layer, _), n in counts.items() if layer in COMPUTE_LAYERS)
    int8 = sum(n for (layer, p), n in counts.items() if layer in COMPUTE_LAYERS and p in INT8_PRECISIONS)
    return int8, total
