"""Concatenations that copy nothing: the convolutions before a channel Concat write their outputs
into its planned buffer (``epoxy.plan.placed_parts``, Concat's ``out_parts``), every prepared
convolution route accepting the buffer, nested as densenet nests them; the answers stay
onnxruntime's."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy.contract import NodeSpec, ValueType
from epoxy_ep_cpu.ops import shape as shape_ops
from epoxy_ep_cpu.registry import load_kernels


def _concat_kernel(axis: int = 1):
    node = NodeSpec(0, "c", "Concat", "", 13, ("a", "b"), ("y",), {"axis": axis}, (ValueType(),) * 2,
                    (ValueType(),), {})
    factory, reason = load_kernels().lookup(node)
    assert factory is not None, reason
    return factory(node)


def test_inputs_at_their_place_are_not_copied():
    """A read-only buffer whose parts already hold the inputs: any copy would raise."""
    k = _concat_kernel()
    assert k.supports_out and k.out_parts((1, 6, 4), [(1, 2, 4), (1, 4, 4)]) == [0, 8]
    out = np.random.default_rng(0).standard_normal((1, 6, 4)).astype(np.float32)
    a, b = out[:, :2], out[:, 2:]
    out.flags.writeable = False
    assert k(a, b, out=out) is out


def test_inputs_elsewhere_are_copied_into_the_buffer():
    k = _concat_kernel()
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((1, 2, 4)).astype(np.float32), rng.standard_normal((1, 4, 4)).astype(np.float32)
    out = np.full((1, 6, 4), np.nan, np.float32)
    out[:, :2] = a  # a in place, b not
    assert k(out[:, :2], b, out=out) is out
    np.testing.assert_array_equal(out, np.concatenate([a, b], axis=1))


@pytest.mark.parametrize(("out_shape", "shapes", "axis"), [
    ((2, 6, 4), [(2, 2, 4), (2, 4, 4)], 1),  # a batch: parts are not contiguous
    ((1, 6, 4), [(1, 2, 4), (1, 3, 4)], 1),  # do not add up
    ((1, 6, 4), [(1, 2, 4), (1, 4, 5)], 1),  # another axis differs
])
def test_no_parts_where_they_would_not_be_blocks(out_shape, shapes, axis):
    assert shape_ops.concat_parts(out_shape, shapes, axis) is None


def test_a_batch_and_other_dtypes_still_concatenate_into_the_buffer():
    k = _concat_kernel()
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 2, 4)), rng.standard_normal((2, 4, 4))
    out = np.empty((2, 6, 4))
    assert k(a, b, out=out) is out
    np.testing.assert_array_equal(out, np.concatenate([a, b], axis=1))
    ints = k(np.ones((1, 2), np.int64), np.zeros((1, 3), np.int64), out=np.empty((1, 5), np.int64))
    np.testing.assert_array_equal(ints, [[1, 1, 0, 0, 0]])


def _conv(name, x, m, c, k, rng, pads=None, **attrs):
    w = numpy_helper.from_array((rng.standard_normal((m, c, k, k)) * 0.2).astype(np.float32), f"{name}_w")
    b = numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), f"{name}_b")
    node = helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_pre"], name=name,
                            pads=pads or [k // 2] * 4, **attrs)
    return [node, helper.make_node("Relu", [f"{name}_pre"], [name], name=f"{name}_relu")], [w, b]


def _fire_and_dense(side: int, seed: int = 0):
    """A squeezenet fire module (squeeze 1x1, expand 1x1 and 3x3, Concat) feeding a densenet
    pair (c2 = [fire, conv(fire)], c3 = [c2, conv(c2)]) and a depthwise layer; static shapes."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    for args in (("sq", "x", 16, 32, 1), ("e1", "sq", 32, 16, 1), ("e3", "sq", 32, 16, 3)):
        n, i = _conv(*args, rng)
        nodes += n
        inits += i
    nodes.append(helper.make_node("Concat", ["e1", "e3"], ["fire"], name="fire_cat", axis=1))
    for args in (("d1", "fire", 32, 64, 3),):
        n, i = _conv(*args, rng)
        nodes += n
        inits += i
    nodes.append(helper.make_node("Concat", ["fire", "d1"], ["c2"], name="c2_cat", axis=1))
    n, i = _conv("dw", "c2", 96, 1, 3, rng, group=96)
    nodes += n
    inits += i
    nodes.append(helper.make_node("Concat", ["c2", "dw"], ["c3"], name="c3_cat", axis=1))
    nodes.append(helper.make_node("Relu", ["c3"], ["c3_relu"], name="c3_relu"))  # (a graph output's producer
    nodes.append(helper.make_node("GlobalAveragePool", ["c3_relu"], ["y"], name="gap"))  # may view its input)
    graph = helper.make_graph(nodes, "fire_dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                  [1, 32, side, side])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 192, 1, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    from onnx import shape_inference

    return shape_inference.infer_shapes(model)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("side", [8, 28])
def test_convolutions_write_into_the_concatenations(monkeypatch, side, threads):
    """Every Concat finds its inputs in place (its buffer's parts), the answer is onnxruntime's,
    and repeated runs give the same bits."""
    model = _fire_and_dense(side).SerializeToString()
    seen: list[tuple[int, list[int]]] = []
    real = shape_ops._concat_into

    def spy(out, xs, axis):
        seen.append((out.ctypes.data, [x.ctypes.data for x in xs]))
        return real(out, xs, axis)

    monkeypatch.setattr(shape_ops, "_concat_into", spy)
    options = epoxy.SessionOptions()
    options.intra_op_num_threads = threads
    session = epoxy.InferenceSession(model, options, providers=[("cpu", {"jit": True})])  # (EPOXY_CPU_JIT=0 too)
    plane = side * side * 4
    parts = {session._plan.slot_names[s]: at for s, at in session._plan.arena.offsets.items()}
    assert parts == {"e1": 0, "e3": 32 * plane, "fire": 0, "d1": 64 * plane, "c2": 0, "dw": 96 * plane}
    x = np.random.default_rng(3).standard_normal((1, 32, side, side)).astype(np.float32)
    runs = [session.run(None, {"x": x})[0] for _ in range(3)]
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(runs[0], want, rtol=1e-4, atol=1e-5)
    for again in runs[1:]:
        np.testing.assert_array_equal(again, runs[0])
    # three concatenations, each given its planned buffer; the first run reads the addresses,
    # later ones see the same views in place again (``run_into``'s memo: not read again)
    assert len(seen) == 3
    for out, inputs in seen[-3:]:
        assert inputs[0] == out  # the first part at the buffer's start
    fire, c2, c3 = seen[-3:]
    assert fire[1] == [c3[0], c3[0] + 32 * plane]  # e1, e3 inside the outermost buffer
    assert c2[1] == [c3[0], c3[0] + 64 * plane]
    assert c3[1] == [c3[0], c3[0] + 96 * plane]


#: (input channels, output channels, kernel, side, group, threads, the prepared call class):
#: a layer on each route (``ops/conv._Jit``)
LAYERS = [(16, 32, 3, 8, 1, 1, "SmallConvCall"), (32, 64, 1, 28, 1, 1, "PointwiseCall"),
          (16, 64, 3, 55, 1, 2, "ImplicitConvCall"), (64, 64, 3, 28, 1, 2, "RowsConvCall"),
          (64, 128, 3, 56, 1, 1, "WinogradCall"), (8, 8, 3, 12, 1, 1, "GridConvCall"),
          (96, 96, 3, 28, 96, 1, "DepthwiseCall"), (16, 16, 3, 14, 8, 1, "Conv2dCall")]


def _routes():
    pytest.importorskip("numba")
    from epoxy_ep_cpu.jit.conv_routes import call_classes

    return tuple(call_classes())


@pytest.mark.parametrize(("c", "m", "k", "side", "group", "threads", "route"), LAYERS,
                         ids=[layer[-1] for layer in LAYERS])
def test_every_prepared_route_writes_into_a_given_buffer(request, monkeypatch, c, m, k, side, group, threads, route):
    """A prepared call handed ``out=`` (a view on a cache line inside a larger buffer) writes
    its result there and nowhere else, the same bits as into its own array."""
    from epoxy_ep_cpu import jit

    if jit.kernels("conv") is None:
        pytest.skip("the jit tier is off (EPOXY_CPU_JIT=0): no prepared calls")
    if route == "GridConvCall":
        request.getfixturevalue("no_small_conv")  # the small-layer kernel would take it
    pytest.importorskip("numba")
    from epoxy_ep_cpu.jit import threads as jit_threads

    monkeypatch.setattr(jit_threads, "resolve", lambda requested: threads)
    rng = np.random.default_rng(c + m + side)
    w = (rng.standard_normal((m, c // group, k, k)) * 0.1).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    attrs = {"kernel_shape": [k, k], "pads": [k // 2] * 4, "group": group}
    node = NodeSpec(0, "conv", "Conv", "", 22, ("x", "w", "b"), ("y",), attrs, (ValueType(),) * 3, (ValueType(),),
                    {"w": w, "b": b})
    factory, reason = load_kernels().lookup(node)
    assert factory is not None, reason
    kernel = factory(node)
    assert kernel.supports_out
    x = rng.standard_normal((1, c, side, side)).astype(np.float32)
    seen = []
    for cls in _routes():
        real = cls.__call__
        monkeypatch.setattr(cls, "__call__", lambda self, x, z, out=None, _real=real: seen.append(
            (type(self).__name__, out is not None)) or _real(self, x, z, out))
    own = [kernel(x, w, b) for _ in range(2)][-1]
    size = m * side * side
    backing = np.full(size + 64, np.nan, np.float32)
    start = (-backing.ctypes.data // 4) % 16 + 16  # a cache line, not the array's first
    view = backing[start:start + size].reshape(1, m, side, side)
    got = kernel(x, w, b, out=view)
    assert got is view
    np.testing.assert_array_equal(view, own)
    assert np.isnan(backing[:start]).all() and np.isnan(backing[start + size:]).all()
    assert seen[-1][1]  # the prepared call was given the buffer
    from epoxy_ep_cpu.jit import blas_spin, kernels_conv_implicit, kernels_conv_small, kernels_sgemm

    # the implicit GEMM needs AVX-512, the other compiled GEMMs (the small-layer one too) AVX2 and FMA
    support = {"SmallConvCall": kernels_conv_small.support,
               "ImplicitConvCall": kernels_conv_implicit.support}.get(route, kernels_sgemm.support)
    if support() is None and blas_spin.available():  # else the layer takes another route here
        assert seen[-1][0] == route


def test_the_same_inputs_in_place_again_skip_the_address_checks():
    """After a call whose inputs were all at their place, the same objects (arena views never
    move) are taken as in place without reading addresses; any other input is checked again."""
    k = _concat_kernel()
    out = np.zeros((1, 6, 4), np.float32)
    a, b = out[:, :2], out[:, 2:]
    a[...] = 1.0
    b[...] = 2.0
    assert k(a, b, out=out) is out
    calls = []
    real = shape_ops._concat_into
    shape_ops._concat_into = lambda *args: calls.append(1) or real(*args)
    try:
        assert k(a, b, out=out) is out and calls == []  # the same views: nothing read or copied
        fresh = np.full((1, 4, 4), 3.0, np.float32)
        assert k(a, fresh, out=out) is out and calls == [1]  # another input: checked and copied
        np.testing.assert_array_equal(out[:, 2:], fresh)
    finally:
        shape_ops._concat_into = real
