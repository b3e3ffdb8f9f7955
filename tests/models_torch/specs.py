"""What the exporters are given: a seeded torch module, the example inputs it is exported
with, the ONNX input/output names, which axes are dynamic, and the (differently shaped)
inputs the exported model is then run with.

Models are exported at batch 2 (sequence 7 for text) and run at batch 3 (sequence 11), then
at batch 1: an export that froze a dynamic axis shows as a shape error or a wrong result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch

EXPORT_BATCH, RUN_BATCH = 2, 3
EXPORT_SEQ, RUN_SEQ = 7, 11
FEED_SEED = 1


@dataclass(frozen=True)
class Spec:
    """A model as the exporters take it. ``inputs`` are the names of ``forward``'s parameters
    (the dynamo exporter's dynamic shapes are keyed by them), ``dynamic`` maps an input to its
    dynamic axes and their names (the TorchScript exporter's ``dynamic_axes``)."""

    make: Callable[[], torch.nn.Module]
    example: Callable[[], tuple[torch.Tensor, ...]]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    dynamic: Mapping[str, Mapping[int, str]]
    feeds: Callable[[], dict[str, np.ndarray]]


def rng() -> np.random.Generator:
    return np.random.default_rng(FEED_SEED)


def image_spec(make: Callable[[], torch.nn.Module], shape: tuple[int, ...], outputs: tuple[str, ...],
               name: str = "x") -> Spec:
    """An image-like model with one float input of per-sample ``shape``; batch is dynamic."""

    def example() -> tuple[torch.Tensor, ...]:
        return (torch.from_numpy(rng().standard_normal((EXPORT_BATCH, *shape)).astype(np.float32)),)

    def feeds() -> dict[str, np.ndarray]:
        return {name: rng().standard_normal((RUN_BATCH, *shape)).astype(np.float32)}

    return Spec(make, example, (name,), outputs, {name: {0: "batch"}}, feeds)


def cnn_spec(family: str) -> Spec:
    """One of ``cnn_models.FAMILIES``: input ``x`` (batch, 3, 32, 32), output ``y``."""
    import cnn_models

    return image_spec(lambda: cnn_models.build(family), cnn_models.IMAGE, ("y",))
