"""epoxy-ep-openvino: fused subgraphs compiled and run by OpenVINO.

Importing this package does not import OpenVINO; that happens when devices are enumerated
or a provider is created.
"""

from __future__ import annotations

from typing import Any

from .version import __version__

__all__ = ["__version__", "layer_precisions", "openvino_provider", "stats"]


def openvino_provider(session: Any) -> Any:
    """The session's openvino provider object, or ``None`` when it has none."""
    for name, provider in getattr(session, "_providers", ()):
        if name == "openvino":
            return provider
    return None


def stats(session: Any) -> dict[str, Any]:
    """Per group compile time, whether it was loaded from the cache, and the time saved; per
    group with dynamic input dims, its static shape specializations (compiled, failed, evicted,
    runs on them and on the dynamic compilation)."""
    provider = openvino_provider(session)
    if provider is None:
        return {"groups": [], "specializations": [], "summary": "no openvino provider in this session"}
    from dataclasses import asdict

    return {"groups": [asdict(s) for s in provider.stats], "specializations": provider.specialization_stats(),
            "summary": provider.cache_summary()}


def layer_precisions(session: Any) -> dict[tuple[str, str], int]:
    """(OpenVINO layer type, runtime precision) -> layers, over the session's compiled groups:
    whether a quantized model really runs in int8 (``("Convolution", "u8")``) or was
    dequantized to float. Empty when the session has no openvino provider."""
    provider = openvino_provider(session)
    if provider is None:
        return {}
    from collections import Counter

    from .exec_precision import layer_precisions as of_model

    total: Counter[tuple[str, str]] = Counter()
    for model in provider.compiled_models():
        total.update(of_model(model))
    return dict(total)
