"""1. Load: bytes or a path -> a checked ``onnx_ir`` model the rest of the core works on.

``loader`` reads (``wire`` maps large files without a second copy of the weights), runs the
checker and shape inference leniently (``graph_checks``), carries ai.onnx.ml map types onnx-ir
lacks (``map_types``), inlines model-local functions and expands ops nobody runs
(``functions``), applies the user's edits (``model_edits``) and reads metadata (``model_meta``).
What onnx's shape inference would crash on is refused before it runs (``attribute_checks``)
or hidden from it (``inference_guard``); ``proto_tensors`` finds every tensor of a model for
the size, data and external-data checks.
"""
