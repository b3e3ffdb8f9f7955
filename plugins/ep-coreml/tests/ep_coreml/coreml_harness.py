"""Helpers: build one-op ONNX models, convert them, evaluate the saved package with the
test MIL interpreter, compare with ep-cpu on the same graph."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from mil_interpreter import load_program, op_types, run_program
from onnx import helper, numpy_helper

import epoxy
from epoxy_ep_coreml import compile_model

RNG = np.random.default_rng(1234)


def rand(*shape: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return RNG.uniform(low, high, size=shape).astype(np.float32)


def model(
    nodes: Sequence[onnx.NodeProto] | onnx.NodeProto,
    feeds: Mapping[str, np.ndarray],
    outputs: Sequence[str] | None = None,
    consts: Mapping[str, np.ndarray] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    """A model of ``nodes`` reading ``feeds`` (graph inputs) and ``consts`` (initializers);
    output types are left to shape inference."""
    if isinstance(nodes, onnx.NodeProto):
        nodes = [nodes]
    outputs = list(outputs or [o for o in nodes[-1].output if o])
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
              for k, v in feeds.items()]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (consts or {}).items()]
    produced = {o: n for n in nodes for o in n.output}
    out_infos = []
    for name in outputs:
        out_infos.append(helper.make_empty_tensor_value_info(name) if name in produced else None)
    graph = helper.make_graph(list(nodes), "g", inputs, [o for o in out_infos if o is not None], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
    by_name = {v.name: v for v in inferred.graph.value_info}
    del m.graph.output[:]
    for name in outputs:
        m.graph.output.append(by_name[name] if name in by_name else
                              next(o for o in inferred.graph.output if o.name == name))
    return m


def cpu_run(m: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = epoxy.InferenceSession(m, providers=["cpu"])
    names = [o.name for o in m.graph.output]
    return dict(zip(names, sess.run(None, dict(feeds))))


def convert(m: onnx.ModelProto, out: Path, options: Mapping[str, Any] | None = None) -> Any:
    return compile_model(m, out, dict(options or {}))


def interpret(group: Mapping[str, Any], feeds: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[str]]:
    """Run one converted group on ONNX-named feeds; returns ONNX-named outputs and op types."""
    program = load_program(group["path"])
    features = {}
    for f in group["inputs"]:
        value = np.asarray(feeds[f["onnx"]])
        features[f["coreml"]] = value.astype(np.int32) if value.dtype in (np.int64, np.bool_) else value
    result = run_program(program, features)
    outputs = {}
    for f in group["outputs"]:
        if f["coreml"] is not None:
            outputs[f["onnx"]] = result[f["coreml"]].astype(f["dtype"])
    return outputs, op_types(program)


def check(
    m: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    out: Path,
    *,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    options: Mapping[str, Any] | None = None,
) -> list[str]:
    """Convert the whole model as one group, interpret it, compare with ep-cpu."""
    result = convert(m, out, options)
    summary = result.summary
    declined = summary["declined"]
    assert summary["coreml_nodes"] == summary["nodes"], f"coreml declined: {declined}"
    assert len(result.groups) == 1, result.groups
    got, ops = interpret(result.groups[0], feeds)
    want = cpu_run(m, feeds)
    for name, expected in want.items():
        assert name in got, f"output {name} not produced by the package"
        actual = got[name]
        assert actual.shape == expected.shape, (name, actual.shape, expected.shape)
        assert actual.dtype == expected.dtype, (name, actual.dtype, expected.dtype)
        if expected.dtype == np.bool_ or np.issubdtype(expected.dtype, np.integer):
            np.testing.assert_array_equal(actual, expected, err_msg=name)
        else:
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=name)
    return ops


def declined_reason(m: onnx.ModelProto, out: Path, op_type: str | None = None) -> str:
    """The reason coreml gave for not converting (the first node of ``op_type``)."""
    result = convert(m, out)
    for d in result.report.nodes:
        if op_type is None or d.op_type == op_type:
            assert d.provider != "coreml", f"{d.node} was converted"
            return dict(d.declined).get("coreml", "")
    raise AssertionError(f"no {op_type} node")
