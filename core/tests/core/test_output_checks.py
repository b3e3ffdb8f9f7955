"""Output checks: a kernel or compiled group returning the wrong dtype, rank or dim is caught
at the step that produced it, naming node, provider, output, expected and got."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from fakes import MINI_KERNELS, Factory, FuserProvider, fuser_factory
from onnx import TensorProto, helper

from epoxy import InferenceSession, OutputTypeError, SessionOptions
from epoxy.kit import KernelProvider, KernelRegistry
from epoxy.run.output_checks import ENV_CHECK_OUTPUTS


def _model() -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Neg", ["r"], ["y"], name="neg")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _bad_relu_factory(bad) -> Factory:  # noqa: ANN001 - a kernel body
    kernels = KernelRegistry()
    kernels.register("Relu", (1, 6, 13, 14))(lambda node: bad)
    return Factory("bad", lambda d, o: KernelProvider("bad", d, kernels, o), priority=90)


X = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
BAD_KERNELS = {
    "dtype": (lambda x: np.maximum(x, 0).astype(np.float64), "float64[2,3]", "dtype"),
    "rank": (lambda x: np.maximum(x, 0).reshape(6), "float32[6]", "rank"),
    "dim": (lambda x: np.zeros((2, 4), np.float32), "float32[2,4]", "shape"),
    "not a tensor": (lambda x: [1.0, 2.0], "list", "not a tensor"),
}


@pytest.mark.parametrize("case", sorted(BAD_KERNELS))
@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_a_wrong_kernel_output_names_node_provider_expected_and_got(make_registry, case, mode):
    bad, got, why = BAD_KERNELS[case]
    options = SessionOptions(check_outputs=True, execution_mode=mode)
    session = InferenceSession(_model(), options, ["bad", "cpu"], registry=make_registry(_bad_relu_factory(bad)))
    with pytest.raises(OutputTypeError) as info:
        session.run(None, {"x": X})
    error = info.value
    assert (error.node, error.provider, error.output, error.expected, error.got) == (
        "relu",
        "bad",
        "r",
        "float32[2,3]",
        got,
    )
    assert f"({why} differs)" in str(error) and "'relu' (Relu) on provider 'bad'" in str(error)


def test_checks_are_off_by_default_and_the_same_model_runs(make_registry):
    bad = BAD_KERNELS["dtype"][0]
    session = InferenceSession(_model(), providers=["bad", "cpu"], registry=make_registry(_bad_relu_factory(bad)))
    (y,) = session.run(None, {"x": X})  # the wrong dtype flows on: exactly what checks exist to catch
    assert y.dtype == np.float64


@pytest.mark.parametrize("how", ["env", "config"])
def test_checks_turn_on_by_environment_or_config_entry(make_registry, monkeypatch, how):
    options = SessionOptions()
    if how == "env":
        monkeypatch.setenv(ENV_CHECK_OUTPUTS, "1")
    else:
        options.add_session_config_entry("epoxy.check_outputs", "1")
    registry = make_registry(_bad_relu_factory(BAD_KERNELS["dtype"][0]))
    session = InferenceSession(_model(), options, ["bad", "cpu"], registry=registry)
    with pytest.raises(OutputTypeError):
        session.run(None, {"x": X})


def test_correct_outputs_pass_and_unknown_dims_are_not_checked(make_registry):
    model = _model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    session = InferenceSession(model, SessionOptions(check_outputs=True), ["cpu"], registry=make_registry())
    for batch in (1, 5):
        x = np.ones((batch, 3), np.float32)
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], -x)


def test_a_compiled_group_returning_float64_is_caught(make_registry):
    class Float64Fuser(FuserProvider):
        def compile(self, subgraph):  # noqa: ANN001, ANN201
            run = super().compile(subgraph)
            return lambda *a: tuple(np.asarray(v, np.float64) for v in run(*a))

    factory = Factory("fuser", lambda d, o: Float64Fuser(d, [["relu", "neg"]]), 80)
    session = InferenceSession(_model(), SessionOptions(check_outputs=True), ["fuser", "cpu"],
                               registry=make_registry(factory))
    assert session.partition_report().summary()["fuser"] == 2
    with pytest.raises(OutputTypeError) as info:
        session.run(None, {"x": X})
    assert info.value.provider == "fuser" and info.value.op_type == "FusedGroup"
    assert info.value.got == "float64[2,3]"


def test_checks_hold_while_profiling_in_parallel_mode(make_registry):
    options = SessionOptions(check_outputs=True, enable_profiling=True, execution_mode="parallel")
    session = InferenceSession(_model(), options, ["bad", "cpu"],
                               registry=make_registry(_bad_relu_factory(BAD_KERNELS["rank"][0])))
    with pytest.raises(OutputTypeError):
        session.run(None, {"x": X})


def test_profiling_keeps_the_parallel_executor(make_registry):
    """enable_profiling used to switch a parallel session to sequential without a word."""
    import threading

    threads: set[int] = set()
    kernels = KernelRegistry()

    def noting(fn):  # noqa: ANN001, ANN202
        def run(*args):  # noqa: ANN002, ANN202
            threads.add(threading.get_ident())
            return fn(*args)
        return run

    kernels.register("Relu", (1, 6, 13, 14))(lambda node: noting(lambda x: np.maximum(x, 0)))
    factory = Factory("noting", lambda d, o: KernelProvider("noting", d, kernels, o), priority=90)
    options = SessionOptions(enable_profiling=True, execution_mode="parallel")
    session = InferenceSession(_model(), options, ["noting", "cpu"], registry=make_registry(factory))
    session.run(None, {"x": X})
    assert threads and threading.get_ident() not in threads, "the step ran on the caller's thread: not parallel"
    assert any(e["name"] == "relu_kernel_time" for e in session._profiler.trace_events())


def test_a_multi_output_kernel_returning_too_few_values_is_an_error_in_both_executors(make_registry):
    kernels = KernelRegistry()
    kernels.register("Split", (13, 18))(lambda node: lambda x, s=None: (x[:1],))
    factory = Factory("short", lambda d, o: KernelProvider("short", d, kernels, o), priority=90)
    node = helper.make_node("Split", ["x"], ["a", "b"], name="split", axis=0, num_outputs=2)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3]) for n in "ab"])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    for mode in ("sequential", "parallel"):
        session = InferenceSession(model, SessionOptions(execution_mode=mode), ["short"],
                                   registry=make_registry(factory, with_cpu=False))
        with pytest.raises(Exception, match=r"'split'.*a tuple of 1, expected a tuple of 2 outputs"):
            session.run(None, {"x": X})


def test_mini_kernels_stay_clean_under_checks(make_registry):
    """The checks add no false alarms on the core's own test kernels across the fuser path."""
    assert MINI_KERNELS.ops()
    session = InferenceSession(_model(), SessionOptions(check_outputs=True), ["fuser", "cpu"],
                               registry=make_registry(fuser_factory([["relu", "neg"]])))
    np.testing.assert_array_equal(session.run(None, {"x": X})[0], -np.maximum(X, 0))
