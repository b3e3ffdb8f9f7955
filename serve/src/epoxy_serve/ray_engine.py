"""``epoxy serve --engine ray``: start (or join) a Ray cluster, start Ray Serve's HTTP ingress on
the asked host and port (HAProxy or Ray's proxy: ray_ingress.py), deploy the models
(ray_app.deployment) and block until Ctrl-C."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import ray
from ray import serve

from . import ray_ingress
from .config import ServeConfig
from .ports import refuse_taken
from .ray_app import deployment
from .repository import discover

APP_NAME = "epoxy"


def build(config: ServeConfig) -> serve.Application:
    """The application ``config`` asks for (``extra``: replica_cpus, request_timeout_s,
    max_concurrent_batches)."""
    return deployment(config.model, name=config.name, providers=config.providers, replicas=config.replicas,
                      autoscale=config.autoscale, max_batch_size=config.max_batch_size,
                      batch_wait_ms=config.batch_wait_ms, max_body_bytes=config.max_body_bytes,
                      replica_cpus=float(config.extra.get("replica_cpus", 1.0)),
                      request_timeout_s=float(config.extra.get("request_timeout_s", 60.0)),
                      max_concurrent_batches=int(config.extra.get("max_concurrent_batches", 0)),
                      warmup=config.warmup)


def _providers(text: Any) -> tuple[str, ...]:
    items = text.split(",") if isinstance(text, str) else list(text)
    return tuple(p.strip() for p in items if p.strip())


def _flag(text: Any) -> bool:
    if isinstance(text, bool):
        return text
    value = str(text).strip().lower()
    if value not in ("true", "false", "1", "0", "on", "off", "yes", "no"):
        raise ValueError(f"epoxy_serve app_builder: warmup wants true or false, got {text!r}")
    return value in ("true", "1", "on", "yes")


def _autoscale(text: Any) -> tuple[int, int]:
    low, high = (int(v) for v in (text.split(":") if isinstance(text, str) else text))
    return low, high


#: application-builder argument -> (ServeConfig field, converter from the string Ray's CLI passes)
BUILDER_ARGS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "model": ("model", str), "name": ("name", str), "providers": ("providers", _providers),
    "replicas": ("replicas", int), "autoscale": ("autoscale", _autoscale),
    "max_batch_size": ("max_batch_size", int), "batch_wait_ms": ("batch_wait_ms", float),
    "max_body_mb": ("max_body_bytes", lambda mb: int(float(mb) * (1 << 20))),
    "warmup": ("warmup", _flag),
}
EXTRA_ARGS = ("replica_cpus", "request_timeout_s", "max_concurrent_batches")


def app_builder(args: Mapping[str, Any]) -> serve.Application:
    """Ray Serve's application builder, for Ray's own tools: ``serve run
    epoxy_serve.ray_engine:app_builder model=/models max_batch_size=16`` or a KubeRay
    RayService's ``import_path`` with ``args``. Arguments as ``epoxy serve``'s options."""
    unknown = sorted(set(args) - set(BUILDER_ARGS) - set(EXTRA_ARGS))
    if unknown or "model" not in args:
        raise ValueError(f"epoxy_serve app_builder: needs model=..., takes {', '.join([*BUILDER_ARGS, *EXTRA_ARGS])}"
                         + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
    fields = {BUILDER_ARGS[k][0]: BUILDER_ARGS[k][1](v) for k, v in args.items() if k in BUILDER_ARGS}
    extra = {k: str(args[k]) for k in EXTRA_ARGS if k in args}
    return build(ServeConfig(**fields, extra=extra))


def _stop_on_sigterm() -> None:
    """SIGTERM (``docker stop``, systemd, ``kill``) stops the server as Ctrl-C does. Why: a
    process ended by it skipped the shutdown below, and the HAProxy that Ray had started for
    its cluster lived on as an orphan holding the HTTP port (seen here; Ray's own processes
    went with the driver)."""
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers belong to the main thread; an embedding caller handles its own

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def _shield_shutdown() -> None:
    """A second Ctrl-C or SIGTERM while the cluster shuts down (a supervisor repeating its
    signal) would stop the shutdown half way and orphan what it had not stopped yet."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def serve_forever(config: ServeConfig) -> int:
    """Serve until interrupted (Ctrl-C or SIGTERM); 0 after a clean shutdown. A joined cluster
    keeps running (only this application is deleted); a cluster started here is shut down."""
    models = discover(config.model, config.name)
    app = build(config)
    joined = config.address is not None
    if joined:
        ingress_line = "ingress: as the joined cluster was started (--ray-ingress applies to a cluster started here)"
        ray.init(address=config.address)
    else:  # this node's Prometheus endpoint (ray_epoxy_*, ray_serve_*) on the asked metrics port
        # a taken metrics port failed ray.init after its start-up timeout, leaving agents behind
        refuse_taken((("--port", config.host, config.port), ("--metrics-port", "", config.metrics_port)))
        ingress = ray_ingress.resolve(config.ray_ingress)
        ray_ingress.apply(ingress)  # read by the processes ray.init starts
        ingress_line = ray_ingress.describe(ingress)
        ray.init(_metrics_export_port=config.metrics_port)
    _stop_on_sigterm()  # after ray.init: Ray's core installs its own SIGTERM handler there (it aborts)
    try:
        serve.start(http_options={"host": config.host, "port": config.port})
        serve.run(app, name=APP_NAME, route_prefix="/")
        url = f"http://{config.host}:{config.port}"
        print(f"epoxy serve (ray): {url}  (Open Inference Protocol v2; metrics: {url}/metrics)", flush=True)
        print(f"  {ingress_line}", flush=True)
        for source in models:
            print(f"  {source.name} version {source.version}: {url}/v2/models/{source.name}"
                  f"/versions/{source.version}  ({source.path})", flush=True)
        print("Ctrl-C to stop", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("stopping", flush=True)
    finally:
        _shield_shutdown()
        if joined:
            serve.delete(APP_NAME)
        else:
            serve.shutdown()
            ray.shutdown()
    return 0
