"""Model mutations for the fuzzer: structured (on the ModelProto) and raw protobuf bytes.

``make_case(rng, seeds)`` picks a seed model, applies one to three structured mutations
and/or byte mutations, and returns a :class:`Case`: the files to write (the model plus
any external data files) and a description of what was done. Everything is drawn from
``rng`` so a (seed, index) pair reproduces a case exactly.
"""

from __future__ import annotations

import hashlib
import os
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper

MODEL_FILE = "model.onnx"

ABSURD_INTS = [-1, 0, 1, 2, -(2**31), 2**31 - 1, 2**31, 2**40, 2**62, -(2**62), 2**63 - 1, -(2**63)]
ABSURD_DIMS = [0, -1, -7, 2**20, 2**31, 2**40, 2**62, 2**63 - 1]
OTHER_OPS = ["Add", "Relu", "MatMul", "Conv", "Reshape", "Loop", "If", "Scan", "Concat", "Gather", "Cast", "Split",
             "Slice", "Resize", "TopK", "NonZero", "Pad", "SequenceAt", "Identity", "Softmax", "NotAnOp", "Einsum",
             "ConstantOfShape", "Range", "Tile", "Expand", "Unique", "CumSum", "OneHot", "Where", "Transpose"]
TENSOR_TYPES = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL,
                TensorProto.STRING, TensorProto.FLOAT16, TensorProto.UINT8, TensorProto.INT8, TensorProto.BFLOAT16,
                TensorProto.COMPLEX64, TensorProto.FLOAT8E4M3FN, TensorProto.UINT4, TensorProto.UNDEFINED, 99]


@dataclass
class Case:
    """One fuzz case: files (name -> bytes) with the model in ``model.onnx``; ``by_path``
    loads it from disk (needed for external data), else its bytes are passed."""

    name: str
    description: str
    files: dict[str, bytes]
    by_path: bool = False
    options: dict = field(default_factory=dict)  # SessionOptions fields (check_model, infer_shapes)

    @property
    def model_bytes(self) -> bytes:
        return self.files[MODEL_FILE]


# -- graph helpers -------------------------------------------------------------------------
def _graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    found = [graph]
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                found.extend(_graphs(attr.g))
            for g in attr.graphs:
                found.extend(_graphs(g))
    return found


def _any_graph(rng: random.Random, model: onnx.ModelProto) -> onnx.GraphProto:
    graphs = _graphs(model.graph)
    return graphs[0] if rng.random() < 0.6 else rng.choice(graphs)


def _any_node(rng: random.Random, model: onnx.ModelProto) -> onnx.NodeProto | None:
    nodes = [n for g in _graphs(model.graph) for n in g.node]
    nodes += [n for f in model.functions for n in f.node]
    return rng.choice(nodes) if nodes else None


def _value_names(graph: onnx.GraphProto) -> list[str]:
    names = [v.name for v in graph.input] + [i.name for i in graph.initializer]
    names += [o for n in graph.node for o in n.output if o]
    return names


# -- structured mutations --------------------------------------------------------------------
def attr_wrong_type(rng: random.Random, model: onnx.ModelProto) -> str | None:
    node = _any_node(rng, model)
    if node is None or not node.attribute:
        return None
    attr = rng.choice(node.attribute)
    old = attr.type
    choice = rng.randrange(8)
    name = attr.name
    attr.Clear()
    attr.name = name
    if choice == 0:
        attr.type, attr.s = AttributeProto.STRING, b"not a number"
    elif choice == 1:
        attr.type, attr.f = AttributeProto.FLOAT, 1.5
    elif choice == 2:
        attr.type = AttributeProto.INTS
        attr.ints.extend(rng.choice(ABSURD_INTS) for _ in range(rng.randrange(0, 5)))
    elif choice == 3:
        attr.type, attr.i = AttributeProto.INT, rng.choice(ABSURD_INTS)
    elif choice == 4:
        attr.type = AttributeProto.GRAPH
        attr.g.CopyFrom(helper.make_graph([], "empty", [], []))
    elif choice == 5:
        attr.type = AttributeProto.TENSOR
        attr.t.CopyFrom(helper.make_tensor("t", rng.choice(TENSOR_TYPES[:5]), [rng.choice([0, 1, 3])], [])
                        if rng.random() < 0.3 else onnx.numpy_helper.from_array(np.zeros((2, 0), np.float32)))
    elif choice == 6:
        attr.type = AttributeProto.FLOATS
        attr.floats.extend([float("nan"), float("inf")])
    else:
        attr.type = rng.choice([AttributeProto.UNDEFINED, 99, AttributeProto.TYPE_PROTO])
        attr.i = 3
    return f"attribute {name!r} of {node.op_type} changed from type {old} to {attr.type}"


def attr_absurd_value(rng: random.Random, model: onnx.ModelProto) -> str | None:
    node = _any_node(rng, model)
    if node is None:
        return None
    ints = [a for a in node.attribute if a.type in (AttributeProto.INT, AttributeProto.INTS)]
    if not ints:
        return None
    attr = rng.choice(ints)
    if attr.type == AttributeProto.INT:
        attr.i = rng.choice(ABSURD_INTS)
    elif attr.ints and rng.random() < 0.7:
        attr.ints[rng.randrange(len(attr.ints))] = rng.choice(ABSURD_INTS)
    else:
        del attr.ints[:]
        attr.ints.extend(rng.choice(ABSURD_INTS) for _ in range(rng.randrange(0, 9)))
    return f"attribute {attr.name!r} of {node.op_type} set to absurd value(s)"


def attr_add_or_remove(rng: random.Random, model: onnx.ModelProto) -> str | None:
    node = _any_node(rng, model)
    if node is None:
        return None
    if node.attribute and rng.random() < 0.6:
        attr = node.attribute.pop(rng.randrange(len(node.attribute)))
        return f"attribute {attr.name!r} removed from {node.op_type}"
    if node.attribute and rng.random() < 0.5:
        node.attribute.append(node.attribute[0])
        return f"attribute {node.attribute[0].name!r} of {node.op_type} duplicated"
    node.attribute.append(helper.make_attribute("bogus", rng.choice([1, 1.0, "x", [1, 2]])))
    return f"unknown attribute added to {node.op_type}"


def dangling_input(rng: random.Random, model: onnx.ModelProto) -> str | None:
    node = _any_node(rng, model)
    if node is None:
        return None
    if not node.input or rng.random() < 0.2:
        node.input.append("no_such_value")
    else:
        node.input[rng.randrange(len(node.input))] = rng.choice(["no_such_value", "", "x"])
    return f"{node.op_type} input made dangling/empty"


def cycle(rng: random.Random, model: onnx.ModelProto) -> str | None:
    graph = _any_graph(rng, model)
    if not graph.node:
        return None
    a = rng.randrange(len(graph.node))
    b = rng.randrange(a, len(graph.node))
    later = graph.node[b]
    if not later.output or not graph.node[a].input:
        return None
    node = graph.node[a]
    node.input[rng.randrange(len(node.input))] = later.output[0]
    return f"node {a} ({node.op_type}) reads the output of node {b}: a cycle"


def duplicate_name(rng: random.Random, model: onnx.ModelProto) -> str | None:
    graph = _any_graph(rng, model)
    names = _value_names(graph)
    producing = [n for n in graph.node if n.output]
    choice = rng.randrange(4)
    if choice == 0 and producing and names:
        node = rng.choice(producing)
        node.output[rng.randrange(len(node.output))] = rng.choice(names)
        return f"output of {node.op_type} renamed to an existing value"
    if choice == 1 and graph.initializer:
        graph.initializer.append(rng.choice(graph.initializer))
        return "an initializer duplicated"
    if choice == 2 and graph.input:
        graph.input.append(rng.choice(graph.input))
        return "a graph input duplicated"
    if graph.output:
        graph.output.append(rng.choice(graph.output))
        return "a graph output duplicated"
    return None


def missing_initializer(rng: random.Random, model: onnx.ModelProto) -> str | None:
    graph = _any_graph(rng, model)
    if not graph.initializer:
        return None
    init = graph.initializer.pop(rng.randrange(len(graph.initializer)))
    return f"initializer {init.name!r} removed"


def absurd_input_shape(rng: random.Random, model: onnx.ModelProto) -> str | None:
    graph = _any_graph(rng, model)
    values = list(graph.input) + list(graph.output) + list(graph.value_info)
    tensors = [v for v in values if v.type.HasField("tensor_type")]
    if not tensors:
        return None
    value = rng.choice(tensors)
    shape = value.type.tensor_type.shape
    if rng.random() < 0.2 or not shape.dim:
        value.type.tensor_type.ClearField("shape")
        for _ in range(rng.randrange(0, 40, 4)):
            shape.dim.add().dim_value = rng.choice([1, 2, 2**20])
        return f"{value.name!r} given a new rank"
    dim = shape.dim[rng.randrange(len(shape.dim))]
    if rng.random() < 0.7:
        dim.dim_value = rng.choice(ABSURD_DIMS)
    else:
        dim.dim_param = rng.choice(["", "n", "batch", "??"])
    return f"{value.name!r} given an absurd dim"


def absurd_initializer(rng: random.Random, model: onnx.ModelProto) -> str | None:
    graph = _any_graph(rng, model)
    if not graph.initializer:
        return None
    init = rng.choice(graph.initializer)
    choice = rng.randrange(5)
    if choice == 0:
        del init.dims[:]
        init.dims.extend(rng.choice(ABSURD_DIMS) for _ in range(rng.randrange(1, 4)))
        return f"initializer {init.name!r} dims set to {list(init.dims)}"
    if choice == 1:
        init.data_type = rng.choice(TENSOR_TYPES)
        return f"initializer {init.name!r} data_type set to {init.data_type}"
    if choice == 2 and init.raw_data:
        init.raw_data = init.raw_data[: rng.randrange(len(init.raw_data))]
        return f"initializer {init.name!r} raw data truncated"
    if choice == 3 and init.data_type == TensorProto.INT64:
        values = onnx.numpy_helper.to_array(init).copy()
        if values.size:
            values.reshape(-1)[rng.randrange(values.size)] = rng.choice(ABSURD_INTS)
            init.CopyFrom(onnx.numpy_helper.from_array(values, init.name))
            return f"int64 initializer {init.name!r} given an absurd value"
    init.ClearField("raw_data")
    init.float_data.extend([1.0] * rng.randrange(0, 4))
    return f"initializer {init.name!r} data replaced by a short float list"


def unknown_domain_or_opset(rng: random.Random, model: onnx.ModelProto) -> str | None:
    choice = rng.randrange(6)
    if choice == 0:
        node = _any_node(rng, model)
        if node is None:
            return None
        node.domain = rng.choice(["com.unknown", "ai.onnx.ml", "local", "ai.onnx.preview.training", "x" * 300])
        return f"{node.op_type} moved to domain {node.domain!r}"
    if choice == 1 and model.opset_import:
        model.opset_import[rng.randrange(len(model.opset_import))].version = rng.choice([0, 1, 5, 23, 24, 999, -3])
        return "opset version changed"
    if choice == 2:
        del model.opset_import[:]
        return "all opset imports removed"
    if choice == 3:
        model.opset_import.append(helper.make_opsetid(rng.choice(["", "com.unknown"]), rng.choice([1, 999])))
        return "opset import duplicated/added"
    if choice == 4:
        model.ir_version = rng.choice([0, 1, 3, 99, -1])
        return f"ir_version set to {model.ir_version}"
    node = _any_node(rng, model)
    if node is None:
        return None
    old, node.op_type = node.op_type, rng.choice(OTHER_OPS)
    return f"{old} replaced by {node.op_type}"


def graph_surgery(rng: random.Random, model: onnx.ModelProto) -> str | None:
    graph = _any_graph(rng, model)
    choice = rng.randrange(6)
    if choice == 0 and graph.node:
        node = graph.node.pop(rng.randrange(len(graph.node)))
        return f"node {node.op_type} removed"
    if choice == 1 and graph.output:
        graph.output.pop(rng.randrange(len(graph.output)))
        return "a graph output removed"
    if choice == 2 and graph.input:
        value = rng.choice(graph.input)
        if value.type.HasField("tensor_type"):
            value.type.tensor_type.elem_type = rng.choice(TENSOR_TYPES)
            return f"input {value.name!r} elem_type changed"
    if choice == 3 and graph.node:
        node = rng.choice(graph.node)
        if node.input:
            inputs = list(node.input)
            rng.shuffle(inputs)
            del node.input[:]
            node.input.extend(inputs[: rng.randrange(len(inputs) + 1)])
            return f"{node.op_type} inputs shuffled/dropped"
    if choice == 4 and graph.node:
        node = rng.choice(graph.node)
        if node.output:
            node.output[rng.randrange(len(node.output))] = ""
            return f"{node.op_type} output name emptied"
    if graph.node and len(graph.node) > 1:
        nodes = list(graph.node)
        rng.shuffle(nodes)
        del graph.node[:]
        graph.node.extend(nodes)
        return "nodes shuffled (not topologically sorted)"
    return None


STRUCTURED: list[Callable[[random.Random, onnx.ModelProto], str | None]] = [
    attr_wrong_type, attr_absurd_value, attr_add_or_remove, dangling_input, cycle, duplicate_name,
    missing_initializer, absurd_input_shape, absurd_initializer, unknown_domain_or_opset, graph_surgery,
]


# -- raw bytes -------------------------------------------------------------------------------
def mutate_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    buf = bytearray(data)
    done = []
    for _ in range(rng.randrange(1, 6)):
        if not buf:
            break
        op = rng.randrange(6)
        pos = rng.randrange(len(buf))
        if op == 0:
            buf[pos] ^= 1 << rng.randrange(8)
            done.append("flip")
        elif op == 1:
            buf[pos] = rng.choice([0x00, 0xFF, 0x7F, 0x80, 0x01, 0x08, 0x12, 0x1A])
            done.append("set")
        elif op == 2:
            del buf[pos: pos + rng.randrange(1, 16)]
            done.append("delete")
        elif op == 3:
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
            done.append("insert")
        elif op == 4:
            del buf[pos:]
            done.append("truncate")
        else:
            start = rng.randrange(len(buf))
            chunk = buf[start: start + rng.randrange(1, 64)]
            buf[pos:pos] = chunk
            done.append("duplicate")
    return bytes(buf), "bytes: " + ",".join(done)


# -- external data ---------------------------------------------------------------------------
def external_data_case(rng: random.Random, model: onnx.ModelProto) -> tuple[dict[str, bytes], str]:
    """Save with external data, then break the location, offset, length or the data file."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, MODEL_FILE)
        onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
                  size_threshold=0)
        proto = onnx.load(path, load_external_data=False)
        weights_path = os.path.join(tmp, "weights.bin")
        weights = b""
        if os.path.exists(weights_path):
            with open(weights_path, "rb") as f:
                weights = f.read()
    files: dict[str, bytes] = {"weights.bin": weights}
    tensors = [t for t in proto.graph.initializer if t.external_data]
    what = "external data intact"
    choice = rng.randrange(6)
    if choice == 0:
        files["weights.bin"] = weights[: rng.randrange(len(weights) + 1)]
        what = "external data file truncated"
    elif choice == 1:
        del files["weights.bin"]
        what = "external data file missing"
    elif tensors:
        entries = rng.choice(tensors).external_data
        keys = {e.key: e for e in entries}
        if choice == 2:
            key = rng.choice(["offset", "length"])
            if key not in keys:
                entry = entries.add()
                entry.key = key
                keys[key] = entry
            keys[key].value = rng.choice(["-1", "99999999999", "abc", "", "1e3", str(len(weights) + 4)])
            what = f"external data {key} set to {keys[key].value!r}"
        elif choice == 3:
            keys["location"].value = rng.choice(["../weights.bin", "/etc/passwd", "", "sub/../../x.bin",
                                                 "C:\\x.bin", "weights.bin\x00", "."])
            what = f"external data location set to {keys['location'].value!r}"
        elif choice == 4:
            tensor = rng.choice(tensors)
            tensor.dims[:] = [rng.choice(ABSURD_DIMS[1:])]
            what = f"externally stored {tensor.name!r} given absurd dims"
        else:
            keys["checksum"] = entries.add()
            keys["checksum"].key = rng.choice(["checksum", "location", "bogus"])
            keys["checksum"].value = "zzz"
            what = "odd external data key added"
    files[MODEL_FILE] = proto.SerializeToString()
    return files, what


# -- cases -----------------------------------------------------------------------------------
def make_case(rng: random.Random, seeds: dict[str, onnx.ModelProto], label: str) -> Case:
    # the default check mode ("warn": checker complaints that are safe to run are warnings) or none
    options = {"check_model": "warn" if rng.random() < 0.6 else "off", "infer_shapes": rng.random() < 0.9}
    seed_name = rng.choice(sorted(seeds))
    model = onnx.ModelProto()
    model.CopyFrom(seeds[seed_name])
    done = [f"seed {seed_name}"]
    roll = rng.random()
    if roll < 0.08:
        files, what = external_data_case(rng, model)
        return Case(label, "; ".join([*done, what]), files, by_path=True, options=options)
    if roll < 0.8:
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            mutation = rng.choice(STRUCTURED)
            try:
                what = mutation(rng, model)
            except Exception as exc:  # a mutation that cannot apply (e.g. bad enum) is skipped
                what = f"{mutation.__name__} skipped ({type(exc).__name__})"
            if what:
                done.append(what)
    try:
        data = model.SerializeToString()
    except Exception as exc:  # proto cannot serialize (bad enum): fall back to the seed
        done.append(f"serialize failed ({type(exc).__name__}); seed bytes used")
        data = seeds[seed_name].SerializeToString()
    if roll >= 0.6:
        data, what = mutate_bytes(rng, data)
        done.append(what)
    if options != {"check_model": "warn", "infer_shapes": True}:
        done.append(f"options {options}")
    return Case(label, "; ".join(done), {MODEL_FILE: data}, options=options)


def case_digest(case: Case) -> str:
    h = hashlib.sha1()
    for name in sorted(case.files):
        h.update(name.encode())
        h.update(case.files[name])
    return h.hexdigest()[:12]
