"""``epoxy serve --engine ray``: start (or join) a Ray cluster, start Ray Serve's HTTP proxy on the
asked host and port, deploy the models (ray_app.deployment) and block until Ctrl-C."""

from __future__ import annotations

import time

import ray
from ray import serve

from .config import ServeConfig
from .ray_app import deployment
from .repository import discover

APP_NAME = "epoxy"


def build(config: ServeConfig) -> serve.Application:
    """The application ``config`` asks for (``extra``: replica_cpus, request_timeout_s)."""
    return deployment(config.model, name=config.name, providers=config.providers, replicas=config.replicas,
                      autoscale=config.autoscale, max_batch_size=config.max_batch_size,
                      batch_wait_ms=config.batch_wait_ms, max_body_bytes=config.max_body_bytes,
                      replica_cpus=float(config.extra.get("replica_cpus", 1.0)),
                      request_timeout_s=float(config.extra.get("request_timeout_s", 60.0)))


def serve_forever(config: ServeConfig) -> int:
    """Serve until interrupted; 0 after a clean shutdown. A joined cluster keeps running (only
    this application is deleted); a cluster started here is shut down."""
    models = discover(config.model, config.name)
    app = build(config)
    joined = config.address is not None
    ray.init(address=config.address) if joined else ray.init()
    try:
        serve.start(http_options={"host": config.host, "port": config.port})
        serve.run(app, name=APP_NAME, route_prefix="/")
        url = f"http://{config.host}:{config.port}"
        print(f"epoxy serve (ray): {url}  (Open Inference Protocol v2; metrics: {url}/metrics)", flush=True)
        for source in models:
            print(f"  {source.name} version {source.version}: {url}/v2/models/{source.name}"
                  f"/versions/{source.version}  ({source.path})", flush=True)
        print("Ctrl-C to stop", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("stopping", flush=True)
    finally:
        if joined:
            serve.delete(APP_NAME)
        else:
            serve.shutdown()
            ray.shutdown()
    return 0
