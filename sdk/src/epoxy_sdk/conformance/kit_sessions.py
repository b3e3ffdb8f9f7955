"""Sessions and capability answers as the kit's scopes make them (one copy for every scope).

Every session the kit builds has output checks on and the kit's provider options
(``--epoxy-provider-option``), so a provider is tested in the configuration it was given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import onnx

from epoxy.contract import Capability

from .kit_models import ChainCase, chains, claimed_chainable_ops


def session_options(**kwargs: Any) -> Any:
    """The kit's ``SessionOptions``: output checks on, plus ``kwargs``."""
    import epoxy

    return epoxy.SessionOptions(check_outputs=True, **kwargs)


def kit_session(model: Any, name: str, options: Mapping[str, str], **kwargs: Any) -> Any:
    """A session with output checks on and the kit's provider options (cpu, if installed,
    after the provider unless ``disable_fallback``)."""
    import epoxy

    return epoxy.InferenceSession(model, session_options(**kwargs), [name], [dict(options)])


def capability(provider: Any, model: onnx.ModelProto) -> tuple[Any, Capability]:
    """(the core's graph of ``model``, the provider's ``capability`` answer for it)."""
    from epoxy.graph.graph_spec import CoreGraph
    from epoxy.load.loader import load_model

    loaded = load_model(model)
    graph = CoreGraph(loaded.model.graph, loaded.model.opset_imports)
    return graph, provider.capability(graph)


def claimed(cap: Capability) -> set[int]:
    """Node indices claimed singly or in groups."""
    return set(cap.nodes) | {i for g in cap.groups for i in g.nodes}


def chain_cases(provider: Any) -> list[ChainCase]:
    """The fused chains generated from the chainable ops ``provider`` claims."""
    return chains(claimed_chainable_ops(lambda model: claimed(capability(provider, model)[1])))
