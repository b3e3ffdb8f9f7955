"""Small ONNX model builders and runners shared by the tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy_ep_cuda.testing import FakeCudaFactory, fake_registry

NP2ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
           np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL,
           np.dtype(np.float64): TensorProto.DOUBLE, np.dtype(np.int32): TensorProto.INT32}


def model(
    nodes: list[Any],
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    inits: dict[str, np.ndarray] | None = None,
    opset: int = 17,
    out_types: dict[str, Any] | None = None,
    dims: dict[str, list[Any]] | None = None,
) -> bytes:
    """A model of ``nodes``; ``dims``: declared input shapes other than the sample arrays' (a
    symbolic dimension keeps a Shape a run-time computation: static ones fold to constants)."""
    g = helper.make_graph(
        nodes, "t",
        [helper.make_tensor_value_info(n, NP2ONNX[v.dtype], (dims or {}).get(n, list(v.shape)))
         for n, v in inputs.items()],
        [],
        initializer=[numpy_helper.from_array(v, n) for n, v in (inits or {}).items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(m, data_prop=True)
    known = {v.name: v for v in inferred.graph.value_info}
    for name in outputs:
        vi = known.get(name)
        if vi is None or not vi.type.tensor_type.HasField("shape"):
            elem = vi.type.tensor_type.elem_type if vi is not None else (out_types or {}).get(name, TensorProto.FLOAT)
            vi = helper.make_tensor_value_info(name, elem, [f"{name}_d{i}" for i in range(8)][:0] or None)
            vi.type.tensor_type.shape.SetInParent()
            vi.type.tensor_type.shape.ClearField("dim")
        m.graph.output.append(vi)
    return m.SerializeToString()


def run_both(model_bytes: bytes, feeds: dict[str, np.ndarray], options: dict[str, Any] | None = None,
             factory: FakeCudaFactory | None = None, level: str | None = None) -> tuple[list[Any], list[Any], Any, Any]:
    """(fake-cuda outputs, cpu outputs, the cuda provider, the cuda session).

    ``level``: graph optimization level for the cuda session (structural tests pin
    ``disable`` so the core's evolving rewrite passes do not change what they count)."""
    factory = factory or FakeCudaFactory()
    reg = fake_registry(factory)
    so = epoxy.SessionOptions(graph_optimization_level=level) if level else None
    s = epoxy.InferenceSession(model_bytes, providers=[("cuda", options or {}), "cpu"], registry=reg, sess_options=so)
    ref = epoxy.InferenceSession(model_bytes, providers=["cpu"], registry=reg)
    return s.run(None, feeds), ref.run(None, feeds), factory.created[-1], s


def assert_close(got: list[Any], want: list[Any], rtol: float = 1e-4, atol: float = 1e-5) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is np.ndarray, f"output is {type(g).__name__}, not a host array"
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


def placement(session: Any) -> dict[str, str]:
    return {d.node: d.provider for d in session.partition_report().nodes}


_ = onnx


def gpu_unavailable_reason() -> str | None:
    from epoxy.contract import ProviderUnavailable
    from epoxy_ep_cuda._cuda import probe_devices

    try:
        probe_devices()
    except ProviderUnavailable as exc:
        return str(exc)
    return None
