"""Serving under load (issue #21): epoxy-serve's two engines, Triton (PyTriton) and Ray Serve, on
loopback, against the raw ``session.run`` loop in one process and against the same deployment
running onnxruntime instead of epoxy.

A small CNN with a dynamic batch axis (input ``image`` [N, 3, 32, 32], Conv-Relu-Conv-Relu-pool-
Gemm, fixed seed) is served with and without dynamic batching; closed-loop clients (one
tritonclient HTTP client per thread, batch-1 requests over a pool of distinct images) run at
concurrency 1, 8 and 32, each cell bounded by a request count and a time. Every reply is checked
against a direct epoxy session's output (within 1e-5); errors and mismatches are counted.

Needs a venv with ``epoxy-serve[ray,triton,client]`` and onnxruntime (PyTriton pins numpy<2; the
project venv keeps numpy 2, so not that one):

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /tmp/servevenv/bin/python bench/serving.py
    ... bench/serving.py --engines triton --concurrency 1,32 --seconds 2 --json serving.json

Clients and servers share the machine's cores: on 2 cores the client threads take a real part of
the CPU, so the figures compare runtimes and settings with each other, not with a remote client.
``--rounds N`` measures every served cell N times, the runtimes' order swapped each round (so
neither always goes first after a deploy), and the ratios compare the medians over rounds:
on a shared machine one round's cell moves by 30 %.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy_serve import ServeConfig, ServedModel, TensorSpec, ports
from epoxy_serve.config import threads_per_replica
from epoxy_serve.datatypes import to_protocol
from epoxy_serve.model import _batch_refusal
from epoxy_serve.repository import ModelSource

SIZE = 32
CLASSES = 10
MODEL = "cnn"
TOLERANCE = 1e-5


def _weights(rng: np.random.Generator, name: str, *shape: int) -> onnx.TensorProto:
    """He-scaled random weights: outputs stay near 1 however wide the layer, so the 1e-5 check holds."""
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    scale = np.sqrt(2.0 / fan_in) if len(shape) > 1 else 0.1
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _model(name: str, nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _two_convs() -> list[onnx.NodeProto]:
    """``image`` -> Conv 3x3 (w1, b1) -> Relu -> Conv 3x3 stride 2 (w2, b2) -> Relu -> ``r2``."""
    return [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
    ]


def make_cnn(seed: int = 0) -> onnx.ModelProto:
    """Conv 3->16 (3x3) Relu, Conv 16->32 (3x3, stride 2) Relu, global pool, Gemm to 10 classes;
    the batch axis N is dynamic so requests can merge. A run is ~0.1 ms: serving costs dominate."""
    rng = np.random.default_rng(seed)
    nodes = [
        *_two_convs(),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], transB=1),
    ]
    inits = [_weights(rng, "w1", 16, 3, 3, 3), _weights(rng, "b1", 16), _weights(rng, "w2", 32, 16, 3, 3),
             _weights(rng, "b2", 32), _weights(rng, "w3", CLASSES, 32), _weights(rng, "b3", CLASSES)]
    return _model("cnn", nodes, inits)


def make_cnn_fc(seed: int = 0) -> onnx.ModelProto:
    """The same two convolutions, wider (32, 64), then an AlexNet/VGG-style classifier: Flatten
    (16384) -> Gemm 1024 -> Relu -> Gemm 10. The first Gemm's 64 MB of weights make a batch-1
    run memory-bound (a matrix-vector product) where a merged batch reads them once: the model
    on which dynamic batching pays even behind Ray Serve's per-request cost."""
    rng = np.random.default_rng(seed)
    nodes = [
        *_two_convs(),
        helper.make_node("Flatten", ["r2"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["rh"]),
        helper.make_node("Gemm", ["rh", "w4", "b4"], ["logits"], transB=1),
    ]
    flat = 64 * (SIZE // 2) * (SIZE // 2)
    inits = [_weights(rng, "w1", 32, 3, 3, 3), _weights(rng, "b1", 32), _weights(rng, "w2", 64, 32, 3, 3),
             _weights(rng, "b2", 64), _weights(rng, "w3", 1024, flat), _weights(rng, "b3", 1024),
             _weights(rng, "w4", CLASSES, 1024), _weights(rng, "b4", CLASSES)]
    return _model("cnn_fc", nodes, inits)


#: ``--model`` choices
MODELS: dict[str, Callable[[], onnx.ModelProto]] = {"cnn": make_cnn, "cnn-fc": make_cnn_fc}


class OrtServedModel(ServedModel):
    """The same served model with onnxruntime behind it: only the session differs (onnxruntime's
    ``run(None, feeds)`` has epoxy's signature), so checks, batching and splitting are the same."""

    def load(self) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        if self.threads > 0:
            options.intra_op_num_threads = self.threads
        self._session = onnxruntime.InferenceSession(self.source, options, providers=["CPUExecutionProvider"])
        self.inputs = tuple(_ort_spec(a) for a in self._session.get_inputs())
        self.outputs = tuple(_ort_spec(a) for a in self._session.get_outputs())
        self.batch_refusal = _batch_refusal(self.inputs, self.outputs)


_ORT_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64,
              "tensor(int32)": np.int32, "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


def _ort_spec(arg: Any) -> TensorSpec:
    dims = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape)
    return TensorSpec(arg.name, to_protocol(_ORT_TYPES[arg.type]), dims)


#: runtime name -> ServedModel class serving it
RUNTIMES: dict[str, type[ServedModel]] = {"epoxy": ServedModel, "onnxruntime": OrtServedModel}


@dataclass
class Cell:
    """One measured setting."""

    engine: str  # triton | ray | raw (session.run loop in this process)
    runtime: str
    batching: bool
    concurrency: int
    requests: int = 0
    errors: int = 0
    mismatches: int = 0
    seconds: float = 0.0
    throughput: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    first_error: str = ""
    round: int = 0  # --rounds: which measurement of this setting


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:200]}" if text else type(exc).__name__


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def free_port() -> int:
    return ports.free_port("127.0.0.1")


def summarize(cell: Cell, latencies: list[float], elapsed: float) -> Cell:
    cell.seconds = elapsed
    if latencies:
        ms = np.asarray(latencies) * 1000.0
        cell.p50_ms, cell.p99_ms = float(np.percentile(ms, 50)), float(np.percentile(ms, 99))
    cell.throughput = (cell.requests - cell.errors) / elapsed if elapsed > 0 else 0.0
    return cell


def raw_loop(path: str, runtime: str, images: np.ndarray, wanted: np.ndarray, seconds: float, limit: int) -> Cell:
    """The floor every server is measured against: ``session.run`` batch 1 in a loop, one process."""
    model = RUNTIMES[runtime](MODEL, path)
    cell = Cell("raw", runtime, False, 1)
    for i in range(5):
        model.session.run(None, {"image": images[i:i + 1]})
    latencies: list[float] = []
    start = time.perf_counter()
    while cell.requests < limit and time.perf_counter() - start < seconds:
        i = cell.requests % len(images)
        t = time.perf_counter()
        got = model.session.run(None, {"image": images[i:i + 1]})[0]
        latencies.append(time.perf_counter() - t)
        cell.requests += 1
        cell.mismatches += int(not np.allclose(got, wanted[i:i + 1], rtol=TOLERANCE, atol=TOLERANCE))
    return summarize(cell, latencies, time.perf_counter() - start)


def load(url: str, model: str, cell: Cell, images: np.ndarray, wanted: np.ndarray, seconds: float,
         limit: int) -> Cell:
    """Closed loop: ``cell.concurrency`` threads, each with its own client, each sending the next
    image as soon as its last reply came, until ``limit`` requests or ``seconds`` have passed."""
    import tritonclient.http as httpclient

    lock = threading.Lock()
    latencies: list[float] = []
    issued = 0
    deadline = time.perf_counter() + seconds

    def worker(k: int) -> None:
        nonlocal issued
        client = httpclient.InferenceServerClient(url, connection_timeout=60, network_timeout=60)
        try:
            while True:
                with lock:
                    if issued >= limit or time.perf_counter() > deadline:
                        return
                    i = issued % len(images)
                    issued += 1
                x = images[i:i + 1]
                tensor = httpclient.InferInput("image", list(x.shape), "FP32")
                tensor.set_data_from_numpy(x, binary_data=True)
                t = time.perf_counter()
                try:
                    got = client.infer(model, [tensor]).as_numpy("logits")
                    bad, error = not np.allclose(got, wanted[i:i + 1], rtol=TOLERANCE, atol=TOLERANCE), ""
                except Exception as exc:  # counted, first one kept
                    got, bad, error = None, False, str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
                elapsed = time.perf_counter() - t
                with lock:
                    cell.requests += 1
                    if error:
                        cell.errors += 1
                        cell.first_error = cell.first_error or error
                    else:
                        latencies.append(elapsed)
                        cell.mismatches += int(bad)
        finally:
            client.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(cell.concurrency)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return summarize(cell, latencies, time.perf_counter() - start)


def warm(url: str, model: str, images: np.ndarray, count: int) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url)
    try:
        for i in range(count):
            tensor = httpclient.InferInput("image", [1, 3, SIZE, SIZE], "FP32")
            tensor.set_data_from_numpy(images[i % len(images)][None], binary_data=True)
            client.infer(model, [tensor])
    finally:
        client.close()


# --- engines: each yields (runtime, HTTP address, model name) with the model served, per batching setting

Deployments = Callable[[Sequence[str], bool], Iterator[tuple[str, str, str]]]


def triton_engine(path: str, args: argparse.Namespace) -> tuple[Deployments, Callable[[], None]]:
    """One tritonserver per batching setting serving every runtime's model (``cnn_epoxy``,
    ``cnn_onnxruntime``): a model not under load costs nothing, and each start costs ~15 s."""
    from epoxy_serve.triton_engine import running

    def deployments(runtimes: Sequence[str], batching: bool) -> Iterator[tuple[str, str, str]]:
        http, grpc, metrics = free_port(), free_port(), free_port()
        config = ServeConfig(model=path, replicas=args.replicas, max_batch_size=args.max_batch_size if batching else 0,
                             batch_wait_ms=args.batch_wait_ms, port=http, grpc_port=grpc, metrics_port=metrics)
        sources = [ModelSource(f"{MODEL}_{runtime}", "1", Path(path)) for runtime in runtimes]

        def factory(source: ModelSource, config: ServeConfig) -> ServedModel:
            kind = RUNTIMES[source.name.removeprefix(f"{MODEL}_")]
            return kind(source.name, str(source.path), version=source.version,
                        threads=threads_per_replica(config.replicas), warmup_batches=config.warmup_batches)

        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet), \
                running(config, sources, factory=factory):
            for runtime in runtimes:
                yield runtime, f"127.0.0.1:{http}", f"{MODEL}_{runtime}"

    return deployments, lambda: None


def ray_engine(path: str, args: argparse.Namespace) -> tuple[Deployments, Callable[[], None]]:
    import ray
    from ray import serve

    from epoxy_serve import ray_app, ray_ingress

    class OrtModelServer(ray_app.ModelServer):
        """The Ray replica with onnxruntime's session in place of epoxy's (same checks, batching,
        threads)."""

        def __init__(self, plan: Any) -> None:
            super().__init__(plan)
            self.model = OrtServedModel(plan.name, plan.source, version=plan.version,
                                        threads=getattr(self.model, "threads", 0),
                                        warmup_batches=getattr(self.model, "warmup_batches", 0))

    def ort_app(batching: bool) -> Any:
        """``deployment``'s shape for one model with the onnxruntime replica (the package has no
        runtime switch, and should not need one): the replica answers HTTP itself when it can
        (``__call__``), else behind the ingress."""
        mbs = args.max_batch_size if batching else 0
        concurrent = args.max_concurrent_batches or 1  # replicas of 1 CPU: one batch per session thread
        plan = ray_app.ModelPlan(MODEL, "1", path, None, mbs, args.batch_wait_ms, threads=1,
                                 max_concurrent_batches=concurrent)
        ongoing = ray_app.default_max_ongoing(mbs, concurrent)  # what deployment() gives a replica
        model = serve.deployment(name=f"ort-{MODEL}", num_replicas=args.replicas, max_ongoing_requests=ongoing,
                                 ray_actor_options={"num_cpus": 1.0})(OrtModelServer).bind(plan)
        if "__call__" in vars(ray_app.ModelServer):
            return model
        ingress = serve.deployment(name="epoxy-ingress", ray_actor_options={"num_cpus": 0.0},
                                   max_ongoing_requests=max(256, ongoing * 4))(ray_app.Ingress)
        return ingress.bind({MODEL: {"1": model}}, 64 << 20, 60.0)

    port = free_port()
    ingress = ray_ingress.resolve(args.ray_ingress)
    ray_ingress.apply(ingress)  # as `epoxy serve` starts its cluster
    log(f"ray {ray_ingress.describe(ingress)}")
    try:
        ray.init(num_cpus=max(2, args.replicas), include_dashboard=False, log_to_driver=False)
        serve.start(http_options={"host": "127.0.0.1", "port": port})
    except Exception:
        ray.shutdown()
        raise

    def deployments(runtimes: Sequence[str], batching: bool) -> Iterator[tuple[str, str, str]]:
        """One application at a time (Ray Serve deploys in seconds, and one app owns the route)."""
        for runtime in runtimes:
            if runtime == "epoxy":
                app = ray_app.deployment(path, name=MODEL, replicas=args.replicas,
                                         max_batch_size=args.max_batch_size if batching else 0,
                                         batch_wait_ms=args.batch_wait_ms,
                                         max_concurrent_batches=args.max_concurrent_batches)
            else:
                app = ort_app(batching)
            serve.run(app, name="bench", route_prefix="/")
            try:
                yield runtime, f"127.0.0.1:{port}", MODEL
            finally:
                serve.delete("bench")

    def close() -> None:
        serve.shutdown()
        ray.shutdown()

    return deployments, close


ENGINES: dict[str, Callable[[str, argparse.Namespace], tuple[Deployments, Callable[[], None]]]] = {
    "triton": triton_engine, "ray": ray_engine}


def engine_refusal(name: str) -> str | None:
    """Why an engine cannot run here, or None."""
    needs = {"triton": ["pytriton", "tritonclient.http"], "ray": ["ray.serve", "tritonclient.http"]}[name]
    for module in needs:
        try:
            __import__(module)
        except ImportError as exc:
            return f"{module} is not importable ({exc}); install epoxy-serve[{name},client]"
    if name == "ray":
        try:
            import epoxy_serve

            epoxy_serve.deployment  # noqa: B018
        except (ImportError, AttributeError) as exc:
            return f"epoxy_serve.deployment is not there yet ({exc})"
    return None


def median_cells(cells: Sequence[Cell]) -> list[Cell]:
    """One cell per setting: the round with the median throughput (the lower middle of an even
    count), so its latencies and counts stay one real measurement."""
    groups: dict[tuple[str, str, bool, int], list[Cell]] = {}
    for c in cells:
        groups.setdefault((c.engine, c.runtime, c.batching, c.concurrency), []).append(c)
    return [sorted(group, key=lambda c: c.throughput)[(len(group) - 1) // 2] for group in groups.values()]


def ratios(cells: Sequence[Cell]) -> list[str]:
    """epoxy / onnxruntime per setting, batched / unbatched at the highest concurrency, and each
    served setting against its runtime's raw loop (over the median cells when there are rounds)."""
    by = {(c.engine, c.runtime, c.batching, c.concurrency): c for c in median_cells(cells)}
    lines = []
    for (engine, runtime, batching, conc), cell in sorted(by.items()):
        if engine == "raw" or runtime != "epoxy":
            continue
        ort = by.get((engine, "onnxruntime", batching, conc))
        if ort and ort.throughput:
            lines.append(f"{engine:6} batching={'on ' if batching else 'off'} c={conc:<3} epoxy/onnxruntime "
                         f"{cell.throughput / ort.throughput:.2f}x")
    top = max((c.concurrency for c in cells if c.engine != "raw"), default=0)
    for engine in sorted({c.engine for c in cells} - {"raw"}):
        for runtime in RUNTIMES:
            on, off = by.get((engine, runtime, True, top)), by.get((engine, runtime, False, top))
            if on and off and off.throughput:
                lines.append(f"{engine:6} {runtime:11} c={top} batched/unbatched {on.throughput / off.throughput:.2f}x")
            raw = by.get(("raw", runtime, False, 1))
            best = max((c for c in cells if c.engine == engine and c.runtime == runtime),
                       key=lambda c: c.throughput, default=None)
            if raw and best and raw.throughput:
                lines.append(f"{engine:6} {runtime:11} best served / raw loop {best.throughput / raw.throughput:.2f}x "
                             f"(batching={'on' if best.batching else 'off'}, c={best.concurrency})")
    return lines


def table(cells: Sequence[Cell]) -> str:
    rows = ["| engine | runtime | batching | concurrency | round | requests | errors | mismatches | req/s | p50 ms "
            "| p99 ms |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in cells:
        rows.append(f"| {c.engine} | {c.runtime} | {'on' if c.batching else 'off'} | {c.concurrency} | {c.round} "
                    f"| {c.requests} | {c.errors} | {c.mismatches} | {c.throughput:.0f} | {c.p50_ms:.1f} "
                    f"| {c.p99_ms:.1f} |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="triton,ray", help="comma-separated: triton, ray")
    parser.add_argument("--runtimes", default="epoxy,onnxruntime", help="comma-separated: epoxy, onnxruntime")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated client counts")
    parser.add_argument("--seconds", type=float, default=1.5, help="time bound of one cell")
    parser.add_argument("--requests", type=int, default=1500, help="request bound of one cell")
    parser.add_argument("--replicas", type=int, default=2, help="Triton instances / Ray replicas")
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--ray-ingress", choices=("auto", "haproxy", "proxy"), default="auto",
                        help="how HTTP reaches the Ray replicas (epoxy serve's --ray-ingress)")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0)
    parser.add_argument("--max-concurrent-batches", type=int, default=0,
                        help="Ray: batches one replica may run at once (0: deployment's default, one per "
                             "session thread)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure each served cell this many times, runtimes' order swapped each round")
    parser.add_argument("--model", choices=sorted(MODELS), default="cnn",
                        help="cnn: a run of ~0.1 ms; cnn-fc: a 64 MB classifier, memory-bound at batch 1")
    parser.add_argument("--json", help="write every cell here")
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    runtimes = [r for r in args.runtimes.split(",") if r]
    started = time.perf_counter()

    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / f"{MODEL}.onnx")
        onnx.save(MODELS[args.model](), path)
        images = np.random.default_rng(1).standard_normal((64, 3, SIZE, SIZE)).astype(np.float32)
        wanted = np.asarray(epoxy.InferenceSession(path).run(None, {"image": images})[0])
        cells = [raw_loop(path, runtime, images, wanted, args.seconds, args.requests) for runtime in runtimes]
        for cell in cells:
            log(f"raw loop {cell.runtime}: {cell.throughput:.0f} req/s, p50 {cell.p50_ms:.2f} ms")
        for name in [e for e in args.engines.split(",") if e]:
            refusal = engine_refusal(name)
            if refusal:
                log(f"{name}: skipped: {refusal}")
                continue
            t = time.perf_counter()
            try:
                deployments, close = ENGINES[name](path, args)
            except Exception as exc:  # a cluster that cannot start on this machine now: say so, go on
                log(f"{name}: skipped: could not start: {first_line(exc)}")
                continue
            try:
                for batching, turn in [(b, r) for r in range(max(1, args.rounds)) for b in (False, True)]:
                    order = list(runtimes) if turn % 2 == 0 else list(reversed(runtimes))
                    for runtime, url, model in deployments(order, batching):
                        log(f"{name} {runtime} batching={'on' if batching else 'off'} round {turn}: serving at {url} "
                            f"({time.perf_counter() - t:.0f} s)")
                        warm(url, model, images, 8)
                        for level in levels:
                            cell = load(url, model, Cell(name, runtime, batching, level, round=turn), images, wanted,
                                        args.seconds, args.requests)
                            cells.append(cell)
                            log(f"  c={level}: {cell.throughput:.0f} req/s p50 {cell.p50_ms:.1f} ms "
                                f"p99 {cell.p99_ms:.1f} ms errors {cell.errors} mismatches {cell.mismatches}"
                                + (f" ({cell.first_error})" if cell.first_error else ""))
            except Exception as exc:  # a deployment that failed: the cells measured so far still count
                log(f"{name}: stopped: {first_line(exc)}")
            finally:
                close()
            log(f"{name}: {time.perf_counter() - t:.0f} s")

    print(table(cells))
    print()
    for line in ratios(cells):
        print(line)
    errors = sum(c.errors for c in cells)
    mismatches = sum(c.mismatches for c in cells)
    print(f"\n{sum(c.requests for c in cells)} requests, {errors} errors, {mismatches} outputs off by more than "
          f"{TOLERANCE:g}; {time.perf_counter() - started:.0f} s; {platform.machine()}, {os.cpu_count()} cores")
    if args.json:
        Path(args.json).write_text(json.dumps({"cells": [asdict(c) for c in cells], "args": vars(args)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
