"""A served model: one epoxy session, its protocol metadata, the checks a request must pass, and
whether requests can be merged along the batch axis (and why not)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import epoxy

from .datatypes import to_numpy, to_protocol
from .errors import BadRequest

logger = logging.getLogger("epoxy_serve")


@dataclass(frozen=True)
class TensorSpec:
    """One input or output as the protocol's metadata shows it: -1 where a dim is not fixed."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    @property
    def dtype(self) -> np.dtype:
        return to_numpy(self.datatype)

    def metadata(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


def _spec(arg: Any) -> TensorSpec:
    dims = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in (arg.shape or []))
    return TensorSpec(arg.name, to_protocol(arg.dtype), dims)


def _batch_refusal(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> str | None:
    """Why requests cannot be concatenated along axis 0, or None when they can: every input and
    output must have a leading dim that is not fixed (the exporter's dynamic batch axis)."""
    for kind, specs in (("input", inputs), ("output", outputs)):
        for spec in specs:
            if not spec.shape:
                return f"{kind} {spec.name!r} is a scalar (no batch axis)"
            if spec.shape[0] != -1:
                return f"{kind} {spec.name!r} has a fixed first dim {spec.shape[0]} (no dynamic batch axis)"
    return None


@dataclass
class ServedModel:
    """A model behind a name and version; ``session`` is built where the model is served (in each
    replica or Triton instance), never pickled across processes."""

    name: str
    source: str | bytes
    version: str = "1"
    providers: tuple[str, ...] | None = None
    provider_options: Sequence[Mapping[str, Any]] | None = None
    #: the session's ``intra_op_num_threads`` (0: the runtime's default, every core). Replicas
    #: sharing a machine should split its cores: fixed-share thread pools lose 10x and more
    #: when processes oversubscribe the cores (docs/THREADING.md)
    threads: int = 0
    #: batch sizes run once on zeros when the session is built (1..N, as Triton's model warmup):
    #: each new input shape's first run prepares per-shape calls (and the first few-rows product
    #: packs its weights), 1.5-20x a steady run, which would otherwise land on a client's request.
    #: 0: none
    warmup_batches: int = 0
    inputs: tuple[TensorSpec, ...] = field(default=(), init=False)
    outputs: tuple[TensorSpec, ...] = field(default=(), init=False)
    batch_refusal: str | None = field(default=None, init=False)
    #: what the warm-up did ("batch sizes 1-16 in 0.21 s", or why it did not run)
    warmup_note: str = field(default="off", init=False)
    _session: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.source, Path):
            self.source = str(self.source)
        self.load()
        self.warm_up()

    def load(self) -> None:
        kwargs: dict[str, Any] = {}
        if self.providers is not None:
            kwargs["providers"] = list(self.providers)
        if self.provider_options is not None:
            kwargs["provider_options"] = [dict(o) for o in self.provider_options]
        if self.threads > 0:
            kwargs["sess_options"] = epoxy.SessionOptions(intra_op_num_threads=self.threads)
        self._session = epoxy.InferenceSession(self.source, **kwargs)
        self.inputs = tuple(_spec(a) for a in self._session.get_inputs())
        self.outputs = tuple(_spec(a) for a in self._session.get_outputs())
        self.batch_refusal = _batch_refusal(self.inputs, self.outputs)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_session"] = None  # sessions are rebuilt in the process that serves
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.load()
        self.warm_up()

    def warm_up(self) -> str:
        """Run the batch sizes ``1..warmup_batches`` (only the model's fixed batch, when it has
        one) once on zeros, so that no client's request pays a shape's first run. Skipped, with
        the reason in :attr:`warmup_note`, when a dim after the batch axis is not fixed or an
        input is not numeric; a run that fails stops the warm-up, never the model's load."""
        if self.warmup_batches <= 0:
            self.warmup_note = "off"
            return self.warmup_note
        reason = _warmup_refusal(self.inputs, self.batchable)
        if reason is not None:
            self.warmup_note = f"skipped: {reason}"
            return self.warmup_note
        sizes: list[int | None] = list(range(1, self.warmup_batches + 1)) if self.batchable else [None]
        start = time.perf_counter()
        for size in sizes:  # None: the model's own fixed shapes
            feeds = {s.name: np.zeros(s.shape if size is None else (size, *s.shape[1:]), s.dtype) for s in self.inputs}
            try:
                self._session.run(None, feeds)
            except Exception as exc:  # a model that cannot run on zeros still serves
                self.warmup_note = (f"stopped at batch {size or 'as fixed'}: {type(exc).__name__}: "
                                    f"{str(exc).splitlines()[0][:200] if str(exc) else ''}")
                logger.warning("model %r version %s: warm-up %s", self.name, self.version, self.warmup_note)
                return self.warmup_note
        done = "its fixed shapes" if sizes == [None] else f"batch sizes {sizes[0]}-{sizes[-1]}"
        self.warmup_note = f"{done} in {time.perf_counter() - start:.2f} s"
        return self.warmup_note

    @property
    def batchable(self) -> bool:
        return self.batch_refusal is None

    @property
    def session(self) -> Any:
        return self._session

    def metadata(self) -> dict[str, Any]:
        """The protocol's model metadata reply."""
        return {"name": self.name, "versions": [self.version], "platform": "epoxy_onnx",
                "inputs": [s.metadata() for s in self.inputs], "outputs": [s.metadata() for s in self.outputs]}

    def check(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``feeds`` checked against the inputs: every input present, no unknown name, the
        datatype and the fixed dims right; BadRequest naming the input otherwise."""
        known = {s.name: s for s in self.inputs}
        unknown = sorted(set(feeds) - set(known))
        if unknown:
            raise BadRequest(f"model {self.name!r} has no input named {unknown[0]!r}; inputs: {', '.join(known)}")
        checked: dict[str, np.ndarray] = {}
        for spec in self.inputs:
            if spec.name not in feeds:
                raise BadRequest(f"missing input {spec.name!r} of model {self.name!r} "
                                 f"({spec.datatype}, shape {list(spec.shape)})")
            value = np.asarray(feeds[spec.name])
            if to_protocol(value.dtype) != spec.datatype:
                raise BadRequest(f"input {spec.name!r}: datatype {to_protocol(value.dtype)}, "
                                 f"model {self.name!r} expects {spec.datatype}")
            if len(value.shape) != len(spec.shape) or any(
                    want not in (-1, got) for want, got in zip(spec.shape, value.shape)):
                raise BadRequest(f"input {spec.name!r}: shape {list(value.shape)}, model {self.name!r} "
                                 f"expects {list(spec.shape)} (-1: any size)")
            checked[spec.name] = value
        return checked

    def _run(self, checked: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One session run on checked feeds, outputs by name."""
        values = self._session.run(None, dict(checked))
        return {spec.name: np.asarray(v) for spec, v in zip(self.outputs, values)}

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One request: checked, run, outputs by name."""
        return self._run(self.check(feeds))

    def infer_batch(self, requests: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Several requests: merged along axis 0 into one run when the model allows it (split back
        by each request's batch size), else run one by one. Every request is checked first; the
        caller gets one reply per request (a dict of outputs, or the BadRequest for that one)."""
        replies: list[Any] = [None] * len(requests)
        good: list[tuple[int, dict[str, np.ndarray]]] = []
        for i, feeds in enumerate(requests):
            try:
                good.append((i, self.check(feeds)))
            except BadRequest as exc:
                replies[i] = exc
        if not good:
            return replies
        if not self.batchable or len(good) == 1 or not _mergeable([f for _, f in good]):
            for i, feeds in good:
                replies[i] = self._run(feeds)
            return replies
        sizes = [next(iter(f.values())).shape[0] for _, f in good]
        merged = {name: np.concatenate([f[name] for _, f in good]) for name in good[0][1]}
        values = self._session.run(None, merged)
        bounds = np.cumsum(sizes)[:-1]
        parts = [np.split(np.asarray(v), bounds) for v in values]
        for k, (i, _) in enumerate(good):
            replies[i] = {s.name: part[k] for s, part in zip(self.outputs, parts)}
        return replies


def _warmup_refusal(inputs: Sequence[TensorSpec], batchable: bool) -> str | None:
    """Why zeros of each warm-up shape cannot be made, or None: every dim after the batch axis
    (every dim, for a model that is not batched) must be fixed, since a sequence length is the
    client's to choose; every input numeric or bool."""
    for spec in inputs:
        if any(d < 0 for d in (spec.shape[1:] if batchable else spec.shape)):
            where = "after the batch axis " if batchable else ""
            return f"input {spec.name!r} has a dim that is not fixed {where}({list(spec.shape)})"
        if spec.datatype == "BYTES":
            return f"input {spec.name!r} is a string tensor"
    return None


def _mergeable(requests: Sequence[Mapping[str, np.ndarray]]) -> bool:
    """Requests merge only when, in each request, every input has the same batch size, and every
    input's dims after the batch axis agree across requests."""
    tails: dict[str, tuple[int, ...]] = {}
    for feeds in requests:
        if len({value.shape[0] for value in feeds.values()}) != 1:
            return False
        for name, value in feeds.items():
            if tails.setdefault(name, value.shape[1:]) != value.shape[1:]:
                return False
    return True
