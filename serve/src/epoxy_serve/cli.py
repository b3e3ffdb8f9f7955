"""``epoxy serve``: deploy a model (or a model repository) on Ray Serve or on Triton (PyTriton);
the command epoxy-serve adds to the epoxy CLI through the ``epoxy.commands`` entry point."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from importlib import import_module

from .config import ServeConfig
from .errors import ServeError

HELP = "serve a model or a model repository over the Open Inference Protocol (Ray Serve or Triton)"
EXAMPLE = """examples:
  epoxy serve model.onnx --name resnet --max-batch-size 16 --batch-wait-ms 5
  epoxy serve models/ --engine triton --replicas 2 --port 8000
  curl localhost:8000/v2/models/resnet          # metadata (Open Inference Protocol v2)
"""

#: engine name -> (module, what to install); each module has ``serve_forever(config) -> int``
ENGINES: dict[str, tuple[str, str]] = {
    "ray": ("epoxy_serve.ray_engine", "epoxy-serve[ray]"),
    "triton": ("epoxy_serve.triton_engine", "epoxy-serve[triton]"),
}


def _autoscale(text: str) -> tuple[int, int]:
    try:
        low, high = (int(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--autoscale wants MIN:MAX replicas, got {text!r}") from None
    if not 0 <= low <= high or high < 1:
        raise argparse.ArgumentTypeError(f"--autoscale wants 0 <= MIN <= MAX and MAX >= 1, got {text!r}")
    return low, high


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="an .onnx file, or a folder: NAME.onnx, NAME/model.onnx, NAME/VERSION/model.onnx")
    parser.add_argument("--name", help="the name a single model file is served under (default: the file's stem)")
    parser.add_argument("--engine", choices=sorted(ENGINES), default="ray", help="the serving engine (default ray)")
    parser.add_argument("--providers", help="comma-separated provider list for every replica, e.g. openvino,cpu")
    scale = parser.add_mutually_exclusive_group()
    scale.add_argument("--replicas", type=int, default=1, help="replicas (Ray) or model instances (Triton)")
    scale.add_argument("--autoscale", type=_autoscale, help="MIN:MAX replicas, scaled by Ray Serve on load")
    parser.add_argument("--max-batch-size", type=int, default=0, help="merge up to B requests into one run (0: off)")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0, help="how long a batch waits to fill")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port")
    parser.add_argument("--grpc-port", type=int, default=8001, help="gRPC port (Triton engine)")
    parser.add_argument("--metrics-port", type=int, default=8002,
                        help="Prometheus metrics port (Triton's; Ray's metrics agent on a cluster started here)")
    parser.add_argument("--address", help="join this Ray cluster ('auto' or ray://host:port) instead of starting one")
    parser.add_argument("--max-body-mb", type=float, default=64.0, help="requests above this size get 413")
    parser.add_argument("--ray-ingress", choices=("auto", "haproxy", "proxy"), default="auto",
                        help="Ray engine, cluster started here: HAProxy in front of each replica's own HTTP server "
                             "(auto: when its binary is there) or Ray Serve's Python proxy")
    parser.add_argument("--no-warmup", dest="warmup", action="store_false",
                        help="do not run each batch size once on zeros when a replica loads the model")


def config_from_args(args: argparse.Namespace) -> ServeConfig:
    providers = tuple(p.strip() for p in args.providers.split(",") if p.strip()) if args.providers else None
    return ServeConfig(model=args.model, name=args.name, providers=providers, replicas=args.replicas,
                       autoscale=args.autoscale, max_batch_size=args.max_batch_size, batch_wait_ms=args.batch_wait_ms,
                       host=args.host, port=args.port, grpc_port=args.grpc_port,
                       metrics_port=args.metrics_port, address=args.address,
                       max_body_bytes=int(args.max_body_mb * (1 << 20)), warmup=args.warmup,
                       ray_ingress=args.ray_ingress)


def _engine(name: str) -> Callable[[ServeConfig], int]:
    module_name, package = ENGINES[name]
    try:
        module = import_module(module_name)
    except ImportError as exc:
        raise ServeError(f"the {name} engine needs {package} ({exc})") from exc
    serve_forever: Callable[[ServeConfig], int] = module.serve_forever
    return serve_forever


def run(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
        return _engine(args.engine)(config)
    except ServeError as exc:
        print(f"epoxy serve: error: {exc}", file=sys.stderr)
        return 1
