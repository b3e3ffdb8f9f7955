"""What a compiled group depends on, as one digest: the key of caches and compiled blobs.

A compiling provider keys its on-disk cache (ep-coreml's packages) and checks an imported
blob against the group in front of it (ep-cuda) by this digest: the group's nodes in index
order (op, domain, opset, attributes, value names), the constant values they read, and the
boundary with its types. Two providers hashing these in their own ways would disagree on
what "the same group" means; one function keeps them in step.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from ..contract import SubgraphSpec

#: a value's known contents by name, or None (default: the graph's constants)
Known = Callable[[str], Any]


def _feed(h: Any, value: Any) -> None:
    """Hash a Python attribute/constant value; arrays by dtype, shape and bytes. Objects
    without a stable text form (graph attributes) count by type only: groups holding
    control flow must add what distinguishes them to ``salt``."""
    if isinstance(value, np.ndarray):
        h.update(f"nd{value.dtype.str}{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, (tuple, list)):
        h.update(b"(")
        for item in value:
            _feed(h, item)
        h.update(b")")
    elif isinstance(value, (str, int, float, bool, bytes)) or value is None:
        h.update(repr(value).encode())
    else:
        h.update(type(value).__name__.encode())


def group_fingerprint(subgraph: SubgraphSpec, *, known: Known | None = None, salt: str = "") -> str:
    """sha256 hex of ``subgraph`` (see the module docstring); ``salt`` first (library
    versions, options that shape the compiled form); ``known`` gives the values the group's
    nodes read that count as constants (default ``graph.constant``)."""
    graph = subgraph.graph
    value_of = known if known is not None else graph.constant
    h = hashlib.sha256(salt.encode())
    for i in sorted(subgraph.group.nodes):
        node = graph.nodes[i]
        h.update(f"|{node.domain}:{node.op_type}:{node.opset}:{node.inputs}:{node.outputs}".encode())
        for name in sorted(node.attributes):
            h.update(name.encode())
            _feed(h, node.attributes[name])
        for name in node.inputs:
            value = value_of(name) if name else None
            if value is not None:
                _feed(h, np.asarray(value))
    for name in (*subgraph.inputs, "->", *subgraph.outputs):
        h.update(name.encode())
        if name != "->":
            vt = graph.value_type(name)
            h.update(f"{vt.kind}{vt.dtype}{vt.shape}".encode())
    return h.hexdigest()
