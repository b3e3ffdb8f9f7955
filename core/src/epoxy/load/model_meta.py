"""``InferenceSession.get_modelmeta()``: what the model says about itself (onnxruntime's
``ModelMetadata``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModelMetadata:
    """Producer, graph name and description, domain, model description, version and the
    ``metadata_props`` map, with onnxruntime's attribute names."""

    producer_name: str = ""
    graph_name: str = ""
    graph_description: str = ""
    domain: str = ""
    description: str = ""
    version: int = 0
    custom_metadata_map: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, model: Any) -> ModelMetadata:
        """Read from an ``onnx_ir`` model."""
        graph = model.graph
        return cls(
            producer_name=model.producer_name or "",
            graph_name=graph.name or "",
            graph_description=graph.doc_string or "",
            domain=model.domain or "",
            description=model.doc_string or "",
            version=int(model.model_version or 0),
            custom_metadata_map=dict(model.metadata_props),
        )
