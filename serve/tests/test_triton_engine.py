"""The Triton engine end to end: a real tritonserver (PyTriton) started once for the module on free
ports, called with tritonclient over HTTP and gRPC and with plain HTTP for bad requests; outputs
compared with a direct epoxy session (and onnxruntime)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import epoxy
from epoxy_serve import BadRequest, ServeConfig, ServedModel, ServeError
from epoxy_serve.repository import ModelSource
from epoxy_serve.triton_env import ensure_libpython_on_path, libpython_dir, prepare_environment

pytest.importorskip("pytriton", reason="the Triton engine needs epoxy-serve[triton] (nvidia-pytriton)")
httpclient = pytest.importorskip("tritonclient.http", reason="the tests' client is tritonclient[http,grpc]")
grpcclient = pytest.importorskip("tritonclient.grpc", reason="the tests' client is tritonclient[http,grpc]")
from conftest import free_port, make_cnn, write_repository  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

if sys.platform != "linux":
    pytest.skip("PyTriton's tritonserver runs on Linux only", allow_module_level=True)
if libpython_dir() is None:
    pytest.skip("this Python has no shared libpython, which Triton's Python backend links against",
                allow_module_level=True)

from epoxy_serve.triton_engine import Binding, latest_versions, running, unsupported  # noqa: E402

SIZE = 16
MAX_BATCH = 8


class Recording(ServedModel):
    """A ServedModel that records how many requests each call merged (instances run in this process)."""

    calls: list[tuple[int, int]]  # (id of the instance, requests in the call)
    lock = threading.Lock()

    def infer_batch(self, requests: Sequence[Mapping[str, np.ndarray]]) -> list[Any]:
        with self.lock:
            self.calls.append((id(self), len(requests)))
        return super().infer_batch(requests)


class Picky(Recording):
    """Refuses inputs with NaN: a check only the instance can make, so its error path is exercised."""

    def check(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        checked = super().check(feeds)
        for name, value in checked.items():
            if np.isnan(value).any():
                raise BadRequest(f"input {name!r} holds NaN")
        return checked


CALLS: list[tuple[int, int]] = []


def factory(source: ModelSource, config: ServeConfig) -> ServedModel:
    kind = Picky if source.name == "picky" else Recording
    model = kind(source.name, str(source.path), version=source.version, providers=config.providers)
    model.calls = CALLS
    return model


def free_ports(count: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return sorted(ports)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """conftest's repository (cnn/1 with a dynamic batch axis, mlp/1 and mlp/2 with a fixed batch of
    1) plus ``picky``, a CNN behind a check only its instance makes."""
    root = write_repository(tmp_path_factory.mktemp("repo"))
    (root / "picky").mkdir()
    (root / "picky" / "model.onnx").write_bytes(make_cnn(seed=5, size=SIZE))
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[tuple[ServeConfig, list[Binding]]]:
    http, grpc, metrics = free_ports(3)
    config = ServeConfig(model=str(repo), replicas=2, max_batch_size=MAX_BATCH, batch_wait_ms=20,
                         port=http, grpc_port=grpc, metrics_port=metrics)
    with running(config, factory=factory) as (_, bindings):
        yield config, bindings


@pytest.fixture(scope="module")
def http(server: tuple[ServeConfig, list[Binding]]) -> Any:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server[0].port}", concurrency=32)
    yield client
    client.close()


def direct(repo: Path, rel: str, x: np.ndarray, name: str) -> np.ndarray:
    """The reference: a direct epoxy session, cross-checked with onnxruntime when it is installed."""
    path = str(repo / rel)
    want = epoxy.InferenceSession(path).run(None, {name: x})[0]
    try:
        import onnxruntime
    except ImportError:
        return np.asarray(want)
    ort = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {name: x})[0]
    np.testing.assert_allclose(want, ort, rtol=1e-5, atol=1e-5)
    return np.asarray(want)


def images(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, SIZE, SIZE)).astype(np.float32)


def infer_http(client: Any, model: str, x: np.ndarray, name: str = "image", out: str = "logits") -> np.ndarray:
    tensor = httpclient.InferInput(name, list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=True)
    return np.asarray(client.infer(model, [tensor]).as_numpy(out))


def post(config: ServeConfig, path: str, body: dict[str, Any]) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{config.port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_http_infer_matches_a_direct_session(repo: Path, http: Any) -> None:
    x = images(0, 3)
    np.testing.assert_allclose(infer_http(http, "cnn", x), direct(repo, "cnn/1/model.onnx", x, "image"),
                               rtol=1e-5, atol=1e-5)
    v = np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)
    np.testing.assert_allclose(infer_http(http, "mlp", v, "x", "y"), direct(repo, "mlp/2/model.onnx", v, "x"),
                               rtol=1e-5, atol=1e-5)


def test_grpc_infer_matches_a_direct_session(repo: Path, server: tuple[ServeConfig, list[Binding]]) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server[0].grpc_port}")
    try:
        x = images(2, 2)
        tensor = grpcclient.InferInput("image", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        got = client.infer("cnn", [tensor]).as_numpy("logits")
        np.testing.assert_allclose(got, direct(repo, "cnn/1/model.onnx", x, "image"), rtol=1e-5, atol=1e-5)
        assert client.get_model_metadata("mlp").versions == ["2"]
    finally:
        client.close()


def test_metadata_readiness_and_versions(server: tuple[ServeConfig, list[Binding]], http: Any) -> None:
    assert http.is_server_live() and http.is_server_ready()
    assert http.is_model_ready("cnn", "1") and http.is_model_ready("mlp", "2") and not http.is_model_ready("mlp", "1")
    meta = http.get_model_metadata("cnn")
    assert meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 3, SIZE, SIZE]}]
    assert meta["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}]
    meta = http.get_model_metadata("mlp")
    assert meta["versions"] == ["2"]  # the newest version, as Triton's default policy serves it
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [1, 16]}]
    bindings = {b.name: b for b in server[1]}
    assert bindings["cnn"].max_batch_size == MAX_BATCH and bindings["cnn"].note is None
    assert bindings["mlp"].max_batch_size == 0 and "fixed first dim 1" in (bindings["mlp"].note or "")
    assert len(bindings["cnn"].instances) == 2
    assert http.get_model_config("cnn")["max_batch_size"] == MAX_BATCH
    with urllib.request.urlopen(f"http://127.0.0.1:{server[0].metrics_port}/metrics", timeout=10) as reply:
        assert 'nv_inference_request_success{model="cnn",version="1"}' in reply.read().decode()


def test_older_versions_are_named_as_left_out(repo: Path) -> None:
    sources = [ModelSource("mlp", "1", repo / "mlp/1/model.onnx"), ModelSource("mlp", "2", repo / "mlp/2/model.onnx")]
    kept, notes = latest_versions(sources)
    assert [s.version for s in kept] == ["2"] and "version 1 not served" in notes[0]


def test_concurrent_requests_are_batched_and_each_gets_its_own_answer(repo: Path, http: Any) -> None:
    del CALLS[:]
    xs = [images(100 + i, 1 + i % 2) for i in range(32)]
    pending = []
    for x in xs:
        tensor = httpclient.InferInput("image", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x, binary_data=True)
        pending.append(http.async_infer("cnn", [tensor]))
    got = [p.get_result(timeout=60).as_numpy("logits") for p in pending]
    reference = epoxy.InferenceSession(str(repo / "cnn/1/model.onnx"))
    for x, y in zip(xs, got):
        np.testing.assert_allclose(y, reference.run(None, {"image": x})[0], rtol=1e-5, atol=1e-5)
    merged = [n for _, n in CALLS]
    assert sum(merged) == 32 and max(merged) > 1, f"requests per call: {merged}"
    assert len({instance for instance, _ in CALLS}) == 2, "both instances should have served"


PIXELS = [0.0] * 3 * SIZE * SIZE


@pytest.mark.parametrize(("body", "status", "words"), [
    ({"inputs": [{"name": "image", "datatype": "FP64", "shape": [1, 3, SIZE, SIZE], "data": PIXELS}]},
     400, ["'image'", "FP32"]),
    ({"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 3, 8, 2 * SIZE], "data": PIXELS}]},
     400, ["'image'", "shape"]),
    ({"inputs": []}, 400, ["'image'", "missing"]),
    ({"inputs": [{"name": "picture", "datatype": "FP32", "shape": [1, 3, SIZE, SIZE], "data": PIXELS}]},
     400, ["'picture'"]),
], ids=["dtype", "shape", "missing", "unknown-input"])
def test_bad_requests_get_a_4xx_naming_the_input(server: tuple[ServeConfig, list[Binding]], http: Any,
                                                 body: dict[str, Any], status: int, words: list[str]) -> None:
    code, text = post(server[0], "/v2/models/cnn/infer", body)
    assert code == status, text
    for word in words:
        assert word in text, text
    assert infer_http(http, "cnn", images(7, 1)).shape == (1, 10)  # still serving


def test_unknown_model_is_404_and_tritonclient_sees_the_message(server: tuple[ServeConfig, list[Binding]],
                                                                http: Any) -> None:
    code, text = post(server[0], "/v2/models/nope/infer", {"inputs": []})
    assert code == 404 and "nope" in text
    tensor = httpclient.InferInput("image", [1, 3, SIZE, SIZE], "FP64")
    tensor.set_data_from_numpy(np.zeros((1, 3, SIZE, SIZE)))
    with pytest.raises(InferenceServerException, match="'image'"):
        http.infer("cnn", [tensor])


def test_a_check_failing_in_the_instance_is_an_error_reply_and_the_server_lives(http: Any) -> None:
    """Triton itself refuses wrong names, datatypes and shapes with a 400 before any instance runs;
    a check only the instance can make raises an ordinary exception, which PyTriton answers as an
    error reply (HTTP 500: its Python backend gives every callable's error that code) and keeps
    serving. PyTritonUnrecoverableError would shut the server down instead."""
    x = images(8, 1)
    x[0, 0, 0, 0] = np.nan  # JSON has no NaN: it travels as Triton's binary tensor
    tensor = httpclient.InferInput("image", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=True)
    with pytest.raises(InferenceServerException, match="input 'image' holds NaN"):
        http.infer("picky", [tensor])
    assert infer_http(http, "picky", images(9, 1)).shape == (1, 10)
    assert http.is_server_ready()


def test_settings_triton_cannot_honour_are_refused() -> None:
    assert unsupported(ServeConfig(model="m.onnx", autoscale=(1, 3)))
    assert unsupported(ServeConfig(model="m.onnx")) == []
    assert any("--ray-ingress" in note for note in unsupported(ServeConfig(model="m.onnx", ray_ingress="haproxy")))
    with pytest.raises(ServeError, match="autoscale"), running(ServeConfig(model="m.onnx", autoscale=(1, 3))):
        pass


def test_a_taken_port_is_refused_before_tritonserver_starts() -> None:
    """tritonserver itself logged "Socket ... already in use" and the start timed out 70 s later."""
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        with pytest.raises(ServeError, match=f"--grpc-port {taken} is not free"), \
                running(ServeConfig(model="m.onnx", grpc_port=taken)):
            pass


class FlakyTriton:
    """Stands in for PyTriton's Triton: the first server's models fail to load as PyTriton's
    instance handshake race makes them fail; the servers after it load."""

    started: list[FlakyTriton] = []

    def __init__(self, config: Any) -> None:
        self.bound: list[str] = []
        self.stopped = False
        self.started.append(self)

    def bind(self, model_name: str, **kwargs: Any) -> None:
        self.bound.append(model_name)

    def run(self) -> None:
        if len(self.started) == 1:
            raise RuntimeError("[400] load failed for model 'cnn': version 1 is at UNAVAILABLE state: ...")

    def stop(self) -> None:
        self.stopped = True


def test_a_failed_load_starts_a_fresh_server(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from epoxy_serve import triton_engine

    monkeypatch.setattr(triton_engine, "Triton", FlakyTriton)
    FlakyTriton.started = []
    config = ServeConfig(model=str(repo / "cnn/1/model.onnx"), name="cnn", replicas=2)
    with running(config) as (triton, bindings):
        assert triton is FlakyTriton.started[-1] and not triton.stopped
        assert [b.name for b in bindings] == ["cnn"] and len(bindings[0].instances) == 2
    first, second = FlakyTriton.started
    assert first.stopped and second.stopped and first.bound == second.bound == ["cnn"]


def test_other_start_errors_are_not_retried(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from epoxy_serve import triton_engine

    class Broken(FlakyTriton):
        def run(self) -> None:
            raise RuntimeError("address already in use")

    monkeypatch.setattr(triton_engine, "Triton", Broken)
    FlakyTriton.started = []
    config = ServeConfig(model=str(repo / "mlp/1/model.onnx"))
    with pytest.raises(RuntimeError, match="address already in use"), running(config):
        pass
    assert len(FlakyTriton.started) == 1 and FlakyTriton.started[0].stopped


def test_libpython_goes_on_the_loader_path_once() -> None:
    env = {"LD_LIBRARY_PATH": "/opt/x"}
    folder = ensure_libpython_on_path(env)
    ensure_libpython_on_path(env)
    assert env["LD_LIBRARY_PATH"] == f"/opt/x{os.pathsep}{folder}"


def test_the_tensor_store_is_off_unless_the_user_chose() -> None:
    env: dict[str, str] = {}
    prepare_environment(env)
    assert env["PYTRITON_NO_TENSORSTORE"] == "1" and str(libpython_dir()) in env["LD_LIBRARY_PATH"]
    kept = {"PYTRITON_NO_TENSORSTORE": ""}
    prepare_environment(kept)
    assert kept["PYTRITON_NO_TENSORSTORE"] == ""


def test_the_cli_serves_with_a_bare_environment(repo: Path) -> None:
    """``epoxy serve --engine triton`` with no LD_LIBRARY_PATH set by the user; SIGTERM stops it cleanly."""
    http, grpc, metrics = free_ports(3)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTRITON_NO_TENSORSTORE")}
    command = [str(Path(sys.executable).with_name("epoxy")), "serve", str(repo / "mlp/2/model.onnx"), "--name", "tiny",
               "--engine", "triton", "--port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                if client.is_model_ready("tiny"):
                    break
            except Exception:
                pass
            assert time.monotonic() < deadline, "the server did not get ready in 90 s"
            time.sleep(0.5)
        v = np.ones((1, 16), np.float32)
        np.testing.assert_allclose(infer_http(client, "tiny", v, "x", "y"), direct(repo, "mlp/2/model.onnx", v, "x"),
                                   rtol=1e-5, atol=1e-5)
        client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert code == 0
