"""Ports a server is asked to listen on, checked before it starts: a taken one is refused with
the option that names it.

Why: both engines failed late and obscurely on a port another process held. Ray's metrics
agent on a taken ``--metrics-port`` made ``ray.init`` fail after its start-up timeout ("The
current node timed out during startup") and left agents holding the port; tritonserver logged
"Socket ... already in use" among its start-up lines and the engine raised a TimeoutError 70 s
later.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable

from .errors import ServeError


def is_free(host: str, port: int) -> bool:
    """Nothing listens on ``host:port`` (``""``: any interface); a port in TIME_WAIT is free."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def refuse_taken(wanted: Iterable[tuple[str, str, int]]) -> None:
    """Raise :class:`ServeError` naming the first ``(option, host, port)`` another process holds."""
    for option, host, port in wanted:
        if not is_free(host, port):
            raise ServeError(f"{option} {port} is not free on {host or 'this machine'}: another server (a second "
                             f"epoxy serve?) holds it; choose another {option}")


def free_port(host: str = "") -> int:
    """A port nothing listens on now (the kernel's choice)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])
