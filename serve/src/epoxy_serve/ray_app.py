"""The Ray Serve application: one deployment per model version (each replica holds its own epoxy
session, batching with ``@serve.batch``) behind one HTTP ingress that speaks the Open Inference
Protocol v2. Bodies are decoded and encoded in the model replicas, so the ingress only routes; an
application of one model version has no ingress: its replicas answer HTTP themselves."""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request
from starlette.responses import Response

from . import protocol
from .config import warmup_batches
from .errors import BadRequest, ModelNotFound, ModelNotReady, PayloadTooLarge, ServeError
from .model import ServedModel
from .ray_metrics import ModelMetrics, scrape
from .repository import ModelSource, discover
from .version import __version__

logger = logging.getLogger("ray.serve")

SERVER_NAME = "epoxy-serve"
EXTENSIONS = ["binary_tensor_data", "model_configuration", "metrics"]
#: provider name -> what a replica running it asks Ray for, beyond CPUs
PROVIDER_RESOURCES: dict[str, dict[str, float]] = {"cuda": {"num_gpus": 1}}
#: errors of a replica that died or cannot be reached: the request gets a 503, never a hang
REPLICA_GONE: tuple[type[BaseException], ...] = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)
#: the fewest requests a replica accepts at once by default. With fewer than the clients send,
#: Ray's proxy holds the rest and keeps retrying them against full replicas, which costs more
#: CPU than the requests: 32 clients on two 1-CPU replicas of a small CNN, unbatched, went from
#: 147 to 250 requests/s when each replica took 32 instead of 8 (bench/README.md, session 26)
MIN_ONGOING_REQUESTS = 32


def default_max_ongoing(max_batch_size: int, concurrent_batches: int) -> int:
    """Requests one replica accepts at once: at least :data:`MIN_ONGOING_REQUESTS`, and room for
    the batches running and one filling (Ray warns below ``max_batch_size`` x concurrent)."""
    return max(MIN_ONGOING_REQUESTS, max_batch_size * (concurrent_batches + 1))


@dataclass(frozen=True)
class ModelPlan:
    """What one model deployment serves and how: picklable, shipped to each replica."""

    name: str
    version: str
    source: str | bytes
    providers: tuple[str, ...] | None = None
    max_batch_size: int = 0
    batch_wait_ms: float = 5.0
    max_body_bytes: int = 64 << 20
    threads: int = 0  # the session's intra_op_num_threads: the CPUs Ray reserved for the replica
    #: batches of one replica that may run at once (``serve.batch``'s ``max_concurrent_batches``);
    #: 0: one per session thread (each batch is one session run, in its own worker thread)
    max_concurrent_batches: int = 0
    #: run each batch size a replica can see once at load (``config.warmup_batches``)
    warmup: bool = True

    @property
    def concurrent_batches(self) -> int:
        return self.max_concurrent_batches if self.max_concurrent_batches > 0 else max(1, self.threads)


class ModelServer:
    """A replica of one model version: decode, check, run (batched when asked and possible), encode."""

    def __init__(self, plan: ModelPlan) -> None:
        self.plan = plan
        self.model = ServedModel(plan.name, plan.source, version=plan.version, providers=plan.providers,
                                 threads=plan.threads,
                                 warmup_batches=warmup_batches(plan.warmup, plan.max_batch_size))
        self.metrics = ModelMetrics(plan.name, plan.version)
        self.batching = plan.max_batch_size > 1 and self.model.batchable
        self.batching_note = self._batching_note()
        if plan.max_batch_size > 1 and not self.model.batchable:
            logger.warning("model %r version %s: dynamic batching off: %s; requests run one by one",
                           plan.name, plan.version, self.model.batch_refusal)
        self.router = Router({plan.name: {plan.version: LocalModel(self)}}, plan.max_body_bytes)
        # the batch queue is built here, per replica, with this plan's settings: a class-level
        # @serve.batch cannot change max_concurrent_batches after the fact
        self._batched = serve.batch(max_batch_size=max(plan.max_batch_size, 1),
                                    batch_wait_timeout_s=plan.batch_wait_ms / 1000.0,
                                    max_concurrent_batches=plan.concurrent_batches)(self._run_batch)

    def _batching_note(self) -> str:
        if self.plan.max_batch_size <= 1:
            return "off"
        if self.batching:
            return f"on: up to {self.plan.max_batch_size} requests, {self.plan.batch_wait_ms:g} ms wait"
        return f"off: {self.model.batch_refusal}"

    def metadata(self) -> dict[str, Any]:
        doc = self.model.metadata()
        doc["parameters"] = {"dynamic_batching": self.batching_note, "providers": list(self._providers()),
                             "warmup": getattr(self.model, "warmup_note", "off")}
        return doc

    def _providers(self) -> list[str]:
        session = self.model.session
        getter = getattr(session, "get_providers", None)
        return list(getter()) if callable(getter) else list(self.plan.providers or ())

    def config(self) -> dict[str, Any]:
        """Triton's model configuration reply (what tritonclient's get_model_config reads)."""
        doc: dict[str, Any] = {
            "name": self.model.name, "platform": "epoxy_onnx", "backend": "epoxy",
            "max_batch_size": self.plan.max_batch_size if self.batching else 0,
            "input": [{"name": s.name, "data_type": f"TYPE_{s.datatype}", "dims": list(s.shape)}
                      for s in self.model.inputs],
            "output": [{"name": s.name, "data_type": f"TYPE_{s.datatype}", "dims": list(s.shape)}
                       for s in self.model.outputs],
            "parameters": {"dynamic_batching": {"string_value": self.batching_note}},
        }
        if self.batching:
            doc["dynamic_batching"] = {"max_queue_delay_microseconds": int(self.plan.batch_wait_ms * 1000)}
        return doc

    def ready(self) -> bool:
        return self.model.session is not None

    async def infer(self, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
        """One protocol request in, (status, body, headers) out; user errors are 4xx replies."""
        start = time.perf_counter()
        try:
            request = protocol.decode_request(body, headers, max_bytes=self.plan.max_body_bytes)
            request.selected([s.name for s in self.model.outputs])
            feeds = self.model.check(request.inputs)
            if self.batching:
                outputs = await self._batched(feeds)
            else:
                self.metrics.batch(1)
                outputs = await asyncio.to_thread(self.model.infer, feeds)
            if isinstance(outputs, BaseException):
                raise outputs
            reply, reply_headers = protocol.encode_response(self.model.name, self.model.version, outputs, request)
            status = 200
        except Exception as exc:  # every failure becomes a reply; 5xx ones are logged
            status, reply = protocol.encode_error(exc)
            reply_headers = {"content-type": protocol.codec.JSON_TYPE}
            if status >= 500:
                logger.exception("model %r: request failed", self.model.name)
        self.metrics.answered(status, (time.perf_counter() - start) * 1000.0)
        return status, reply, reply_headers

    async def __call__(self, request: Request) -> Response:
        """HTTP straight to this replica when the application serves this one model version."""
        return await self.router.respond(request)

    async def _run_batch(self, requests: list[dict[str, np.ndarray]]) -> list[Any]:
        """The requests queued within the wait (``self._batched``, ``serve.batch``) merged into one
        session run (off the event loop, so the next batch fills meanwhile); one reply (outputs or
        BadRequest) per request."""
        self.metrics.batch(len(requests))
        return await asyncio.to_thread(self.model.infer_batch, requests)


class RemoteModel:
    """A model version served by another deployment: calls through its handle, bounded in time;
    a replica that died or did not answer is a 503, never a hang."""

    def __init__(self, handle: DeploymentHandle, name: str, timeout_s: float) -> None:
        self.handle, self.name, self.timeout_s = handle, name, timeout_s

    async def call(self, method: str, *args: Any) -> Any:
        try:
            return await asyncio.wait_for(getattr(self.handle, method).remote(*args), self.timeout_s)
        except REPLICA_GONE as exc:
            raise ModelNotReady(f"model {self.name!r}: its replica is gone ({type(exc).__name__}); retry") from exc
        except asyncio.TimeoutError:
            raise ModelNotReady(f"model {self.name!r}: no reply within {self.timeout_s:g} s") from None


class LocalModel:
    """The model version of this very replica (a single-model application: no second hop)."""

    def __init__(self, server: ModelServer) -> None:
        self.server = server

    async def call(self, method: str, *args: Any) -> Any:
        result = getattr(self.server, method)(*args)
        return await result if inspect.isawaitable(result) else result


Backend = RemoteModel | LocalModel


class Router:
    """The protocol's routes over a table of model versions (name -> version -> backend)."""

    def __init__(self, models: Mapping[str, Mapping[str, Backend]], max_body_bytes: int) -> None:
        self.models = {name: dict(versions) for name, versions in models.items()}
        self.max_body_bytes = max_body_bytes

    def _backend(self, name: str | None, version: str | None) -> Backend:
        versions = self.models.get(name or "")
        if versions is None:
            raise ModelNotFound(f"no model named {name!r}; models: {', '.join(sorted(self.models))}")
        if version is None:
            version = max(versions, key=lambda v: (len(v), v))  # latest, as Triton's default policy
        if version not in versions:
            raise ModelNotFound(f"model {name!r} has no version {version!r}; versions: {', '.join(sorted(versions))}")
        return versions[version]

    async def respond(self, request: Request) -> Response:
        """Any request -> a reply; errors in the protocol's ``{"error": ...}`` shape."""
        try:
            return await self._dispatch(request)
        except ServeError as exc:
            status, body = protocol.encode_error(exc)
        except Exception as exc:  # a bug here still answers, in the protocol's shape
            logger.exception("request failed")
            status, body = protocol.encode_error(exc)
        return Response(body, status_code=status, media_type=protocol.codec.JSON_TYPE)

    async def _dispatch(self, request: Request) -> Response:
        route = protocol.match(request.method, request.url.path)
        kind = route.kind
        if kind == "live":
            return Response(b"", status_code=200)
        if kind == "server_metadata":
            return _json({"name": SERVER_NAME, "version": __version__, "extensions": EXTENSIONS})
        if kind == "ready":
            return Response(b"", status_code=200 if await self._all_ready() else 503)
        if kind == "metrics":
            text = await asyncio.to_thread(scrape)
            return Response(text.encode(), media_type="text/plain; version=0.0.4")
        if kind == "repository_index":
            return Response(protocol.encode_json(self._index()), media_type=protocol.codec.JSON_TYPE)
        backend = self._backend(route.model, route.version)
        if kind == "model_ready":
            return Response(b"", status_code=200 if await self._ready(backend) else 503)
        if kind in ("model_metadata", "model_config"):
            return _json(await backend.call("metadata" if kind == "model_metadata" else "config"))
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            raise PayloadTooLarge(f"request body of {length} bytes is over the server's limit of {self.max_body_bytes}")
        body = await request.body()
        if len(body) > self.max_body_bytes:
            raise PayloadTooLarge(f"request body of {len(body)} bytes is over the server's limit of "
                                  f"{self.max_body_bytes}")
        status, reply, headers = await backend.call("infer", body, dict(request.headers))
        return Response(reply, status_code=status, headers=headers)

    def _index(self) -> list[dict[str, str]]:
        return [{"name": name, "version": version, "state": "READY"}
                for name, versions in sorted(self.models.items()) for version in sorted(versions)]

    @staticmethod
    async def _ready(backend: Backend) -> bool:
        try:
            return bool(await backend.call("ready"))
        except ServeError:
            return False

    async def _all_ready(self) -> bool:
        checks = [self._ready(b) for versions in self.models.values() for b in versions.values()]
        return all(await asyncio.gather(*checks))


class Ingress:
    """The HTTP front of a multi-model application: routes to each model's deployment."""

    def __init__(self, models: Mapping[str, Mapping[str, DeploymentHandle]], max_body_bytes: int,
                 request_timeout_s: float) -> None:
        self.router = Router({name: {version: RemoteModel(handle, name, request_timeout_s)
                                     for version, handle in versions.items()}
                              for name, versions in models.items()}, max_body_bytes)

    async def __call__(self, request: Request) -> Response:
        return await self.router.respond(request)


def _json(doc: Mapping[str, Any]) -> Response:
    return Response(protocol.encode_json(doc), media_type=protocol.codec.JSON_TYPE)


def _deployment_name(name: str, version: str) -> str:
    return "epoxy-" + re.sub(r"[^A-Za-z0-9_.-]", "_", name) + f"-v{version}"


def _actor_options(providers: Sequence[str] | None, cpus: float) -> dict[str, Any]:
    options: dict[str, Any] = {"num_cpus": cpus}
    for provider in providers or ():
        options.update(PROVIDER_RESOURCES.get(provider, {}))
    return options


def _sources(model: str | Path | bytes | Sequence[ModelSource], name: str | None) -> list[tuple[str, str, str | bytes]]:
    if isinstance(model, bytes):
        return [(name or "model", "1", model)]
    if isinstance(model, (str, Path)):
        return [(s.name, s.version, str(s.path.resolve())) for s in discover(model, name)]
    return [(s.name, s.version, str(s.path.resolve())) for s in model]


def deployment(model: str | Path | bytes | Sequence[ModelSource], *, name: str | None = None,
               providers: Sequence[str] | None = None, replicas: int = 1, autoscale: tuple[int, int] | None = None,
               max_batch_size: int = 0, batch_wait_ms: float = 5.0, max_body_bytes: int = 64 << 20,
               replica_cpus: float = 1.0, ingress_cpus: float = 0.0, request_timeout_s: float = 60.0,
               max_ongoing_requests: int | None = None, max_concurrent_batches: int = 0,
               warmup: bool = True) -> serve.Application:
    """A bound Ray Serve application serving ``model`` (an .onnx path, ONNX bytes, or a model
    repository folder) over the Open Inference Protocol: give it to ``serve.run``.

    Each model version is its own deployment (``replicas`` replicas, or Ray's autoscaler between
    ``autoscale = (min, max)``), each replica holding one epoxy session with ``providers``; a
    replica whose providers include cuda asks Ray for a GPU. ``max_batch_size`` > 1 turns on
    ``@serve.batch`` for the models whose batch axis is dynamic (the others log why not and say
    it in their metadata); ``max_concurrent_batches`` batches of one replica may run at once (0:
    one per session thread, i.e. ``int(replica_cpus)``). With ``warmup`` each replica runs every
    batch size it can see once on zeros as it loads (``ServedModel.warm_up``). One model version is its own HTTP
    ingress; several get a routing ingress in front. Model paths must be readable on every node
    that runs a replica."""
    found = _sources(model, name)
    if not found:
        raise BadRequest("no models to serve")
    provider_tuple = tuple(providers) if providers else None
    threads = max(1, int(replica_cpus))
    concurrent = max_concurrent_batches if max_concurrent_batches > 0 else threads
    ongoing = max_ongoing_requests or default_max_ongoing(max_batch_size, concurrent)
    handles: dict[str, dict[str, Any]] = {}
    for model_name, version, source in found:
        # replicas on one node must not oversubscribe its cores: each session gets the CPUs Ray
        # reserved for its replica (docs/THREADING.md)
        plan = ModelPlan(model_name, version, source, provider_tuple, max_batch_size, batch_wait_ms, max_body_bytes,
                         threads=threads, max_concurrent_batches=concurrent, warmup=warmup)
        options: dict[str, Any] = {"name": _deployment_name(model_name, version),
                                   "ray_actor_options": _actor_options(provider_tuple, replica_cpus),
                                   "max_ongoing_requests": ongoing}
        if autoscale is not None:
            low, high = autoscale
            options["autoscaling_config"] = {"min_replicas": low, "max_replicas": high,
                                             "initial_replicas": max(low, 1),
                                             "target_ongoing_requests": max(2, max_batch_size)}
        else:
            options["num_replicas"] = replicas
        bound = serve.deployment(**options)(ModelServer).bind(plan)
        handles.setdefault(model_name, {})[version] = bound
    if len(found) == 1:  # one model version: its replicas answer HTTP themselves (one hop less)
        return bound
    ingress = serve.deployment(name="epoxy-ingress", ray_actor_options={"num_cpus": ingress_cpus},
                               max_ongoing_requests=max(256, ongoing * 4))(Ingress)
    return ingress.bind(handles, max_body_bytes, request_timeout_s)
