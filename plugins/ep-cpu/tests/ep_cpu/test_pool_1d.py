"""1-D MaxPool and AveragePool run as 2-D pools of height 1 (``ops/pool._lifted_1d``): the
same values as the numpy path (jit off), the ONNX reference and onnxruntime over strides,
dilations, pads, auto_pad, ceil_mode and count_include_pad; MaxPool's Indices output keeps the
general path; a wrong input rank is a clear error."""

from __future__ import annotations

import numpy as np
import pytest
from _hostile import one_node, run_onnxruntime, run_reference
from _jit_cases import close, run_cpu

import epoxy

CASES = [
    ("MaxPool", (1, 32, 40), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ("MaxPool", (2, 5, 23), {"kernel_shape": [4], "dilations": [2], "pads": [2, 1]}),
    ("MaxPool", (1, 3, 10), {"kernel_shape": [3], "strides": [2], "ceil_mode": 1}),
    ("MaxPool", (1, 4, 9), {"kernel_shape": [2], "auto_pad": "SAME_UPPER", "strides": [2]}),
    ("AveragePool", (1, 32, 40), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ("AveragePool", (3, 4, 17), {"kernel_shape": [5], "pads": [2, 2], "count_include_pad": 1}),
    ("AveragePool", (1, 6, 11), {"kernel_shape": [3], "strides": [2], "ceil_mode": 1, "pads": [1, 0]}),
    ("AveragePool", (1, 4, 10), {"kernel_shape": [4], "auto_pad": "SAME_LOWER"}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("op", "shape", "attrs"), CASES, ids=[f"{c[0]}-{c[1]}-{sorted(c[2].items())}" for c in CASES])
def test_matches_numpy_path_reference_and_onnxruntime(op, shape, attrs, dtype):
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)
    case = one_node(op, [x], attrs, 19)
    on, off, ref = run_cpu(case, True, runs=3), run_cpu(case, False, runs=2), run_reference(case)
    close(on, ref, 1e-6, 1e-6)
    close(off, ref, 1e-6, 1e-6)
    if dtype == np.float32:
        close(on, run_onnxruntime(case), 1e-6, 1e-6)


def test_runs_on_the_compiled_2d_pool(monkeypatch):
    """With jit on, a strided 1-D MaxPool goes through the 2-D pool's prepared call."""
    pytest.importorskip("numba")
    from epoxy_ep_cpu.ops import pool

    seen: list[tuple[int, ...]] = []
    real = pool._JitPool.prepared

    def spy(self, x, *args):
        call = real(self, x, *args)
        if call is not None:
            seen.append(x.shape)
        return call

    monkeypatch.setattr(pool._JitPool, "prepared", spy)
    x = np.random.default_rng(0).standard_normal((1, 32, 40)).astype(np.float32)
    case = one_node("MaxPool", [x], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, 12)
    close(run_cpu(case, True, runs=2), run_reference(case), 0, 0)
    assert seen and set(seen) == {(1, 32, 1, 40)}


def test_max_pool_indices_keep_the_general_path():
    x = np.random.default_rng(1).standard_normal((2, 3, 11)).astype(np.float32)
    case = one_node("MaxPool", [x], {"kernel_shape": [3], "strides": [2]}, 12, n_out=2)
    on, ref = run_cpu(case, True), run_reference(case)
    close(on, ref, 0, 0)


def test_wrong_input_rank_is_a_clear_error():
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    sess = epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"])
    with pytest.raises(epoxy.EpoxyError, match=r"input rank 4 does not match kernel_shape \[3\]"):
        sess.run(None, {"x": np.ones((1, 3, 5, 5), np.float32)})
    np.testing.assert_array_equal(sess.run(None, {"x": np.ones((1, 3, 5), np.float32)})[0], np.ones((1, 3, 3)))
