"""What ``epoxy serve`` (and the Python API) was asked for, engine-neutral: each engine reads the
fields that concern it and says which it cannot honour."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ServeConfig:
    """A deployment request: the models, where they run, how requests are batched, where to listen."""

    model: str
    name: str | None = None
    providers: tuple[str, ...] | None = None
    replicas: int = 1
    autoscale: tuple[int, int] | None = None  # (min, max) replicas; None: a fixed count
    max_batch_size: int = 0  # 0: no dynamic batching
    batch_wait_ms: float = 5.0
    host: str = "127.0.0.1"
    port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002  # Prometheus metrics (Triton engine; Ray Serve exposes its own)
    address: str | None = None  # an existing Ray cluster to join ("auto" or ray://...)
    max_body_bytes: int = 64 << 20
    warmup: bool = True  # run each batch size a replica can see once at load (warmup_batches)
    ray_ingress: str = "auto"  # how HTTP reaches a started Ray cluster's replicas (ray_ingress.CHOICES)
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def batching(self) -> bool:
        return self.max_batch_size > 1

    @property
    def warmup_batches(self) -> int:
        return warmup_batches(self.warmup, self.max_batch_size)


def warmup_batches(enabled: bool, max_batch_size: int) -> int:
    """The batch sizes ``1..N`` a replica runs at load (``ServedModel.warmup_batches``): every size
    a merged batch can take with dynamic batching on, the single request's otherwise; 0 when off."""
    return max(1, max_batch_size) if enabled else 0


def threads_per_replica(replicas: int, cpus: int | None = None) -> int:
    """intra_op threads for each of ``replicas`` sessions sharing this machine's cores: their
    sum stays within the cores (at least one each)."""
    import os

    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // max(1, replicas))
