"""The Open Inference Protocol v2 HTTP routes (plus Triton's model config and ``/metrics``) as a
table of patterns: an HTTP layer asks ``match(method, path)`` which handler a request wants."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ServeError


class MethodNotAllowed(ServeError):
    """The route exists but not for this HTTP method."""

    status = 405


class RouteNotFound(ServeError):
    """No protocol route has this path."""

    status = 404


@dataclass(frozen=True)
class Route:
    """A matched request: ``kind`` names the handler; ``model`` and ``version`` when the path has them."""

    kind: str
    model: str | None = None
    version: str | None = None


_MODEL = r"/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?"

#: (method, path pattern, handler kind), tried in order
ROUTES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("GET", re.compile(r"/v2/?"), "server_metadata"),
    ("GET", re.compile(r"/v2/health/live"), "live"),
    ("GET", re.compile(r"/v2/health/ready"), "ready"),
    ("GET", re.compile(r"/metrics"), "metrics"),
    ("POST", re.compile(r"/v2/repository/index"), "repository_index"),
    ("GET", re.compile(_MODEL + r"/?"), "model_metadata"),
    ("GET", re.compile(_MODEL + r"/ready"), "model_ready"),
    ("GET", re.compile(_MODEL + r"/config"), "model_config"),
    ("POST", re.compile(_MODEL + r"/infer"), "infer"),
)


def match(method: str, path: str) -> Route:
    """The route of a request; RouteNotFound (404) or MethodNotAllowed (405) otherwise."""
    allowed = []
    for route_method, pattern, kind in ROUTES:
        found = pattern.fullmatch(path)
        if found is None:
            continue
        if route_method != method.upper():
            allowed.append(route_method)
            continue
        groups = found.groupdict()
        return Route(kind, groups.get("model"), groups.get("version"))
    if allowed:
        raise MethodNotAllowed(f"{method.upper()} {path}: use {' or '.join(sorted(set(allowed)))}")
    raise RouteNotFound(f"no route {path!r} (Open Inference Protocol v2: /v2, /v2/health/live|ready, "
                        "/v2/models/NAME[/versions/V][/ready|/config|/infer], /metrics)")
