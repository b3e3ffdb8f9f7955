"""Run the model over the calibration batches once and histogram the chosen tensors.

The tensors are exposed by adding them as graph outputs to a copy of the model, so one
ordinary session run per batch yields every value (the user's model is not touched).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from epoxy.quantization.errors import CalibrationDataError
from epoxy.quantization.feeds import iter_feeds
from epoxy.quantization.histogram import DEFAULT_BINS, Histogram
from epoxy.quantization.stats import CalibrationStats

if TYPE_CHECKING:
    from epoxy.plugins import ProviderRegistry

_FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}

Progress = Callable[[int], None]
"""Called after each batch with the number of batches done (the total is often unknown)."""


def _load(model: onnx.ModelProto | str | Path | bytes) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, bytes):
        return onnx.load_from_string(model)
    return onnx.load(str(model))


def _value_infos(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """The declared or inferred type (and shape) of every tensor that has one."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # an odd model: fall back to the declared types, filter at run time
        inferred = model
    graph = inferred.graph
    return {vi.name: vi for vi in (*graph.input, *graph.value_info, *graph.output)
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type}


def activation_tensors(model: onnx.ModelProto) -> list[str]:
    """The float tensors a quantizer needs ranges for: every node input that is not a
    constant (initializers and Constant outputs are weights, quantized from their own
    values) and every graph output, in graph order; tensors of unknown type are kept and
    filtered by their values at run time."""
    graph = model.graph
    constants = {init.name for init in graph.initializer}
    constants |= {out for node in graph.node if node.op_type == "Constant" for out in node.output}
    types = {name: vi.type.tensor_type.elem_type for name, vi in _value_infos(model).items()}
    names: dict[str, None] = {}
    for name in (*(i for node in graph.node for i in node.input), *(o.name for o in graph.output)):
        if name and name not in constants and types.get(name, TensorProto.FLOAT) in _FLOAT_TYPES:
            names[name] = None
    return list(names)


def _exposed(model: onnx.ModelProto, tensors: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` with ``tensors`` added as graph outputs."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    present = {o.name for o in graph.output}
    inputs = {i.name for i in graph.input}
    produced = {o for node in graph.node for o in node.output}
    known = _value_infos(model)
    for name in tensors:
        if name not in produced and name not in inputs:
            raise ValueError(f"tensor {name!r} is neither a graph input nor a node output of the model")
        if name in present:
            continue
        if name in known:
            graph.output.append(known[name])
        else:  # type unknown to shape inference: the session reports what it produces
            graph.output.append(helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None))
    return copy


def collect(model: onnx.ModelProto | str | Path | bytes, feeds: Any, *, tensors: Sequence[str] | None = None,
            providers: Sequence[Any] = ("cpu",), bins: int = DEFAULT_BINS, progress: Progress | None = None,
            registry: ProviderRegistry | None = None) -> CalibrationStats:
    """Histogram ``tensors`` (default: :func:`activation_tensors`) over every batch of ``feeds``.

    ``feeds`` is anything :func:`~epoxy.quantization.feeds.iter_feeds` takes. One session
    on ``providers`` runs each batch once; ``progress`` is called after each batch;
    ``registry`` replaces the installed providers (tests, embedding).
    """
    from epoxy.session import InferenceSession

    proto = _load(model)
    names = list(tensors) if tensors is not None else activation_tensors(proto)
    initializers = {init.name for init in proto.graph.initializer}
    inputs = [i.name for i in proto.graph.input if i.name not in initializers]
    session = InferenceSession(_exposed(proto, names), providers=list(providers), registry=registry)
    histograms = {name: Histogram(bins) for name in names}
    batches = 0
    for feed in iter_feeds(feeds, inputs):
        where = f"batch {batches}"
        for name in inputs:
            if name not in feed:
                raise CalibrationDataError(f"{where}: no value for model input {name!r} (given: "
                                           f"{', '.join(feed) or 'nothing'})", source=where, input=name)
        for name in feed:
            if name not in inputs:
                raise CalibrationDataError(f"{where}: {name!r} is not a model input (inputs: {', '.join(inputs)})",
                                           source=where, input=name)
        for name, value in zip(names, session.run(names, feed)):
            value = np.asarray(value)
            if value.dtype.kind == "f" or value.dtype.name == "bfloat16":
                histograms[name].update(value)
        batches += 1
        if progress is not None:
            progress(batches)
    if not batches:
        raise CalibrationDataError("no calibration batches: the data source yielded nothing")
    # a tensor of unknown declared type that turned out not to be float has no values: drop it
    kept = {n: h for n, h in histograms.items() if h.total or h.nonfinite or tensors is not None}
    return CalibrationStats(kept, batches)
