"""The compiled windowed MaxPool / AveragePool (jit/kernels_pool.py) against the numpy path
(jit off) and the ONNX reference, on a grid of windows, strides, dilations, pads (asymmetric,
auto_pad), ceil_mode, count_include_pad, batch sizes, NaN inputs and both dtypes.

Tolerance: the compiled kernel reduces in the numpy path's order (rows of the window, then
columns) and skips the padding instead of adding zeros / taking fmax with NaN, so MaxPool is
exact and AveragePool agrees to the last bit but for the sign of a zero sum (checked at
rtol 1e-6 / 1e-13); the reference sums in another order (rtol 1e-5)."""

from __future__ import annotations

import numpy as np
import pytest
from _hostile import one_node, run_reference
from _jit_cases import close, run_cpu

pytest.importorskip("numba")

from epoxy_ep_cpu.ops import pool as pool_ops  # noqa: E402

_TIGHT = {np.float32: 1e-6, np.float64: 1e-13}

# (x shape, attributes): every case routes to the compiled kernel (checked below)
CASES = [
    ((1, 3, 16, 16), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # exporter resnet
    ((2, 4, 11, 13), {"kernel_shape": [3, 3], "strides": [2, 2]}),  # batch 2, no pads
    ((1, 2, 13, 13), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 12, 12), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 1, 2, 1], "ceil_mode": 1}),
    ((1, 3, 10, 9), {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [1, 0, 0, 2]}),  # asymmetric
    ((1, 2, 12, 12), {"kernel_shape": [3, 3], "strides": [2, 2], "dilations": [2, 1], "pads": [1, 1, 1, 1]}),
    ((1, 2, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 10, 10), {"kernel_shape": [4, 4], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 9, 9), {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "VALID"}),
    ((1, 1, 7, 7), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # stride 1 on a small input, 1 channel
    ((1, 4, 8, 8), {"kernel_shape": [5, 5], "strides": [1, 1], "pads": [2, 2, 2, 2]}),
    ((1, 2, 6, 6), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
]


def _ids(cases):
    return [f"{c[0]}-{sorted(c[1].items())}" for c in cases]


def _x(seed: int, shape, dtype) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 2).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "attrs"), CASES, ids=_ids(CASES))
def test_max_pool(shape, attrs, dtype):
    x = _x(sum(shape), shape, dtype)
    case = one_node("MaxPool", [x], attrs, 22)
    on, off, ref = run_cpu(case, True), run_cpu(case, False), run_reference(case)
    close(on, off, 0, 0)
    close(on, ref, 0, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "attrs"), CASES, ids=_ids(CASES))
@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool(shape, attrs, dtype, include_pad):
    x = _x(sum(shape) + 1, shape, dtype)
    case = one_node("AveragePool", [x], {**attrs, "count_include_pad": include_pad}, 22)
    on, off, ref = run_cpu(case, True), run_cpu(case, False), run_reference(case)
    close(on, off, _TIGHT[dtype], 0)
    close(on, ref, 1e-5, 1e-6)


@pytest.mark.parametrize(("shape", "attrs"), CASES, ids=_ids(CASES))
def test_every_case_routes_to_the_jit_kernel(shape, attrs):
    """The comparisons above would pass vacuously if these pools took the numpy path."""
    case = one_node("MaxPool", [_x(0, shape, np.float32)], attrs, 22)
    a = pool_ops._PoolAttrs(_spec(case))
    _, begin, end, _ = a.geometry(np.empty(shape, np.float32))
    assert pool_ops.use_jit_pool(np.empty(shape, np.float32), a, begin, end)


def _spec(case):
    from onnx import helper

    from epoxy.contract import NodeSpec

    node = case.model.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return NodeSpec(index=0, name="n0", op_type=node.op_type, domain="", opset=22, inputs=tuple(node.input),
                    outputs=tuple(node.output), attributes=attrs, input_types=(), output_types=())


def _spy_calls(monkeypatch) -> list[str]:
    """Records each call of the two windowed kernels' prepared calls, by class name."""
    from epoxy_ep_cpu.jit import kernels_pool, kernels_pool_rows

    calls: list[str] = []
    for cls in (kernels_pool.Pool2dCall, kernels_pool_rows.RowsPoolCall):
        real = cls.__call__
        monkeypatch.setattr(cls, "__call__", lambda self, x, _real=real: calls.append(type(self).__name__)
                            or _real(self, x))
    return calls


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize(("attrs", "kernel"), [({"kernel_shape": [3, 3], "strides": [2, 2]}, "RowsPoolCall"),
                                               ({"kernel_shape": [3, 3], "strides": [2, 2], "dilations": [2, 2]},
                                                "Pool2dCall")])
def test_jit_on_dispatches_to_the_compiled_pool(monkeypatch, op, attrs, kernel):
    """Undilated windows run the row-buffer kernel, dilated ones the general one."""
    calls = _spy_calls(monkeypatch)
    case = one_node(op, [_x(1, (1, 2, 9, 9), np.float32)], attrs, 22)
    run_cpu(case, False)
    assert calls == []
    run_cpu(case, True)
    assert calls == [kernel]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_nan_inputs_follow_the_numpy_path(dtype):
    """NaN inputs are skipped (fmax), a window of NaN and padding only gives NaN."""
    x = _x(3, (1, 2, 9, 9), dtype)
    x[0, 0, 2, 2] = np.nan
    x[0, 1, :3, :3] = np.nan  # a whole window (with the padding) of NaN
    x[0, 1, 5, :] = np.inf
    x[0, 1, 7, :] = -np.inf
    for attrs in ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
                  {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 0, 0]},
                  {"kernel_shape": [3, 3], "strides": [1, 1]}):
        case = one_node("MaxPool", [x], attrs, 22)
        on, off = run_cpu(case, True), run_cpu(case, False)
        close(on, off, 0, 0)
    assert np.isnan(on[0]).any()


def test_average_pool_nan_propagates_as_in_the_numpy_path():
    x = _x(4, (1, 2, 9, 9), np.float32)
    x[0, 0, 4, 4] = np.nan
    case = one_node("AveragePool", [x], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 22)
    close(run_cpu(case, True), run_cpu(case, False), 1e-6, 0)


def test_max_pool_indices_stay_on_the_numpy_path(monkeypatch):
    calls = _spy_calls(monkeypatch)
    x = _x(5, (1, 2, 8, 8), np.float32)
    case = one_node("MaxPool", [x], {"kernel_shape": [3, 3], "strides": [2, 2]}, 22, n_out=2)
    close(run_cpu(case, True), run_reference(case), 0, 0)
    assert calls == []


def test_large_stride_one_pool_keeps_the_numpy_path(monkeypatch):
    """A large stride-1 pool other than the padded 3x3 one (below) stays on numpy's flat passes."""
    calls = _spy_calls(monkeypatch)
    x = _x(6, (1, 64, 14, 14), np.float32)
    case = one_node("MaxPool", [x], {"kernel_shape": [3, 3], "pads": [0, 1, 1, 0]}, 22)
    close(run_cpu(case, True), run_reference(case), 0, 0)
    assert calls == []


# -- 3x3 stride-1 pools padded by 1 (inception's branch pools): the whole-plane kernel ----------
SAME3 = [(1, 64, 14, 14), (2, 3, 7, 9), (1, 2, 1, 5), (1, 2, 5, 1), (1, 1, 1, 1), (1, 2, 2, 2), (1, 3, 3, 17),
         (1, 100, 7, 7), (2, 5, 2, 3), (1, 7, 3, 2)]  # (blocks of many planes: ``_same3_chunk``)


def _same3_calls(monkeypatch) -> list[int]:
    from epoxy_ep_cpu.jit import kernels_pool

    calls: list[int] = []
    real = kernels_pool.Pool2dCall.__call__

    def spy(self, x):  # type: ignore[no-untyped-def]
        if self._shares._kernel is kernels_pool.same3_planes:
            calls.append(1)
        return real(self, x)

    monkeypatch.setattr(kernels_pool.Pool2dCall, "__call__", spy)
    return calls


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SAME3, ids=[str(s) for s in SAME3])
@pytest.mark.parametrize(("op", "include_pad"), [("MaxPool", None), ("AveragePool", 0), ("AveragePool", 1)])
def test_same_size_3x3_pools_match_the_numpy_path_bit_for_bit(monkeypatch, shape, op, include_pad, dtype):
    """Any size (one row, one column, one pixel included); the AveragePool of float32 multiplies
    the full windows' sums by 1/9 in float64, which must give the quotient's bits: the input
    mixes magnitudes down to float32's subnormals, where the rounding is coarsest."""
    calls = _same3_calls(monkeypatch)
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * rng.choice([1.0, 1e-38, 1e-43, 3e37], size=shape)).astype(dtype)
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], **({} if include_pad is None else
                                                              {"count_include_pad": include_pad})}
    case = one_node(op, [x], attrs, 22)
    on, off = run_cpu(case, True, runs=2), run_cpu(case, False)
    # (one pixel's uncounted pad: the window is the whole map, GlobalAveragePool's kernel runs it)
    assert calls == ([] if op == "AveragePool" and include_pad == 0 and shape[2:] == (1, 1) else [1, 1])
    np.testing.assert_array_equal(on[0].view(np.uint8), off[0].view(np.uint8))  # the same bits, zero signs too
    # the reference sums in another order: a rounding of the largest input's size, not the output's
    close(on, run_reference(case), 1e-5, 4 * float(np.finfo(dtype).eps) * float(np.abs(x).max()))


@pytest.mark.parametrize("block", [1, 20, 50, 149])
@pytest.mark.parametrize(("op", "include_pad"), [("MaxPool", None), ("AveragePool", 0), ("AveragePool", 1)])
def test_same_size_3x3_pool_blocks_of_planes_match_the_numpy_path(monkeypatch, block, op, include_pad):
    """``same3_planes`` folds blocks of planes in one pass each and then redoes every plane's
    border rows and columns: with blocks of 1, 2-3, 6 and 10 planes of 5x3 (the last one short,
    NaN and infinities at plane borders, where a pass reads the neighbouring plane), the same
    bits as the numpy path."""
    from epoxy_ep_cpu.jit import kernels_pool

    monkeypatch.setattr(kernels_pool, "SAME3_BLOCK_ELEMENTS", block)
    calls = _same3_calls(monkeypatch)
    x = _x(block, (2, 13, 5, 3), np.float32)
    x[0, 1, 0, :] = np.nan
    x[0, 2, 4, 1] = np.inf
    x[0, 3, 0, 2] = -np.inf
    x[1, 4, :, 0] = np.nan
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], **({} if include_pad is None else
                                                              {"count_include_pad": include_pad})}
    case = one_node(op, [x], attrs, 22)
    on, off = run_cpu(case, True), run_cpu(case, False)
    assert calls == [1]
    np.testing.assert_array_equal(on[0].view(np.uint8), off[0].view(np.uint8))


def test_same_size_3x3_pools_nan_and_infinities(monkeypatch):
    calls = _same3_calls(monkeypatch)
    x = _x(21, (1, 2, 9, 9), np.float32)
    x[0, 0, 4, 4] = np.nan
    x[0, 0, 0, :3] = np.nan
    x[0, 1, 3, :] = np.inf
    x[0, 1, 6, 2] = -np.inf
    for op in ("MaxPool", "AveragePool"):
        case = one_node(op, [x], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, 22)
        close(run_cpu(case, True), run_cpu(case, False), 0, 0)
    assert len(calls) == 2


_PARALLEL = [(*c, "kernels_pool_rows", "rows_planes") for c in CASES[:3]] + [
    ((1, 3, 10, 10), {"kernel_shape": [3, 3], "strides": [2, 2], "dilations": [2, 2]}, "kernels_pool",
     "pool2d_planes"),
    ((2, 5, 12, 10), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, "kernels_pool", "same3_planes")]  # whole planes


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize(("shape", "attrs", "module", "kernel"), _PARALLEL, ids=_ids(_PARALLEL))
def test_shares_of_planes_match_one_thread(monkeypatch, op, shape, attrs, module, kernel):
    """Inputs big enough for two threads split their planes in two shares (``threads.Split``,
    on the native pool where it runs): forced here (grain 1), they must give the one-thread
    kernel's values exactly."""
    import importlib

    from epoxy_ep_cpu.jit import threads

    compiled = importlib.import_module(f"epoxy_ep_cpu.jit.{module}")
    case = one_node(op, [_x(11, shape, np.float32)], attrs, 22)
    serial = run_cpu(case, True, jit_threads=1)
    monkeypatch.setattr(threads, "SHARE_GRAIN", 1)
    monkeypatch.setattr(threads, "GRAIN", 1)
    real, calls = threads.Split, []

    def split(kernel_, fn, args, total, count):  # type: ignore[no-untyped-def]
        calls.append((kernel_.__name__.startswith(kernel) and kernel_.__module__ == compiled.__name__, count))
        return real(kernel_, fn, args, total, count)

    monkeypatch.setattr(threads, "Split", split)
    close(run_cpu(case, True, jit_threads=2), serial, 0, 0)
    assert calls == [(True, 2)]


def test_routing_of_unpadded_strided_pools_over_small_planes():
    """Measured (use_jit_pool's docstring): numpy's strided slices beat the general kernel on
    many small planes without padding (squeezenet's [256, 27, 27] s2 MaxPool), the row-buffer
    kernel beats both: such pools run compiled only where the row kernel takes them."""
    from epoxy.contract import NodeSpec
    from epoxy_ep_cpu.ops import pool

    def routed(shape, ceil, rows_fit):
        attrs = {"kernel_shape": (3, 3), "strides": (2, 2), "ceil_mode": ceil}
        a = pool._PoolAttrs(NodeSpec(0, "p", "MaxPool", "", 17, ("x",), ("y",), attrs, (), ()))
        x = np.zeros(shape, np.float32)
        _, begin, end, extra = a.geometry(x)
        return pool.use_jit_pool(x, a, begin, end, extra, rows_fit)

    assert not routed((1, 256, 27, 27), 0, False) and not routed((1, 512, 13, 13), 0, False)
    assert routed((1, 256, 27, 27), 0, True) and routed((1, 512, 13, 13), 0, True)
    assert routed((1, 256, 26, 26), 1, False)  # ceil_mode pads: the general kernel
    assert routed((1, 64, 111, 111), 0, False) and routed((1, 8, 32, 32), 0, False)  # large planes, small tensors


@pytest.mark.parametrize(("kernel", "strides", "dilations", "begin", "in_sp", "out_sp", "fits"), [
    ((3, 3), (2, 2), (1, 1), (0, 0), (27, 27), (13, 13), True),
    ((3, 3), (2, 2), (1, 1), (1, 1), (112, 112), (56, 56), True),
    ((2, 2), (2, 2), (1, 1), (0, 0), (7, 7), (4, 4), True),  # ceil mode: the last window half outside
    ((3, 3), (2, 2), (2, 2), (0, 0), (12, 12), (4, 4), False),  # dilated
    ((2, 2), (2, 2), (1, 1), (2, 0), (6, 6), (4, 3), False),  # a pad as large as the window
    ((2, 2), (3, 3), (1, 1), (1, 1), (4, 4), (3, 3), False),  # the last window wholly in the padding
])
def test_row_kernel_fits_only_windows_that_reach_the_input(kernel, strides, dilations, begin, in_sp, out_sp, fits):
    from epoxy_ep_cpu.jit import kernels_pool_rows

    assert kernels_pool_rows.fits(kernel, strides, dilations, begin, in_sp, out_sp) is fits


# (x shape, attributes) of the row-buffer kernel: every branch of its plane loops (3, 2 and 1
# window rows; 3-, 2- and 5-wide windows; strides 1, 2, 3; pads; ceil mode; batch 2)
ROWS = [
    ((2, 3, 13, 11), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 4, 12, 12), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 3, 9, 10), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 0, 0, 1], "ceil_mode": 1}),
    ((1, 2, 16, 16), {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [0, 1, 0, 1]}),
    ((1, 2, 11, 11), {"kernel_shape": [5, 5], "strides": [3, 3], "pads": [2, 2, 2, 2]}),
    ((1, 2, 7, 7), {"kernel_shape": [3, 2], "strides": [1, 1]}),
    ((1, 3, 5, 17), {"kernel_shape": [3, 3], "strides": [2, 1], "pads": [0, 1, 1, 1]}),
    # rows of SPLIT_MIN_OUTPUTS outputs and more: the stride-2 max splits each folded row into
    # its even and odd entries first (3- and 2-wide windows, an odd width, ceil mode)
    ((1, 2, 112, 112), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 9, 131), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 1, 0, 0], "ceil_mode": 1}),
    ((2, 2, 7, 101), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    # rows of up to 16 outputs are folded in registers (``simd.max_s2_row``: 16 at the edge, its
    # 33 entries), longer ones up to 64 columns in masked 16-lane steps (``max3_rows``)
    ((1, 2, 6, 33), {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ((1, 2, 6, 35), {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ((1, 3, 8, 40), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    ((2, 2, 5, 34), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 3, 31), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 0, 0]}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "attrs"), ROWS, ids=_ids(ROWS))
@pytest.mark.parametrize(("op", "include_pad"), [("MaxPool", None), ("AveragePool", 0), ("AveragePool", 1)])
@pytest.mark.parametrize("specials", [False, True])
def test_row_kernel_matches_the_numpy_path_bit_for_bit(monkeypatch, shape, attrs, op, include_pad, dtype, specials):
    """The numpy path's values, and its bits but for the sign of a zero (as everywhere in
    this file: numpy's fmax of -0 and +0 returns either), on magnitudes down to the
    subnormals, with zeros of both signs; with ``specials`` some planes hold NaN or
    infinities (MaxPool's NaN-aware loops, and an infinity's false alarm in the NaN scan)
    and others none (the plain max)."""
    calls = _spy_calls(monkeypatch)
    rng = np.random.default_rng(sum(shape) + len(attrs))
    x = (rng.standard_normal(shape) * rng.choice([1.0, 1e-38, 1e-43, 3e37], size=shape)).astype(dtype)
    x[rng.random(shape) < 0.1] = 0.0
    x[rng.random(shape) < 0.1] = -0.0
    if specials:
        x[0, 0, 1, 1] = np.nan
        x[0, 0, 0, :] = np.nan  # a whole first row
        x[0, 1, 2, 0] = np.inf
        x[-1, -1, -1, -1] = -np.inf
    extra = {} if include_pad is None else {"count_include_pad": include_pad}
    case = one_node(op, [x], {**attrs, **extra}, 22)
    on, off = run_cpu(case, True), run_cpu(case, False)
    assert calls == ["RowsPoolCall"]
    np.testing.assert_array_equal(on[0], off[0])  # NaN where NaN
    nonzero = off[0] != 0
    np.testing.assert_array_equal(on[0][nonzero].view(np.uint8), off[0][nonzero].view(np.uint8))


def _batch_axis_pool(op: str, attrs: dict) -> bytes:
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3, 6, 6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_each_input_shape_prepares_one_call(monkeypatch, op):
    """A shape's first run prepares its call (geometry, divisors, thread count, overload); its
    later runs reuse it, and each batch size of a dynamic axis gets its own, all equal to the
    numpy path's values."""
    import epoxy
    from epoxy_ep_cpu.jit import kernels_pool

    made: list[tuple[int, ...]] = []
    real_init = kernels_pool.rows.RowsPoolCall.__init__

    def counting_init(self, shape, *args):
        made.append(shape)
        real_init(self, shape, *args)

    monkeypatch.setattr(kernels_pool.rows.RowsPoolCall, "__init__", counting_init)
    model = _batch_axis_pool(op, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})
    on = epoxy.InferenceSession(model, providers=[("cpu", {"jit": True})])
    off = epoxy.InferenceSession(model, providers=[("cpu", {"jit": False})])
    for i, batch in enumerate((1, 1, 2, 2, 1)):
        x = _x(20 + i, (batch, 3, 12, 12), np.float32)
        close(on.run(None, {"x": x}), off.run(None, {"x": x}), 1e-6, 0)
    assert made == [(1, 3, 12, 12), (2, 3, 12, 12)]


def test_row_kernel_plane_helpers_compile_only_inside_the_share_kernel(monkeypatch):
    """MaxPool's per-plane helpers (both the stride-2 and the general row loop) are inlined at
    numba IR level into ``rows_planes_max``: compiled on their own too, they cost a cold first
    run ~1 s more (bench/README session 31)."""
    from epoxy_ep_cpu.jit import kernels_pool_rows as rows

    calls = _spy_calls(monkeypatch)
    x = _x(7, (1, 2, 13, 13), np.float32)
    x[0, 1, 2, 2] = np.nan  # one plane on the NaN-aware general loop, the other on the stride-2 one
    case = one_node("MaxPool", [x], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 22)
    np.testing.assert_array_equal(run_cpu(case, True)[0], run_cpu(case, False)[0])
    assert calls == ["RowsPoolCall"]
    for helper in (rows._plane_max, rows._plane_max_s2, rows._max_rows, rows._max_columns):
        # declared so, and never compiled alone (a cached share kernel compiles nothing at all)
        assert helper.targetoptions.get("inline") == "always", helper.__name__
        assert not helper.overloads, helper.__name__


#: (x shape, attributes, the count_include_pad values for which it is the whole map):
#: AveragePools whose one window averages exactly the whole map run GlobalAveragePool's kernel;
#: the near misses keep the windowed paths
WHOLE_MAP = [
    ((1, 64, 7, 7), {"kernel_shape": [7, 7]}, {0, 1}),  # resnet50's
    ((2, 3, 5, 6), {"kernel_shape": [5, 6], "strides": [3, 2], "ceil_mode": 1}, {0, 1}),
    ((1, 3, 9), {"kernel_shape": [9]}, {0, 1}),  # 1-D, lifted to 2-D
    ((1, 16, 6, 6), {"kernel_shape": [7, 7], "pads": [0, 0, 1, 1]}, {0}),  # inception_v1's: the pad not counted
    ((1, 4, 7, 7), {"kernel_shape": [7, 7], "pads": [1, 1, 1, 1]}, set()),
    ((1, 4, 7, 7), {"kernel_shape": [6, 7]}, set()),
    ((1, 4, 7, 7), {"kernel_shape": [7, 7], "auto_pad": "SAME_UPPER"}, set()),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "attrs", "whole"), WHOLE_MAP, ids=[str(c[:2]) for c in WHOLE_MAP])
@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool_over_the_whole_map_is_the_global_mean(monkeypatch, shape, attrs, whole, dtype, include_pad):
    from epoxy_ep_cpu.jit import kernels_pool

    means: list[tuple[int, ...]] = []
    real = kernels_pool.run_global_avg

    def spy(x, nthreads):  # type: ignore[no-untyped-def]
        means.append(x.shape)
        return real(x, nthreads)

    monkeypatch.setattr(kernels_pool, "run_global_avg", spy)
    x = _x(sum(shape) + 5, shape, dtype)
    case = one_node("AveragePool", [x], {**attrs, "count_include_pad": include_pad}, 22)
    on, off, ref = run_cpu(case, True), run_cpu(case, False), run_reference(case)
    assert bool(means) == (include_pad in whole)
    close(on, off, _TIGHT[dtype], _TIGHT[dtype])
    close(on, ref, 1e-5, 1e-6)


@pytest.mark.parametrize("route", ["loops", "lanes", "registers"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint8])
def test_stride_two_max_pool_rows_fold_alike_on_every_route(monkeypatch, route, dtype):
    """The stride-2 max pool's three ways of folding a row (plain loops; masked 16-lane steps;
    the whole row in registers) forced in turn on the same inputs (pads, ceil mode, 2- and
    3-wide windows): each gives the numpy path's values, codes included."""
    from epoxy_ep_cpu.jit import kernels_pool_rows

    limits = {"loops": (0, 0), "lanes": (1 << 20, 0), "registers": (0, 16)}[route]
    monkeypatch.setattr(kernels_pool_rows, "LANE_ROWS_MAX_COLUMNS", limits[0])
    monkeypatch.setattr(kernels_pool_rows, "REGISTER_ROWS_MAX_OUTPUTS", limits[1])
    routes: list[int] = []
    real = kernels_pool_rows.lanes_route
    monkeypatch.setattr(kernels_pool_rows, "lanes_route", lambda ow, cols: routes.append(real(ow, cols)) or routes[-1])
    for shape, attrs in [((1, 3, 9, 14), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1]}),
                         ((2, 2, 7, 27), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                          "ceil_mode": 1}),
                         ((1, 2, 6, 30), {"kernel_shape": [2, 2], "strides": [2, 2]})]:
        x = _x(len(routes) + 3, shape, np.float32) * 40
        x = x.astype(dtype)
        case = one_node("MaxPool", [x], attrs, 22)
        np.testing.assert_array_equal(run_cpu(case, True)[0], run_cpu(case, False)[0])
    want = {"loops": kernels_pool_rows.LOOP_ROWS, "lanes": kernels_pool_rows.LANE_ROWS,
            "registers": kernels_pool_rows.REGISTER_ROWS}[route]
    assert routes and set(routes) == {want}
