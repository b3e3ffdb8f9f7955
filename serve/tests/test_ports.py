"""The ports check both engines run before they start (``epoxy_serve.ports``)."""

from __future__ import annotations

import socket

import pytest
from conftest import free_port

from epoxy_serve import ServeError
from epoxy_serve.ports import is_free, refuse_taken


def test_a_held_port_is_refused_by_its_option_and_a_free_one_passes() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        assert not is_free("127.0.0.1", taken) and not is_free("", taken)
        with pytest.raises(ServeError, match=f"--grpc-port {taken} is not free on 127.0.0.1"):
            refuse_taken((("--port", "127.0.0.1", free_port()), ("--grpc-port", "127.0.0.1", taken)))
        with pytest.raises(ServeError, match=f"--metrics-port {taken} is not free on this machine"):
            refuse_taken((("--metrics-port", "", taken),))
    assert is_free("127.0.0.1", taken)  # released (and TIME_WAIT does not count)
    refuse_taken((("--port", "127.0.0.1", free_port()), ("--metrics-port", "", free_port())))
