"""Single-node com.microsoft (or onnxruntime-only ai.onnx) models run by epoxy's cpu provider
and by onnxruntime, which defines these ops: the oracle of the contrib tests."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

import epoxy

MS = "com.microsoft"


def single_node(op: str, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any] | None = None,
                consts: tuple[int, ...] = (), n_out: int = 1, domain: str = MS, opset: int = 17) -> onnx.ModelProto:
    """A model of one ``domain::op`` node: input ``i`` is graph input ``x{i}`` (an initializer
    when ``i`` is in ``consts``; omitted when None); outputs ``y0..`` with unknown types."""
    names, infos, inits = [], [], []
    for i, x in enumerate(inputs):
        if x is None:
            names.append("")
            continue
        names.append(f"x{i}")
        if i in consts:
            inits.append(numpy_helper.from_array(x, f"x{i}"))
        else:
            infos.append(helper.make_tensor_value_info(f"x{i}", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape))
    while names and not names[-1]:
        names.pop()
    outs = [onnx.ValueInfoProto(name=f"y{i}") for i in range(n_out)]
    node = helper.make_node(op, names, [o.name for o in outs], name=f"the_{op}", domain=domain, **(attrs or {}))
    graph = helper.make_graph([node], "g", infos, outs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def feeds_of(inputs: Sequence[np.ndarray | None], consts: tuple[int, ...] = ()) -> dict[str, np.ndarray]:
    return {f"x{i}": x for i, x in enumerate(inputs) if x is not None and i not in consts}


def epoxy_session(model: onnx.ModelProto) -> epoxy.InferenceSession:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return epoxy.InferenceSession(model, providers=["cpu"])


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int = 0) -> list[np.ndarray]:
    """onnxruntime's outputs (``threads`` intra-op threads; 0: its default)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def run_both(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
             threads: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(epoxy's outputs, onnxruntime's outputs); every node must run on cpu."""
    sess = epoxy_session(model)
    report = sess.partition_report()
    assert {d.provider for d in report.nodes} == {"cpu"}, report.format()
    return sess.run(None, feeds), ort_run(model, feeds, threads)


def assert_same(got: Sequence[np.ndarray], want: Sequence[np.ndarray], exact: bool = False,
                rtol: float = 1e-5, atol: float = 1e-5) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        if exact:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


def check(op: str, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any] | None = None,
          consts: tuple[int, ...] = (), exact: bool = False, rtol: float = 1e-5, atol: float = 1e-5,
          n_out: int = 1, domain: str = MS, opset: int = 17, threads: int = 0) -> list[np.ndarray]:
    """Run one node both ways and compare every output (dtype, shape, values)."""
    got, want = run_both(single_node(op, inputs, attrs, consts, n_out, domain, opset), feeds_of(inputs, consts),
                         threads)
    assert_same(got, want, exact, rtol, atol)
    return got


def codes(rng: np.random.Generator, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    """Uniform random codes over the whole range of an integer type."""
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def qparams(rng: np.random.Generator, dtype: type, lo: float = 0.01, hi: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """A random (scale, zero point) pair for ``dtype``."""
    info = np.iinfo(dtype)
    return (np.array(rng.uniform(lo, hi), np.float32),
            np.array(rng.integers(info.min // 2, info.max // 2 + 1), dtype))
