"""Hand-written seed models: small valid models, each exercising a different part of the core
(initializers, conv/matmul kernels, symbolic dims, control flow, sequences, functions,
shape-computing ops, sparse constants). The fuzzer mutates them next to the ONNX backend
node cases (``seedbank.py``); tests/reliability builds its sessions from them too."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 17)]


def _model(nodes, inputs, outputs, inits=(), name="seed", opsets=OPSET, **kw) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits), **kw)
    return helper.make_model(graph, opset_imports=list(opsets))


def _vi(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    return _model(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
         helper.make_node("Add", ["h", "b1"], ["hb"], name="add1"),
         helper.make_node("Relu", ["hb"], ["r"], name="relu"),
         helper.make_node("MatMul", ["r", "w2"], ["z"], name="mm2"),
         helper.make_node("Softmax", ["z"], ["y"], name="softmax", axis=-1)],
        [_vi("x", shape=["batch", 8])], [_vi("y", shape=["batch", 4])],
        [_init("w1", rng.standard_normal((8, 16)).astype(np.float32)),
         _init("b1", np.zeros(16, np.float32)),
         _init("w2", rng.standard_normal((16, 4)).astype(np.float32))],
    )


def conv() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    return _model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1],
                          kernel_shape=[3, 3]),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("Flatten", ["p"], ["f"], name="flatten", axis=1),
         helper.make_node("Gemm", ["f", "fw"], ["y"], name="gemm", transB=1)],
        [_vi("x", shape=[1, 2, 8, 8])], [_vi("y", shape=[1, 3])],
        [_init("w", rng.standard_normal((4, 2, 3, 3)).astype(np.float32)),
         _init("b", np.zeros(4, np.float32)),
         _init("fw", rng.standard_normal((3, 64)).astype(np.float32))],
    )


def shapes() -> onnx.ModelProto:
    """Shape-computing ops whose output sizes come from tensor values."""
    return _model(
        [helper.make_node("Shape", ["x"], ["s"], name="shape"),
         helper.make_node("ConstantOfShape", ["s"], ["ones"], name="cos",
                          value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
         helper.make_node("Add", ["x", "ones"], ["a"], name="add"),
         helper.make_node("Reshape", ["a", "newshape"], ["r"], name="reshape"),
         helper.make_node("Expand", ["r", "expand_to"], ["e"], name="expand"),
         helper.make_node("Tile", ["e", "reps"], ["t"], name="tile"),
         helper.make_node("Slice", ["t", "starts", "ends", "axes"], ["y"], name="slice")],
        [_vi("x", shape=[2, 3])], [_vi("y")],
        [_init("newshape", np.array([3, 2], np.int64)),
         _init("expand_to", np.array([2, 3, 2], np.int64)),
         _init("reps", np.array([1, 2, 1], np.int64)),
         _init("starts", np.array([0], np.int64)),
         _init("ends", np.array([2], np.int64)),
         _init("axes", np.array([1], np.int64))],
    )


def loop() -> onnx.ModelProto:
    """Loop with a carried value and a scan output; the trip count is an initializer."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "x"], ["acc_out"], name="body_add"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
         helper.make_node("Mul", ["acc_out", "two"], ["scan_out"], name="body_mul")],
        "body",
        [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("acc_in", shape=[3])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("acc_out", shape=[3]), _vi("scan_out", shape=[3])],
        [_init("two", np.full(3, 2, np.float32))],
    )
    return _model(
        [helper.make_node("Loop", ["trip", "cond", "acc0"], ["acc", "scans"], name="loop", body=body)],
        [_vi("x", shape=[3])], [_vi("acc", shape=[3]), _vi("scans", shape=[None, 3])],
        [_init("trip", np.array(5, np.int64)), _init("cond", np.array(True)),
         _init("acc0", np.zeros(3, np.float32))],
    )


def branch() -> onnx.ModelProto:
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["t"], name="neg")], "then", [], [_vi("t", shape=[4])])
    else_g = helper.make_graph([helper.make_node("Abs", ["x"], ["e"], name="abs")], "else", [], [_vi("e", shape=[4])])
    return _model(
        [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
         helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
         helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
        [_vi("x", shape=[4])], [_vi("y", shape=[4])], [_init("zero", np.array(0, np.float32))],
    )


def sequences() -> onnx.ModelProto:
    return _model(
        [helper.make_node("SplitToSequence", ["x"], ["seq"], name="split", axis=0),
         helper.make_node("SequenceInsert", ["seq", "extra"], ["seq2"], name="insert"),
         helper.make_node("SequenceLength", ["seq2"], ["n"], name="len"),
         helper.make_node("ConcatFromSequence", ["seq2"], ["y"], name="concat", axis=0)],
        [_vi("x", shape=[3, 2])], [_vi("y"), _vi("n", TensorProto.INT64, [])],
        [_init("extra", np.ones((1, 2), np.float32))],
    )


def function() -> onnx.ModelProto:
    """A model-local function called twice (inlining, name uniqueness)."""
    fn = helper.make_function(
        "local", "Scale", ["a"], ["b"],
        [helper.make_node("Constant", [], ["k"], value_float=3.0), helper.make_node("Mul", ["a", "k"], ["b"])],
        OPSET,
    )
    model = _model(
        [helper.make_node("Scale", ["x"], ["s1"], name="call1", domain="local"),
         helper.make_node("Scale", ["s1"], ["y"], name="call2", domain="local")],
        [_vi("x", shape=[2])], [_vi("y", shape=[2])],
        opsets=[*OPSET, helper.make_opsetid("local", 1)],
    )
    model.functions.append(fn)
    return model


def indexing() -> onnx.ModelProto:
    return _model(
        [helper.make_node("Gather", ["table", "idx"], ["g"], name="gather", axis=0),
         helper.make_node("Transpose", ["g"], ["t"], name="transpose", perm=[1, 0]),
         helper.make_node("Cast", ["t"], ["c"], name="cast", to=TensorProto.DOUBLE),
         helper.make_node("ReduceMean", ["c"], ["m"], name="mean", axes=[1], keepdims=1),
         helper.make_node("Where", ["mask", "c", "m"], ["y"], name="where"),
         helper.make_node("Concat", ["y", "y"], ["z"], name="concat", axis=0),
         helper.make_node("Split", ["z"], ["z1", "z2"], name="split", axis=0)],
        [_vi("idx", TensorProto.INT64, ["n"]), _vi("mask", TensorProto.BOOL, [3, 1])],
        [_vi("z1"), _vi("z2")],
        [_init("table", np.arange(12, dtype=np.float32).reshape(4, 3))],
    )


def sparse() -> onnx.ModelProto:
    values = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "w")
    indices = numpy_helper.from_array(np.array([0, 5], np.int64), "w_idx")
    model = _model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [_vi("x", shape=[2, 3])], [_vi("y", shape=[2, 3])],
        sparse_initializer=[helper.make_sparse_tensor(values, indices, [2, 3])],
    )
    return model


def compiled() -> onnx.ModelProto:
    """An epoxy compiled model (docs/AOT.md): a context node calling the function that keeps
    its group's nodes, an embedded blob, the metadata record. Its provider is not the fuzzed
    session's, so the kept nodes run; mutations reach the reader (attributes, function, record)."""
    import hashlib
    import json

    from epoxy.aot.format import CONTEXT_DOMAIN, METADATA_KEY, group_digest

    rng = np.random.default_rng(5)
    opsets = [*OPSET, helper.make_opsetid(CONTEXT_DOMAIN, 1)]
    body = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Relu", ["h"], ["r"], name="relu")]
    attrs = ["provider", "provider_version", "sdk_api", "format", "label", "blob", "blob_size", "blob_sha256",
             "group_sha256", "target", "options", "blob_path", "signature"]
    function = helper.make_function(CONTEXT_DOMAIN, "g0", ["x", "w"], ["r"], body, OPSET, attributes=attrs)
    blob = b"fuzz blob: no provider reads this"
    call = helper.make_node("g0", ["x", "w"], ["r"], domain=CONTEXT_DOMAIN, name="epoxy_context/g0",
                            provider="absent", provider_version="0", sdk_api="1.2", format="fuzz/1", label="g0",
                            blob=blob, blob_size=len(blob), blob_sha256=hashlib.sha256(blob).hexdigest(),
                            group_sha256=group_digest(function), target="none", options="{}")
    model = _model([call, helper.make_node("Add", ["r", "b"], ["y"], name="add")],
                   [_vi("x", shape=["batch", 4])], [_vi("y", shape=["batch", 3])],
                   [_init("w", rng.standard_normal((4, 3)).astype(np.float32)), _init("b", np.ones(3, np.float32))],
                   opsets=opsets, value_info=[_vi("h", shape=["batch", 3]), _vi("r", shape=["batch", 3])])
    model.ir_version = 9
    model.functions.append(function)
    record = {"format_version": 1, "providers": ["absent", "cpu"], "provider_versions": {"absent": "0"},
              "partition": {"mm": "absent", "relu": "absent", "add": "cpu"}}
    model.metadata_props.append(onnx.StringStringEntryProto(key=METADATA_KEY, value=json.dumps(record)))
    return model


SEEDS: dict[str, Callable[[], onnx.ModelProto]] = {
    f.__name__: f for f in (mlp, conv, shapes, loop, branch, sequences, function, indexing, sparse, compiled)
}


def all_seeds() -> dict[str, onnx.ModelProto]:
    return {name: make() for name, make in SEEDS.items()}
