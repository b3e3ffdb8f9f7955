"""Shape mutations: dims of graph inputs, outputs and value_info (absurd, symbolic, new rank),
a wrong ``value_info`` on an intermediate value, initializer and sparse-initializer dims."""

from __future__ import annotations

import random

import onnx
from onnx import TensorProto

from .common import ABSURD_DIMS, TENSOR_TYPES, Draft, any_graph, any_initializer, type_name


def _tensor_values(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    values = list(graph.input) + list(graph.output) + list(graph.value_info)
    return [v for v in values if v.type.HasField("tensor_type")]


def declared_dims(rng: random.Random, draft: Draft) -> str | None:
    graph = any_graph(rng, draft.model)
    values = _tensor_values(graph)
    if not values:
        return None
    value = rng.choice(values)
    if graph is draft.model.graph and value in graph.input:
        draft.inputs_changed = True
    shape = value.type.tensor_type.shape
    if rng.random() < 0.2 or not shape.dim:
        value.type.tensor_type.ClearField("shape")
        for _ in range(rng.choice([0, 1, 3, 8, 40])):
            shape.dim.add().dim_value = rng.choice([1, 2, 2**20])
        return f"{value.name!r} declared with rank {len(shape.dim)}"
    dim = shape.dim[rng.randrange(len(shape.dim))]
    if rng.random() < 0.7:
        dim.dim_value = rng.choice(ABSURD_DIMS)
        return f"{value.name!r} declared with a dim {dim.dim_value}"
    dim.dim_param = rng.choice(["", "n", "batch", "??", "N" * 300])
    return f"{value.name!r} declared with a dim {dim.dim_param[:10]!r}"


def wrong_value_info(rng: random.Random, draft: Draft) -> str | None:
    """Declare an intermediate value with a shape (or type) that contradicts what runs."""
    graph = any_graph(rng, draft.model)
    declared = {v.name for v in graph.value_info} | {v.name for v in graph.output}
    inner = [o for n in graph.node for o in n.output if o and o not in declared]
    if not inner:
        return None
    name = rng.choice(inner)
    elem = rng.choice([TensorProto.FLOAT] * 3 + TENSOR_TYPES)
    shape = rng.choice([[1], [2**20, 2**20], [2**31], [7, 7, 7], [], [0], [2**40], ["n", 2**30]])
    graph.value_info.append(onnx.helper.make_tensor_value_info(name, elem, shape))
    return f"value_info of intermediate {name!r} declared {type_name(elem)}{shape}"


def initializer_dims(rng: random.Random, draft: Draft) -> str | None:
    init = any_initializer(rng, draft.model)
    if init is None:
        return None
    choice = rng.randrange(3)
    if choice == 0:
        del init.dims[:]
        init.dims.extend(rng.choice(ABSURD_DIMS) for _ in range(rng.randrange(1, 4)))
    elif choice == 1 and init.dims:
        init.dims[rng.randrange(len(init.dims))] += rng.choice([1, -1, 2**32])
    else:
        init.dims.append(rng.choice([1, 2, 0]))
    return f"initializer {init.name!r} dims set to {list(init.dims)}"


def sparse_dims(rng: random.Random, draft: Draft) -> str | None:
    graph = draft.model.graph
    if not graph.sparse_initializer:
        return None
    sparse = rng.choice(graph.sparse_initializer)
    choice = rng.randrange(3)
    if choice == 0:
        del sparse.dims[:]
        sparse.dims.extend(rng.choice(ABSURD_DIMS) for _ in range(rng.randrange(1, 4)))
        return f"sparse initializer {sparse.values.name!r} dims set to {list(sparse.dims)}"
    if choice == 1:
        del sparse.indices.dims[:]
        sparse.indices.dims.extend([rng.choice(ABSURD_DIMS)])
        return f"sparse initializer {sparse.values.name!r} indices dims set to {list(sparse.indices.dims)}"
    sparse.values.dims[:] = [rng.choice(ABSURD_DIMS)]
    return f"sparse initializer {sparse.values.name!r} values dims set to {list(sparse.values.dims)}"


MUTATIONS = [declared_dims, declared_dims, wrong_value_info, wrong_value_info, initializer_dims, sparse_dims]
