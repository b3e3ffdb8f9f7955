"""Choosing how HTTP reaches a started Ray cluster's replicas (``--ray-ingress``), without Ray: the
choice, the environment it sets before ``ray.init``, and the refusals. The served behaviour of
both modes is test_ray.py's (its cluster runs once per mode); the Triton engine's refusal of the
flag is test_triton_engine.py's."""

from __future__ import annotations

import argparse
import stat
from pathlib import Path

import pytest

from epoxy_serve import ServeError
from epoxy_serve.ray_ingress import (
    HAPROXY_ENVIRONMENT,
    HAPROXY_OWN_PORTS,
    Ingress,
    apply,
    describe,
    haproxy_binary,
    resolve,
)


@pytest.fixture
def fake_haproxy(tmp_path: Path) -> str:
    binary = tmp_path / "haproxy"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return str(binary)


def test_auto_takes_haproxy_when_its_binary_is_there(fake_haproxy: str) -> None:
    environ = {"RAY_SERVE_HAPROXY_BINARY_PATH": fake_haproxy}
    assert haproxy_binary(environ) == fake_haproxy
    assert resolve("auto", environ) == Ingress("haproxy")
    assert resolve("haproxy", environ) == Ingress("haproxy")
    assert resolve("proxy", environ) == Ingress("proxy")


def test_auto_without_a_binary_says_why_and_haproxy_is_refused(tmp_path: Path) -> None:
    environ = {"RAY_SERVE_HAPROXY_BINARY_PATH": str(tmp_path / "missing")}
    assert haproxy_binary(environ) is None
    chosen = resolve("auto", environ)
    assert chosen.mode == "proxy" and "no HAProxy binary" in chosen.note
    assert "Python proxy" in describe(chosen) and "no HAProxy binary" in describe(chosen)
    with pytest.raises(ServeError, match="no HAProxy binary"):
        resolve("haproxy", environ)
    with pytest.raises(ServeError, match="must be one of auto, haproxy, proxy"):
        resolve("nginx", environ)


def test_auto_keeps_a_mode_the_user_set(fake_haproxy: str) -> None:
    chosen = resolve("auto", {"RAY_SERVE_HAPROXY_BINARY_PATH": fake_haproxy, "RAY_SERVE_ENABLE_HA_PROXY": "0"})
    assert chosen.mode == "proxy" and "kept" in chosen.note


def test_apply_sets_the_switches_and_keeps_the_users_other_values() -> None:
    environ = {"RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "30", "RAY_SERVE_ENABLE_HA_PROXY": "0"}
    added = apply(Ingress("haproxy"), environ)
    assert environ["RAY_SERVE_ENABLE_HA_PROXY"] == "1" and environ["RAY_SERVE_ENABLE_DIRECT_INGRESS"] == "1"
    assert environ["RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"] == "30"  # the user's
    assert "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S" not in added
    fresh: dict[str, str] = {key: str(port) for key, port in HAPROXY_OWN_PORTS.items()}  # the user's ports
    assert apply(Ingress("haproxy"), fresh) == HAPROXY_ENVIRONMENT
    assert "statistics on port 8404, its metrics on 9101" in describe(Ingress("haproxy"), fresh)
    apply(Ingress("proxy"), fresh)
    assert fresh["RAY_SERVE_ENABLE_HA_PROXY"] == "0" and fresh["RAY_SERVE_ENABLE_DIRECT_INGRESS"] == "0"


def test_cli_flag() -> None:
    from epoxy_serve.cli import add_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert config_from_args(parser.parse_args(["m.onnx"])).ray_ingress == "auto"
    assert config_from_args(parser.parse_args(["m.onnx", "--ray-ingress", "proxy"])).ray_ingress == "proxy"
    with pytest.raises(SystemExit):
        parser.parse_args(["m.onnx", "--ray-ingress", "nginx"])


def test_haproxy_own_ports_taken_by_another_server_are_replaced_by_free_ones() -> None:
    """A second server on the machine: Ray's default statistics and metrics ports are held
    (here by this test), so the cluster's HAProxy gets free ones instead of crashing at start-up."""
    import socket

    holders = []
    try:
        for port in HAPROXY_OWN_PORTS.values():
            holder = socket.socket()
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                holder.bind(("", port))
            except OSError:  # held by something else already: just as taken
                holder.close()
                continue
            holder.listen()
            holders.append(holder)
        environ: dict[str, str] = {}
        added = apply(Ingress("haproxy"), environ)
        for key, default in HAPROXY_OWN_PORTS.items():
            assert key in added and int(added[key]) != default
        assert f"statistics on port {added['RAY_SERVE_HAPROXY_STATS_PORT']}" in describe(Ingress("haproxy"), environ)
    finally:
        for holder in holders:
            holder.close()
