"""Offline batch inference with Ray Data: a predictor class for ``Dataset.map_batches`` (one epoxy
session per actor, reused across batches) and ``predict_batches``, which sizes the actor pool so
Ray Data's read tasks keep a CPU (actors holding every CPU starve the reads: a hang)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import ray
import ray.data

from .errors import BadRequest
from .model import ServedModel

logger = logging.getLogger(__name__)


class EpoxyPredictor:
    """``map_batches`` callable class: numpy batches whose columns are named as the model's
    inputs in, the model's outputs out (other columns, such as ids, pass through)."""

    def __init__(self, model: str | bytes, providers: Sequence[str] | None = None, threads: int = 0) -> None:
        source = str(model) if isinstance(model, Path) else model
        self.model = ServedModel("predictor", source, providers=tuple(providers) if providers else None,
                                 threads=threads)
        self._inputs = [spec.name for spec in self.model.inputs]

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [name for name in self._inputs if name not in batch]
        if missing:
            raise BadRequest(f"the dataset has no column {missing[0]!r} (model inputs: {', '.join(self._inputs)}; "
                             f"columns: {', '.join(batch)})")
        feeds = {name: np.ascontiguousarray(batch[name]) for name in self._inputs}
        if self.model.batchable:
            outputs = self.model.infer(feeds)
        else:  # a fixed batch axis: row by row, stacked back
            count = len(feeds[self._inputs[0]])
            rows = [self.model.infer({n: v[i:i + 1] for n, v in feeds.items()}) for i in range(count)]
            outputs = {name: np.concatenate([row[name] for row in rows]) for name in rows[0]} if rows else {}
        kept = {name: value for name, value in batch.items() if name not in feeds}
        return {**kept, **outputs}


def _actor_cpus(concurrency: int, wanted: float) -> float:
    """CPUs per actor so that the pool leaves a CPU (or half of what is free, on a small
    cluster) for Ray Data's read tasks; other work in the cluster (Serve replicas) counts."""
    free = float(ray.available_resources().get("CPU", 0.0)) if ray.is_initialized() else 0.0
    if free <= 0 or concurrency * wanted <= free - 1:
        return wanted
    fitted = max(free - 1, free / 2) / concurrency
    logger.warning("predict_batches: %d actors x %g CPU would hold all %g free CPUs; %.3g CPU each so reads can run",
                   concurrency, wanted, free, fitted)
    return fitted


def predict_batches(dataset: Any, model: str | Path | bytes, *, concurrency: int = 1, batch_size: int = 64,
                    providers: Sequence[str] | None = None, num_cpus: float = 1.0, num_gpus: float = 0.0) -> Any:
    """``dataset`` (a ray.data.Dataset with one column per model input) mapped through the model
    by a pool of ``concurrency`` reused actors (``ActorPoolStrategy``); lazy, like every Dataset
    transform: ``take_all``, ``to_pandas`` or ``write_*`` runs it."""
    source = str(model) if isinstance(model, Path) else model
    if num_gpus == 0 and providers and "cuda" in providers:
        num_gpus = 1
    cpus = _actor_cpus(concurrency, num_cpus)
    # each actor's session uses the CPUs Ray reserved for it, so actors on one node do not
    # oversubscribe its cores (docs/THREADING.md: fixed-share pools lose 10x when they do)
    kwargs = {"model": source, "providers": providers, "threads": max(1, int(cpus))}
    return dataset.map_batches(EpoxyPredictor, fn_constructor_kwargs=kwargs,
                               batch_size=batch_size, batch_format="numpy",
                               compute=ray.data.ActorPoolStrategy(size=concurrency),
                               num_cpus=cpus, num_gpus=num_gpus or None)
