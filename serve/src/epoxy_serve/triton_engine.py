"""The Triton engine: every model of the repository bound to PyTriton's tritonserver (HTTP and gRPC,
the Open Inference Protocol, Triton's dynamic batcher and instance count), one epoxy session per
instance. PyTriton's Python backend hands an instance the list of requests the batcher gathered
without merging them, so each instance merges and splits them itself (``ServedModel.infer_batch``)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

import numpy as np

from .config import ServeConfig, threads_per_replica
from .errors import ServeError
from .model import ServedModel, TensorSpec
from .ports import refuse_taken
from .repository import ModelSource, discover
from .triton_env import prepare_environment

prepare_environment()  # before PyTriton is imported: it reads PYTRITON_NO_TENSORSTORE as a model is bound

from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor  # noqa: E402
from pytriton.triton import Triton, TritonConfig  # noqa: E402


class Servable(Protocol):
    """What an instance needs of a model: ServedModel, or a stand-in with the same surface (the
    benchmark serves onnxruntime through one)."""

    name: str
    version: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    batch_refusal: str | None

    def infer_batch(self, requests: Sequence[Mapping[str, np.ndarray]]) -> list[Any]: ...


#: builds one instance's model (its own session) from a repository entry
ModelFactory = Callable[[ModelSource, ServeConfig], Servable]


def epoxy_model(source: ModelSource, config: ServeConfig) -> Servable:
    """The default factory: an epoxy session with the configured providers. The instances run in
    this one process, so they split the cores between them (``threads_per_replica``)."""
    return ServedModel(source.name, str(source.path), version=source.version, providers=config.providers,
                       threads=threads_per_replica(config.replicas), warmup_batches=config.warmup_batches)


@dataclass(frozen=True)
class Binding:
    """How one model was bound: its instances' models, Triton's batch limit, and why not batched."""

    name: str
    version: str
    instances: tuple[Servable, ...]
    max_batch_size: int
    note: str | None  # why dynamic batching is off for this model, when it was asked for


def _tensor(spec: TensorSpec, batched: bool) -> Tensor:
    """PyTriton's spec; with batching Triton owns the first axis, so the shape leaves it out."""
    dtype = np.dtype(np.bytes_) if spec.datatype == "BYTES" else spec.dtype
    return Tensor(name=spec.name, dtype=dtype, shape=spec.shape[1:] if batched else spec.shape)


class Instance:
    """One Triton model instance: checks each request, merges what can be merged into one run, and
    answers in request order. A request that fails its check fails the call it arrived in (PyTriton
    has one reply per call), with the check's message naming the input; the server keeps serving."""

    def __init__(self, model: Servable) -> None:
        self.model = model

    def __call__(self, requests: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        replies = self.model.infer_batch([dict(request.items()) for request in requests])
        for reply in replies:
            if isinstance(reply, BaseException):
                raise reply  # an ordinary exception: an error reply, not PyTritonUnrecoverableError's shutdown
        return replies


def _batch_note(model: Servable, config: ServeConfig) -> str | None:
    if not config.batching:
        return None
    if model.batch_refusal is not None:
        return f"model {model.name!r}: dynamic batching off, {model.batch_refusal}"
    return None


def latest_versions(sources: Sequence[ModelSource]) -> tuple[list[ModelSource], list[str]]:
    """Each model's newest version, as Triton's default version policy (latest 1) serves it: PyTriton
    keeps one config per model name. The notes name the versions left out."""
    newest: dict[str, ModelSource] = {}
    for source in sources:
        held = newest.get(source.name)
        if held is None or _version_key(source.version) > _version_key(held.version):
            newest[source.name] = source
    notes = [f"model {s.name!r} version {s.version} not served: Triton serves the newest, version "
             f"{newest[s.name].version}" for s in sources if newest[s.name] is not s]
    return list(newest.values()), notes


def _version_key(version: str) -> tuple[int, str]:
    return (int(version), "") if version.isdigit() else (-1, version)


def bind(triton: Triton, config: ServeConfig, sources: Sequence[ModelSource] | None = None,
         factory: ModelFactory = epoxy_model) -> tuple[list[Binding], list[str]]:
    """Bind the newest version of every model of ``config.model`` (or ``sources``) with
    ``config.replicas`` instances each; returns the bindings and notes on what was left out."""
    bindings = []
    chosen, notes = latest_versions(sources if sources is not None else discover(config.model, config.name))
    for source in chosen:
        instances = tuple(factory(source, config) for _ in range(max(1, config.replicas)))
        first = instances[0]
        note = _batch_note(first, config)
        batched = config.batching and note is None
        model_config = ModelConfig(
            batching=batched, max_batch_size=config.max_batch_size if batched else 0,
            batcher=DynamicBatcher(max_queue_delay_microseconds=int(config.batch_wait_ms * 1000)))
        if not source.version.isdigit():
            raise ServeError(f"model {source.name!r}: Triton versions are integers, got {source.version!r}")
        triton.bind(model_name=source.name, model_version=int(source.version),
                    infer_func=[Instance(m) for m in instances],
                    inputs=[_tensor(s, batched) for s in first.inputs],
                    outputs=[_tensor(s, batched) for s in first.outputs], config=model_config, strict=False)
        bindings.append(Binding(source.name, source.version, instances,
                                model_config.max_batch_size, note))
    return bindings, notes


def triton_config(config: ServeConfig) -> TritonConfig:
    """The server's ports and addresses from the engine-neutral config."""
    return TritonConfig(http_address=config.host, http_port=config.port, grpc_address=config.host,
                        grpc_port=config.grpc_port, metrics_port=config.metrics_port, exit_timeout_secs=5)


def unsupported(config: ServeConfig) -> list[str]:
    """The requested settings this engine cannot honour, worded for the user."""
    notes = []
    if config.autoscale is not None:
        notes.append("--autoscale is a Ray Serve feature; Triton runs a fixed --replicas instance count")
    if config.address is not None:
        notes.append("--address joins a Ray cluster; the Triton engine serves from this process")
    if config.ray_ingress != "auto":
        notes.append("--ray-ingress chooses the Ray engine's ingress; Triton answers HTTP itself")
    return notes


#: how often a server whose models failed to load in PyTriton's instance handshake is started again
START_ATTEMPTS = 3


def launch(config: ServeConfig, sources: Sequence[ModelSource] | None = None, factory: ModelFactory = epoxy_model,
           attempts: int = START_ATTEMPTS) -> tuple[Triton, list[Binding], list[str]]:
    """A started tritonserver with every model bound and loaded (the caller stops it). PyTriton 0.7's
    second and later instances of a model fetch their config from a unix socket the first instance
    opens, and can connect between its bind and its listen ("Connection refused", seen on a busy
    2-core machine): the model then fails to load, and loading it again in the same server hangs.
    So a failed load stops that server and starts a fresh one, ``attempts`` times at most."""
    refused = unsupported(config)
    if refused:
        raise ServeError("; ".join(refused))
    refuse_taken((("--port", config.host, config.port), ("--grpc-port", config.host, config.grpc_port),
                  ("--metrics-port", "", config.metrics_port)))
    chosen = list(sources) if sources is not None else discover(config.model, config.name)
    for attempt in range(1, attempts + 1):
        triton = Triton(config=triton_config(config))
        try:
            bindings, notes = bind(triton, config, chosen, factory)
            triton.run()
            return triton, bindings, notes
        except Exception as exc:  # PyTriton passes tritonclient's error for a failed load through
            triton.stop()
            if attempt == attempts or "load failed" not in str(exc):
                raise
            print(f"epoxy serve: a model failed to load (attempt {attempt} of {attempts}), starting again: "
                  f"{str(exc).splitlines()[0][:200]}", file=sys.stderr)
    raise AssertionError("unreachable")


@contextmanager
def running(config: ServeConfig, sources: Sequence[ModelSource] | None = None,
            factory: ModelFactory = epoxy_model) -> Iterator[tuple[Triton, list[Binding]]]:
    """A started server with every model bound and ready; stopped (workspace removed) on exit."""
    triton, bindings, _ = launch(config, sources, factory)
    try:
        yield triton, bindings
    finally:
        triton.stop()


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # Triton.serve() stops the server on KeyboardInterrupt only


def serve_forever(config: ServeConfig) -> int:
    """``epoxy serve --engine triton``: serve until SIGINT/SIGTERM, then stop cleanly."""
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        triton, bindings, notes = launch(config)
    except KeyboardInterrupt:
        return 0
    try:
        for note in notes:
            print(f"epoxy serve: {note}", file=sys.stderr)
        for binding in bindings:
            batching = f"dynamic batching up to {binding.max_batch_size}" if binding.max_batch_size else "no batching"
            print(f"epoxy serve: {binding.name} v{binding.version}: {len(binding.instances)} instance(s), {batching}",
                  file=sys.stderr)
            if binding.note:
                print(f"epoxy serve: {binding.note}", file=sys.stderr)
        print(f"epoxy serve: Triton on http://{config.host}:{config.port} (gRPC {config.host}:{config.grpc_port}, "
              f"metrics :{config.metrics_port}/metrics)", file=sys.stderr, flush=True)
        triton.serve()
    except KeyboardInterrupt:
        pass
    finally:
        triton.stop()
        signal.signal(signal.SIGTERM, previous)
    return 0
