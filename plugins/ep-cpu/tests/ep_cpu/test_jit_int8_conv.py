"""ConvInteger / QLinearConv on the jit tier (jit/kernels_int8_conv.py): channels-last patches and
the AVX512-VNNI int8 GEMM for large group-1 layers, one compiled requantizing pass otherwise,
against the numpy path (exact integer sums in float32/float64 BLAS, float64 requantization) and
onnxruntime. Every comparison with the numpy path is for equality: both compute exact sums and
the same float64 requantization steps."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from _hostile import In, one_node, run_onnxruntime
from _jit_cases import close, run_cpu

from epoxy_sdk.conformance.onnxruntime_oracle import weight_codes

pytest.importorskip("numba")

from epoxy_ep_cpu.jit import kernels_int8_conv, kernels_int8_gemm  # noqa: E402

needs_vnni = pytest.mark.skipif(kernels_int8_gemm.support() is not None,
                                reason=f"int8 GEMM: {kernels_int8_gemm.support()}")

LAYERS = [  # (x shape, w shape, attributes)
    ((1, 16, 14, 14), (32, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 24, 9, 11), (20, 24, 3, 2), {"strides": [2, 1], "pads": [0, 1, 2, 1]}),
    ((1, 32, 7, 7), (64, 32, 1, 1), {}),
    ((2, 32, 5, 6), (16, 32, 1, 1), {}),  # 1x1 stride 1: the channels-last image is the patch matrix
    ((1, 16, 12, 12), (8, 16, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
]


def _codes(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _count_gemm(monkeypatch) -> list[int]:
    """Force the GEMM on for any layer size and count the layers it ran."""
    monkeypatch.setattr(kernels_int8_conv, "MIN_MACS", 0)
    monkeypatch.setattr(kernels_int8_gemm, "MIN_MACS", 0)
    ran: list[int] = []
    real = kernels_int8_conv.PackedInt8Conv.patch_matrix
    monkeypatch.setattr(kernels_int8_conv.PackedInt8Conv, "patch_matrix",
                        lambda self, *a: (lambda r: ran.append(r is not None) or r)(real(self, *a)))
    return ran


def _chain_case(nodes, inits, x_shape, z_shape, rng):
    """A checked opset-13 model of ``nodes`` from uint8 ``x`` to uint8 ``z``, with random codes."""
    import onnx
    from _hostile import Case
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.UINT8, list(x_shape))],
                              [helper.make_tensor_value_info("z", TensorProto.UINT8, list(z_shape))],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return Case(model, {"x": rng.integers(0, 256, x_shape).astype(np.uint8)})


def _qlinear(rng, x_dtype, y_dtype, x_shape, w_shape, attrs, per_channel, bias):
    x = _codes(rng, x_dtype, x_shape)
    w = weight_codes(rng, np.int8, w_shape, activation=x_dtype)
    m = w_shape[0]
    w_scale = (rng.uniform(0.002, 0.02, m) if per_channel else np.array(0.01)).astype(np.float32)
    w_zp = np.zeros(m if per_channel else (), np.int8)
    b = rng.integers(-3000, 3000, m).astype(np.int32) if bias else None
    inputs = [x, In(np.float32(0.05), const=True), In(_codes(rng, x_dtype, ()), const=True), In(w, const=True),
              In(w_scale, const=True), In(w_zp, const=True), In(np.float32(0.8), const=True),
              In(_codes(rng, y_dtype, ()), const=True), In(b, const=True) if bias else None]
    return one_node("QLinearConv", inputs, attrs, 10)


@pytest.mark.parametrize(("x_dtype", "y_dtype"), list(itertools.product([np.uint8, np.int8], repeat=2)))
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), LAYERS, ids=[str(c[1]) for c in LAYERS])
@pytest.mark.parametrize(("per_channel", "bias"), [(False, False), (True, True)], ids=["tensor", "channel+bias"])
def test_qlinear_conv_equals_the_numpy_path(monkeypatch, x_dtype, y_dtype, x_shape, w_shape, attrs, per_channel,
                                            bias):
    """Every layer through the GEMM on a VNNI CPU (counted), and through the compiled
    requantization after the float sums when the GEMM is switched off; both equal the
    numpy path's codes exactly, and onnxruntime's within one code (its requantization rounds
    in float32) where it runs the type pair."""
    case = _qlinear(np.random.default_rng(sum(w_shape)), x_dtype, y_dtype, x_shape, w_shape, attrs, per_channel, bias)
    off = run_cpu(case, False)
    ran = _count_gemm(monkeypatch)
    close(run_cpu(case, True, runs=2), off, 0, 0)
    assert ran == ([True, True] if kernels_int8_gemm.support() is None else [])
    monkeypatch.setattr(kernels_int8_gemm, "support", lambda: "switched off for this test")
    requantized: list[tuple[int, ...]] = []
    real = kernels_int8_conv.requantize_sums
    monkeypatch.setattr(kernels_int8_conv, "requantize_sums",
                        lambda acc, *a: requantized.append(acc.shape) or real(acc, *a))
    close(run_cpu(case, True), off, 0, 0)
    assert len(requantized) == 1  # the float sums' compiled requantization ran
    if x_dtype == np.uint8 and y_dtype == np.uint8:
        close(off, run_onnxruntime(case), 0, 1)


@needs_vnni
@pytest.mark.parametrize("x_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), LAYERS, ids=[str(c[1]) for c in LAYERS])
def test_conv_integer_sums_are_exact(monkeypatch, x_dtype, x_shape, w_shape, attrs):
    """ConvInteger through the GEMM: the numpy path's exact int32 sums, with a fed input zero
    point and per-output-channel weight zero points."""
    rng = np.random.default_rng(len(x_shape) + sum(w_shape))
    x, w = _codes(rng, x_dtype, x_shape), _codes(rng, np.int8, w_shape)
    case = one_node("ConvInteger", [x, In(w, const=True), _codes(rng, x_dtype, ()),
                                    In(_codes(rng, np.int8, (w_shape[0],)), const=True)], attrs, 10)
    ran = _count_gemm(monkeypatch)
    close(run_cpu(case, True), run_cpu(case, False), 0, 0)
    assert ran == [True]


def test_small_and_few_channel_layers_keep_the_float_sums(monkeypatch):
    """Below MIN_MACS, or with fewer than MIN_CHANNELS input channels and a receptive field
    under MIN_FIELD codes (a 3-channel 3x3 stem with 24 outputs), the GEMM does not take the
    layer (measured slower there); a 3-channel 7x7 stem (147 codes) it takes, and a 3x3 one
    with 64 outputs (MIN_NARROW_FIELD, MIN_NARROW_OUTPUTS). The values are the same."""
    ran: list[int] = []
    real = kernels_int8_conv.PackedInt8Conv.patch_matrix
    monkeypatch.setattr(kernels_int8_conv.PackedInt8Conv, "patch_matrix",
                        lambda self, *a: (lambda r: ran.append(r is not None) or r)(real(self, *a)))
    rng = np.random.default_rng(9)
    small = _qlinear(rng, np.uint8, np.uint8, (1, 16, 8, 8), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}, False, True)
    narrow = _qlinear(rng, np.uint8, np.uint8, (1, 3, 96, 96), (24, 3, 3, 3), {"pads": [1, 1, 1, 1]}, False, True)
    stem = _qlinear(rng, np.uint8, np.uint8, (1, 3, 64, 64), (64, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]},
                    False, True)
    wide = _qlinear(rng, np.uint8, np.uint8, (1, 3, 96, 96), (64, 3, 3, 3), {"pads": [1, 1, 1, 1]}, False, True)
    for case in (small, narrow, stem, wide):
        close(run_cpu(case, True), run_cpu(case, False), 0, 0)
    vnni = kernels_int8_gemm.support() is None
    assert ran == ([False, False, True, True] if vnni else [])  # without VNNI no layer asks the GEMM


@needs_vnni
@pytest.mark.parametrize("w_dtype", [np.int8, np.uint8], ids=["int8-weights", "uint8-weights-zp"])
def test_chained_layers_read_each_others_channels_last_codes(monkeypatch, w_dtype):
    """QLinearConv -> Relu-as-Max -> QLinearConv (1x1, then 3x3 padded): the first layer's output
    is an NCHW view of channels-last codes that the Max and the second layer read as they are;
    codes equal the numpy path's; uint8 weights with a zero point take the GEMM's row term."""
    from onnx import helper

    rng = np.random.default_rng(7)
    info = np.iinfo(w_dtype)
    w1 = rng.integers(info.min, info.max + 1, (48, 32, 1, 1)).astype(w_dtype)
    w2 = rng.integers(info.min, info.max + 1, (24, 48, 3, 3)).astype(w_dtype)
    wzp = np.array(0 if w_dtype == np.int8 else 131, w_dtype)
    inits = {"xs": np.float32(0.05), "xz": np.uint8(120), "w1": w1, "ws": np.float32(0.01), "wz": wzp,
             "ys": np.float32(0.9), "yz": np.uint8(90), "w2": w2, "zs": np.float32(1.7), "zz": np.uint8(77)}
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w1", "ws", "wz", "ys", "yz"], ["y"]),
             helper.make_node("Max", ["y", "yz"], ["r"]),
             helper.make_node("QLinearConv", ["r", "ys", "yz", "w2", "ws", "wz", "zs", "zz"], ["z"], pads=[1, 1, 1, 1])]
    case = _chain_case(nodes, inits, (2, 32, 9, 10), (2, 24, 9, 10), rng)
    off = run_cpu(case, False)
    ran = _count_gemm(monkeypatch)
    on = run_cpu(case, True, runs=2)
    assert ran == [True, True, True, True]
    close(on, off, 0, 0)
    assert on[0].flags.c_contiguous  # the session C-orders what the kernel wrote channels last


@needs_vnni
@pytest.mark.parametrize("fed", ["none", "x_scale", "y_zero_point"])
def test_requantization_terms_from_constants_or_per_call(monkeypatch, fed):
    """Constant scales, zero point and bias: the terms are made once at kernel build; with one
    of them fed, per call. Both through the GEMM (counted), both equal to the numpy path."""
    rng = np.random.default_rng(5)
    case = _qlinear(rng, np.uint8, np.uint8, (1, 16, 14, 14), (32, 16, 3, 3), {"pads": [1, 1, 1, 1]}, True, True)
    if fed != "none":
        index = {"x_scale": 1, "y_zero_point": 7}[fed]
        name = case.model.graph.node[0].input[index]
        init = next(i for i in case.model.graph.initializer if i.name == name)
        from onnx import helper, numpy_helper

        value = numpy_helper.to_array(init)
        case.model.graph.initializer.remove(init)
        case.model.graph.input.append(helper.make_tensor_value_info(name, init.data_type, list(value.shape)))
        case.feeds[name] = value
    made: list[int] = []
    real = kernels_int8_gemm.Requantization.__init__
    monkeypatch.setattr(kernels_int8_gemm.Requantization, "__init__",
                        lambda self, *a: made.append(1) or real(self, *a))
    ran = _count_gemm(monkeypatch)
    on = run_cpu(case, True, runs=3)
    assert ran == [True] * 3
    assert len(made) == (1 if fed == "none" else 3)  # once at build, or once a call
    close(on, run_cpu(case, False), 0, 0)


DEPTHWISE = [  # (x shape, attributes)
    ((1, 24, 14, 14), {"pads": [1, 1, 1, 1]}),
    ((2, 32, 15, 13), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 16, 12, 12), {"dilations": [2, 2], "pads": [2, 0, 2, 1]}),
    ((1, 40, 9, 9), {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}),
]


@pytest.mark.parametrize(("x_dtype", "y_dtype"), [(np.uint8, np.uint8), (np.int8, np.uint8), (np.uint8, np.int8)])
@pytest.mark.parametrize(("x_shape", "attrs"), DEPTHWISE, ids=[str(c[1]) for c in DEPTHWISE])
@pytest.mark.parametrize("w_zp", ["zero", "per-channel"])
def test_depthwise_qlinear_conv_equals_the_numpy_path(monkeypatch, x_dtype, y_dtype, x_shape, attrs, w_zp):
    """Depthwise layers (group = channels, one input each) on the compiled channels-last kernel
    (counted), from C-ordered codes: the numpy path's codes exactly, and onnxruntime's within
    one code where it runs the type pair."""
    from onnx import numpy_helper

    from epoxy_ep_cpu.jit import kernels_int8_depthwise

    rng = np.random.default_rng(sum(x_shape))
    c = x_shape[1]
    k = attrs.get("kernel_shape", [3, 3])
    case = _qlinear(rng, x_dtype, y_dtype, x_shape, (c, 1, *k), {**attrs, "group": c}, True, True)
    if w_zp == "per-channel":
        name = case.model.graph.node[0].input[5]
        init = next(i for i in case.model.graph.initializer if i.name == name)
        init.CopyFrom(numpy_helper.from_array(_codes(rng, np.int8, (c,)), name))
    ran: list[tuple[int, ...]] = []
    real = kernels_int8_depthwise.depthwise_nhwc_serial
    monkeypatch.setattr(kernels_int8_depthwise, "depthwise_nhwc_serial",
                        lambda x, *a: ran.append(x.shape) or real(x, *a))
    monkeypatch.setattr(kernels_int8_depthwise, "depthwise_nhwc", kernels_int8_depthwise.depthwise_nhwc_serial)
    on = run_cpu(case, True, runs=2)
    assert len(ran) == 2
    close(on, run_cpu(case, False), 0, 0)
    if x_dtype == np.uint8 and y_dtype == np.uint8 and w_zp == "zero":
        close(on, run_onnxruntime(case), 0, 1)


GROUPED = [  # (x shape, w shape, attributes): several input channels per group
    ((1, 136, 14, 14), (136, 34, 1, 1), {"group": 4}),  # ShuffleNet's: 34 codes a group, 34 outputs
    ((2, 64, 7, 7), (64, 16, 1, 1), {"group": 4}),  # whole registers
    ((1, 32, 10, 10), (48, 16, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    ((1, 48, 11, 9), (24, 16, 3, 3), {"group": 3, "strides": [2, 2], "pads": [1, 0, 1, 1]}),
]


def _count_grouped(monkeypatch) -> list[bool]:
    """Force the grouped GEMM on for any layer size and count the layers it ran."""
    from epoxy_ep_cpu.jit import kernels_int8_grouped

    monkeypatch.setattr(kernels_int8_grouped, "MIN_MACS", 0)
    ran: list[bool] = []
    real = kernels_int8_grouped.PackedGroupedInt8.requantized
    monkeypatch.setattr(kernels_int8_grouped.PackedGroupedInt8, "requantized",
                        lambda self, *a: (lambda r: ran.append(r is not None) or r)(real(self, *a)))
    return ran


@needs_vnni
@pytest.mark.parametrize(("x_dtype", "y_dtype"), [(np.uint8, np.uint8), (np.int8, np.uint8), (np.uint8, np.int8)])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), GROUPED, ids=[str(c[1]) for c in GROUPED])
@pytest.mark.parametrize(("per_channel", "bias"), [(False, False), (True, True)], ids=["tensor", "channel+bias"])
def test_grouped_qlinear_conv_equals_the_numpy_path(monkeypatch, x_dtype, y_dtype, x_shape, w_shape, attrs,
                                                    per_channel, bias):
    """Grouped layers (not depthwise) through one GEMM per group (counted): the numpy path's
    codes exactly, and onnxruntime's within one code where it runs the type pair."""
    case = _qlinear(np.random.default_rng(sum(x_shape)), x_dtype, y_dtype, x_shape, w_shape, attrs, per_channel, bias)
    off = run_cpu(case, False)
    ran = _count_grouped(monkeypatch)
    on = run_cpu(case, True, runs=2)
    assert ran == [True, True]
    close(on, off, 0, 0)
    if x_dtype == np.uint8 and y_dtype == np.uint8:
        close(off, run_onnxruntime(case), 0, 1)


@needs_vnni
@pytest.mark.parametrize(("w_dtype", "w_zp", "taken"), [(np.int8, 0, True), (np.uint8, 128, True),
                                                         (np.uint8, 131, False)],
                         ids=["int8-weights", "uint8-weights-centred", "uint8-weights-off-centre"])
def test_chained_grouped_layers(monkeypatch, w_dtype, w_zp, taken):
    """Grouped 1x1 -> grouped 3x3: the second layer reads the first one's channels-last codes,
    whose rows keep room for the last group's overhang (34 outputs a group, stored 48 wide).
    Weights whose zero point is off their centre need a row term the requantizing epilogue
    does not take: those layers keep the float sums. Codes equal the numpy path's either way."""
    from onnx import helper

    rng = np.random.default_rng(11)
    info = np.iinfo(w_dtype)
    w1 = rng.integers(info.min, info.max + 1, (136, 34, 1, 1)).astype(w_dtype)
    w2 = rng.integers(info.min, info.max + 1, (64, 68, 3, 3)).astype(w_dtype)
    inits = {"xs": np.float32(0.05), "xz": np.uint8(120), "w1": w1, "ws": np.float32(0.01),
             "wz": np.array(w_zp, w_dtype), "ys": np.float32(0.9), "yz": np.uint8(90), "w2": w2,
             "zs": np.float32(1.7), "zz": np.uint8(77)}
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w1", "ws", "wz", "ys", "yz"], ["y"], group=4),
             helper.make_node("QLinearConv", ["y", "ys", "yz", "w2", "ws", "wz", "zs", "zz"], ["z"], group=2,
                              pads=[1, 1, 1, 1])]
    case = _chain_case(nodes, inits, (1, 136, 9, 10), (1, 64, 9, 10), rng)
    off = run_cpu(case, False)
    ran = _count_grouped(monkeypatch)
    on = run_cpu(case, True, runs=2)
    assert ran == ([True] * 4 if taken else [])
    close(on, off, 0, 0)
