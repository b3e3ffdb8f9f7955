"""Per-model metrics through Ray Serve's own metrics (``ray.serve.metrics``: Prometheus on each
node's metrics export port, named ``ray_epoxy_*``), and the scrape behind the ``/metrics`` route."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable
from typing import Any

import ray
from ray.serve.metrics import Counter, Histogram

#: the metric names this package records; Ray exports each as ``ray_`` + name
REQUESTS = "epoxy_requests"
BATCH_SIZE = "epoxy_batch_size"
LATENCY = "epoxy_request_latency_ms"
PREFIXES = ("ray_epoxy_", "ray_serve_")

BATCH_BOUNDARIES = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0]
LATENCY_BOUNDARIES = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0]
#: Ray annotates ``tag_keys`` as ``Tuple[str]`` (one element) though any number of keys works
MODEL_TAGS: Any = ("model", "version")
STATUS_TAGS: Any = ("model", "version", "status")


class ModelMetrics:
    """The three series each model replica records, tagged with the model's name and version."""

    def __init__(self, model: str, version: str) -> None:
        self._tags = {"model": model, "version": version}
        self.requests = Counter(REQUESTS, description="infer requests answered, by HTTP status",
                                tag_keys=STATUS_TAGS)
        self.batch_size = Histogram(BATCH_SIZE, description="requests merged into one session run",
                                    boundaries=BATCH_BOUNDARIES, tag_keys=MODEL_TAGS)
        self.latency = Histogram(LATENCY, description="infer latency in the replica (decode, run, encode), ms",
                                 boundaries=LATENCY_BOUNDARIES, tag_keys=MODEL_TAGS)

    def answered(self, status: int, millis: float) -> None:
        self.requests.inc(tags={**self._tags, "status": str(status)})
        self.latency.observe(millis, tags=self._tags)

    def batch(self, size: int) -> None:
        self.batch_size.observe(size, tags=self._tags)


def _endpoints() -> list[str]:
    """Every alive node's Prometheus endpoint (Ray's metrics agent)."""
    urls = []
    for node in ray.nodes():
        port = node.get("MetricsExportPort")
        if node.get("Alive") and port:
            urls.append(f"http://{node['NodeManagerAddress']}:{port}/metrics")
    return urls


def _keep(lines: Iterable[str], prefixes: tuple[str, ...]) -> list[str]:
    kept = []
    for line in lines:
        name = line.split(" ", 3)[2] if line.startswith("# ") and line.count(" ") >= 2 else line
        if name.startswith(prefixes):
            kept.append(line)
    return kept


def scrape(prefixes: tuple[str, ...] = PREFIXES, timeout_s: float = 5.0) -> str:
    """The epoxy and Ray Serve series from every node, in Prometheus text format (blocking:
    call it off the event loop). A node that does not answer is named in a comment."""
    out: list[str] = []
    for url in _endpoints():
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as reply:
                text = reply.read().decode("utf-8", "replace")
        except OSError as exc:
            out.append(f"# {url}: {exc}")
            continue
        out.extend(_keep(text.splitlines(), prefixes))
    return "\n".join(out) + "\n"
