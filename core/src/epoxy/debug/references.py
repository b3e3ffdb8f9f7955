"""Runs that produce the values to compare: the providers under test, and the references.

References are a registry (name -> runner) so another one (a vendor's own runtime) is one
entry more. ``cpu`` is epoxy on the cpu provider alone; ``onnxruntime`` runs a copy of the
model with the wanted intermediate values added as graph outputs (onnxruntime keeps no
other values).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import InvalidArgumentError
from .capture import Capture, capture_session

#: (model, feeds, wanted value names, registry, optimize) -> capture
ReferenceRunner = Callable[[Any, Mapping[str, Any], Sequence[str], Any, bool], Capture]


def session_capture(model: Any, providers: Sequence[Any], feeds: Mapping[str, Any], *, registry: Any = None,
                    provider_options: Any = None, optimize: bool = True) -> tuple[Capture, Any]:
    """Build an epoxy session and capture one run; a failure to build is the capture's error
    (the session is then None). ``optimize=False`` keeps every value of the model (no fusion,
    no folding): what a reduction needs to feed any subgraph."""
    from ..options import GraphOptimizationLevel, SessionOptions
    from ..session import InferenceSession

    options = SessionOptions()
    if not optimize:
        options.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = InferenceSession(model.SerializeToString(), options, providers=list(providers),
                                   provider_options=provider_options, registry=registry)
    except Exception as exc:  # noqa: BLE001 - reported as the run's failure
        return Capture(error=exc), None
    return capture_session(session, feeds), session


def _cpu(model: Any, feeds: Mapping[str, Any], wanted: Sequence[str], registry: Any, optimize: bool) -> Capture:
    return session_capture(model, ["cpu"], feeds, registry=registry, optimize=optimize)[0]


def _onnxruntime(model: Any, feeds: Mapping[str, Any], wanted: Sequence[str], registry: Any,
                 optimize: bool) -> Capture:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise InvalidArgumentError("reference 'onnxruntime' needs onnxruntime: pip install onnxruntime") from exc
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    present = {o.name for o in copy.graph.output}
    produced = {o for node in copy.graph.node for o in node.output if o}
    for name in wanted:
        if name in produced and name not in present:
            copy.graph.output.append(onnx.ValueInfoProto(name=name))  # onnxruntime infers the type
            present.add(name)
    capture = Capture()
    try:
        options = ort.SessionOptions()
        if not optimize:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(copy.SerializeToString(), options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        results = session.run(names, dict(feeds))
    except Exception as exc:  # noqa: BLE001 - reported as the reference's failure
        capture.error = exc
        return capture
    outputs = {o.name for o in model.graph.output}
    order = {name: i for i, name in enumerate(o for node in model.graph.node for o in node.output)}
    for name, value in sorted(zip(names, results), key=lambda kv: order.get(kv[0], -1)):
        capture.values[name] = value
        if name in outputs:
            capture.outputs[name] = value
    return capture


REFERENCES: dict[str, ReferenceRunner] = {"cpu": _cpu, "onnxruntime": _onnxruntime}


def reference_runner(name: str) -> ReferenceRunner:
    """The runner for ``name``; an unknown name lists the known ones."""
    try:
        return REFERENCES[name]
    except KeyError:
        raise InvalidArgumentError(f"unknown reference {name!r}; choose one of {sorted(REFERENCES)}") from None
