"""com.microsoft (and ai.onnx.ml) ops on openvino, against onnxruntime, which defines them.

Every case of contrib_cases.py is one node run with openvino first: the partition report must
put it where the case says (openvino, or cpu with openvino's reason), and the outputs must
match onnxruntime's (a numpy reference where onnxruntime's CPU build lacks the op). Results
are compared at f32: the provider pins INFERENCE_PRECISION_HINT to f32 by default, which on
AVX-512 BF16 CPUs would otherwise be bfloat16.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from contrib_cases import Case, all_cases

import epoxy
import epoxy.errors

ort = pytest.importorskip("onnxruntime")

CASES = all_cases()


def _session(case: Case, providers: list) -> epoxy.InferenceSession:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return epoxy.InferenceSession(case.model(), providers=providers)


def _oracle(case: Case) -> list[np.ndarray]:
    if case.reference is not None:
        return case.reference({k: v for k, v in case.inputs.items() if v is not None})
    inputs = case.oracle if case.oracle is not None else case.inputs
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(case.model(inputs).SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, case.feeds(inputs))


def assert_matches(case: Case, got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (i, g.dtype, w.dtype, g.shape, w.shape)
        if i in case.skip:
            continue
        if case.exact:
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=case.rtol, atol=case.atol,
                                       err_msg=f"output {i}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_case_placement_and_values(case: Case, ov_all: list) -> None:
    try:
        sess = _session(case, ov_all)
    except epoxy.errors.UnsupportedOpError as err:  # declined, and ep-cpu has no kernel for the op
        assert case.expect == "cpu" and "openvino: " in str(err) and case.declined in str(err), str(err)
        return
    (decision,) = sess.partition_report().nodes
    assert decision.provider == case.expect, dict(decision.declined)
    if case.expect == "cpu":
        assert case.declined in dict(decision.declined)["openvino"]
    assert_matches(case, sess.run(None, case.feeds()), _oracle(case))


def test_every_claimed_op_has_a_case_on_openvino() -> None:
    from epoxy_ep_openvino import support

    ran = {(c.domain, c.op) for c in CASES if c.expect == "openvino"}
    claimed = {(support.MS, op) for op in support.MS_OPS} | {(support.ML, op) for op in support.ML_OPS}
    claimed |= {("", op) for op in support.ORT_ONNX_OPS}
    assert claimed <= ran, sorted(claimed - ran)
    declined = {(c.domain, c.op) for c in CASES if c.expect != "openvino"}
    assert {(support.MS, op) for op in support.MS_DECLINED} <= declined
