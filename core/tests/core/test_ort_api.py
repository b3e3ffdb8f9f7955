"""onnxruntime's Python API on the core (test-only providers): options, run options and
terminate, session methods, module functions, exception classes, feeds."""

from __future__ import annotations

import json
import threading
import time
import warnings

import numpy as np
import onnx
import pytest
from models import chain
from onnx import TensorProto, helper, numpy_helper

import epoxy
import epoxy as ort
from epoxy import InferenceSession, SessionOptions
from epoxy.capi import onnxruntime_pybind11_state as C
from epoxy.errors import RunTerminatedError

X = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)


def _session(make_registry, model=None, **kw):
    return InferenceSession(model if model is not None else chain(["Relu"]), providers=["cpu"],
                            registry=make_registry(), **kw)


# -- correctness regressions -----------------------------------------------------------------
def _identity_model(extra_output: bool = False) -> onnx.ModelProto:
    """x is also a graph output (pass-through); y is a view-producing op's result."""
    outputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
               helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]
    nodes = [helper.make_node("Identity", ["x"], ["y"])]
    inits = []
    if extra_output:
        inits = [numpy_helper.from_array(np.ones((2, 3), np.float32), "w")]
        nodes.append(helper.make_node("Identity", ["w"], ["wout"]))
        outputs.append(helper.make_tensor_value_info("wout", TensorProto.FLOAT, [2, 3]))
    graph = helper.make_graph(nodes, "passthrough", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("level", ["disable", "basic", "extended", "all"])
def test_pass_through_outputs_are_new_arrays(make_registry, level):
    session = _session(make_registry, _identity_model(extra_output=True),
                       sess_options=SessionOptions(graph_optimization_level=level))
    x = X.copy()
    passed, y, w = session.run(None, {"x": x})
    assert not np.shares_memory(passed, x) and not np.shares_memory(y, x)
    x[:] = 100  # the caller reuses its buffer
    np.testing.assert_array_equal(passed, X)
    np.testing.assert_array_equal(y, X)
    w[:] = -7  # writing into an output never reaches the model's weights
    np.testing.assert_array_equal(session.run(None, {"x": X})[2], np.ones((2, 3), np.float32))


def test_run_with_empty_output_names_returns_all(make_registry):
    session = _session(make_registry, _identity_model())
    everything = session.run(None, {"x": X})
    assert len(everything) == 2
    for a, b in zip(session.run([], {"x": X}), everything):
        np.testing.assert_array_equal(a, b)


# -- constructor: onnxruntime's argument order -------------------------------------------------
def test_positional_order_is_onnxruntimes(make_registry):
    options = SessionOptions()
    session = InferenceSession(chain(["Relu"]).SerializeToString(), options, ["cpu"], None, registry=make_registry())
    assert session.get_session_options() is options
    with pytest.raises(epoxy.InvalidArgumentError, match="sess_options must be an epoxy.SessionOptions"):
        InferenceSession(chain(["Relu"]), ["cpu"], registry=make_registry())
    with pytest.raises(TypeError, match="unknown keyword"):
        InferenceSession(chain(["Relu"]), provider=["cpu"], registry=make_registry())


# -- SessionOptions ----------------------------------------------------------------------------
def test_session_options_defaults_and_enums():
    so = SessionOptions()
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL  # fastest, as onnxruntime
    assert so.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert (so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level, so.logid) == (0, 0, -1, "")
    assert so.enable_cpu_mem_arena and so.enable_mem_pattern and so.enable_mem_reuse
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert so.optimization_level == "basic"
    so.graph_optimization_level = "extended"  # epoxy's names still work
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    assert so.parallel
    with pytest.raises(epoxy.InvalidArgumentError, match="graph_optimization_level"):
        so.graph_optimization_level = "max"
    with pytest.raises(epoxy.InvalidArgumentError, match="intra_op_num_threads"):
        so.intra_op_num_threads = -1
    with pytest.raises(epoxy.InvalidArgumentError, match="not offered"):
        so.execution_order = ort.ExecutionOrder.PRIORITY_BASED


def test_unknown_session_option_attribute_is_loud():
    so = SessionOptions()
    with pytest.raises(AttributeError, match="known attributes: .*graph_optimization_level"):
        so.graph_optimisation_level = 1  # typo
    with pytest.raises(AttributeError):
        SessionOptions(enable_magic=True)


def test_option_without_effect_warns():
    so = SessionOptions()
    with pytest.warns(RuntimeWarning, match="use_per_session_threads"):
        so.use_per_session_threads = False


def test_config_entries_known_take_effect_unknown_are_kept_and_listed(make_registry):
    so = SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    assert so.disable_fallback and so.get_session_config_entry("session.disable_cpu_ep_fallback") == "1"
    so = SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    with pytest.warns(RuntimeWarning, match=r"session.intra_op.allow_spinning"):
        session = _session(make_registry, sess_options=so)
    assert any("allow_spinning" in n for n in session.partition_report().notes)
    with pytest.raises(epoxy.InvalidArgumentError, match="not set"):
        so.get_session_config_entry("nope")
    with pytest.raises(epoxy.InvalidArgumentError, match="ONNX models only"):
        so.add_session_config_entry("session.load_model_format", "ORT")


def test_free_dimension_overrides(make_registry):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])])
    graph.input[0].type.tensor_type.shape.dim[1].denotation = "DATA_CHANNEL"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = SessionOptions()
    so.add_free_dimension_override_by_name("batch", 2)
    so.add_free_dimension_override_by_denotation("DATA_CHANNEL", 3)
    session = _session(make_registry, model, sess_options=so)
    assert session.get_inputs()[0].shape == [2, 3]
    assert session.get_outputs()[0].shape == [2, 3]
    with pytest.raises(epoxy.InvalidFeedError, match="dim 0 must be 2"):
        session.run(None, {"x": np.zeros((4, 3), np.float32)})
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"  # caller's proto untouched


def test_add_initializer_replaces_weights(make_registry):
    so = SessionOptions()
    so.add_initializer("c0", np.full((2, 3), 5, np.float32))
    (y,) = _session(make_registry, chain(["Add"]), sess_options=so).run(None, {"x": X})
    np.testing.assert_array_equal(y, X + 5)
    bad = SessionOptions()
    bad.add_initializer("c0", np.zeros((3,), np.float32))
    with pytest.raises(epoxy.InvalidArgumentError, match="expected float32 \\[2, 3\\]"):
        _session(make_registry, chain(["Add"]), sess_options=bad)
    unknown = SessionOptions()
    unknown.add_external_initializers(["nope"], [np.zeros(1, np.float32)])
    with pytest.raises(epoxy.InvalidArgumentError, match="no initializer 'nope'"):
        _session(make_registry, chain(["Add"]), sess_options=unknown)


def test_custom_ops_library_is_a_clear_error():
    with pytest.raises(epoxy.InvalidArgumentError, match="PROVIDER_GUIDE"):
        SessionOptions().register_custom_ops_library("libcustom.so")


def test_optimized_model_filepath_writes_a_loadable_model(make_registry, tmp_path):
    so = SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    _session(make_registry, chain(["Identity", "Relu"]), sess_options=so)
    written = onnx.load(str(tmp_path / "opt.onnx"))
    onnx.checker.check_model(written)
    assert [n.op_type for n in written.graph.node] == ["Relu"]  # Identity eliminated
    (y,) = _session(make_registry, written).run(None, {"x": X})
    np.testing.assert_array_equal(y, np.maximum(X, 0))


# -- RunOptions and terminate -------------------------------------------------------------------
def _long_loop_model() -> onnx.ModelProto:
    """acc += 1, ``n`` times (a Loop the core runs; each iteration checks terminate)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("Add", ["acc", "one"], ["acc_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [1])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "acc0"], ["acc"], body=body)], "loop",
        [helper.make_tensor_value_info("n", TensorProto.INT64, []),
         helper.make_tensor_value_info("acc0", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("acc", TensorProto.FLOAT, [1])],
        initializer=[numpy_helper.from_array(np.ones(1, np.float32), "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_terminate_from_another_thread_stops_the_run_and_session_stays_usable(make_registry):
    session = _session(make_registry, _long_loop_model())
    options = ort.RunOptions()
    options.run_tag = "long"
    outcome: list[BaseException] = []

    def long_run() -> None:
        try:
            session.run(None, {"n": np.array(10**9, np.int64), "acc0": np.zeros(1, np.float32)}, options)
        except BaseException as exc:  # noqa: BLE001 - inspected below
            outcome.append(exc)

    worker = threading.Thread(target=long_run)
    worker.start()
    time.sleep(0.3)
    options.terminate = True
    worker.join(timeout=30)
    assert not worker.is_alive(), "terminate did not stop the run"
    assert len(outcome) == 1 and isinstance(outcome[0], RunTerminatedError)
    assert isinstance(outcome[0], C.Fail)  # what onnxruntime code catches
    with pytest.raises(RunTerminatedError, match="before it started"):
        session.run(None, {"n": np.array(3, np.int64), "acc0": np.zeros(1, np.float32)}, options)
    options.terminate = False
    (acc,) = session.run(None, {"n": np.array(3, np.int64), "acc0": np.zeros(1, np.float32)}, options)
    np.testing.assert_array_equal(acc, [3.0])


def test_terminate_stops_a_plain_chain_in_parallel_mode_too(make_registry):
    so = SessionOptions(execution_mode=ort.ExecutionMode.ORT_PARALLEL)
    session = _session(make_registry, _long_loop_model(), sess_options=so)
    options = ort.RunOptions()
    timer = threading.Timer(0.3, lambda: setattr(options, "terminate", True))
    timer.start()
    with pytest.raises(RunTerminatedError):
        session.run(None, {"n": np.array(10**9, np.int64), "acc0": np.zeros(1, np.float32)}, options)
    timer.join()


def test_run_options_attributes_and_config():
    options = ort.RunOptions()
    options.logid, options.log_severity_level, options.run_tag = "a", 3, "tag"
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    assert options.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
    assert options.unused_config_keys() == ["memory.enable_memory_arena_shrinkage"]
    with pytest.raises(AttributeError, match="known attributes"):
        options.terminated = True


def test_unused_run_config_entry_warns(make_registry):
    session = _session(make_registry)
    options = ort.RunOptions()
    options.add_run_config_entry("gpu_graph_id", "1")
    with pytest.warns(RuntimeWarning, match="gpu_graph_id"):
        session.run(None, {"x": X}, options)


# -- session methods ------------------------------------------------------------------------------
def test_model_metadata(make_registry):
    model = chain(["Relu"])
    model.producer_name, model.domain, model.model_version, model.doc_string = "pytorch", "ai.test", 7, "a model"
    model.graph.doc_string = "the graph"
    onnx.helper.set_model_props(model, {"author": "me", "license": "mit"})
    meta = _session(make_registry, model).get_modelmeta()
    assert (meta.producer_name, meta.graph_name, meta.graph_description, meta.domain, meta.description,
            meta.version) == ("pytorch", "chain", "the graph", "ai.test", "a model", 7)
    assert meta.custom_metadata_map == {"author": "me", "license": "mit"}


def test_set_providers_rebuilds_and_fallback_switches(make_registry):
    from fakes import Factory, mini_factory

    registry = make_registry(mini_factory("acc", priority=5))
    session = InferenceSession(chain(["Relu"]), providers=["acc"], registry=registry)
    assert session.get_providers() == ["acc", "cpu"]
    session.set_providers(["cpu"])
    assert session.get_providers() == ["cpu"]
    np.testing.assert_array_equal(session.run(None, {"x": X})[0], np.maximum(X, 0))
    session.disable_fallback()
    session.set_providers(["acc"])
    assert session.get_providers() == ["acc"]  # cpu no longer appended
    session.enable_fallback()
    session.set_providers(["acc"])
    assert session.get_providers() == ["acc", "cpu"]
    with pytest.raises(epoxy.InvalidArgumentError):
        session.set_providers(None)
    assert Factory  # the fakes module offers both


def test_provider_options_are_reported(make_registry):
    session = _session(make_registry)
    assert session.get_provider_options() == {"cpu": {}}


def test_run_async_calls_back_with_results_and_errors(make_registry):
    session = _session(make_registry)
    done = threading.Event()
    got: list = []

    def callback(results, user_data, error):
        got.append((results, user_data, error))
        if len(got) == 2:
            done.set()

    session.run_async(None, {"x": X}, callback, "first")
    session.run_async(None, {"x": np.zeros((5,), np.float32)}, callback, "second")
    assert done.wait(10)
    by_name = {user: (res, err) for res, user, err in got}
    np.testing.assert_array_equal(by_name["first"][0][0], np.maximum(X, 0))
    assert by_name["first"][1] == ""
    assert by_name["second"][0] == [] and "input 'x'" in by_name["second"][1]


def test_profiling_start_time_and_prefix(make_registry, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = time.time_ns()
    so = SessionOptions(enable_profiling=True)
    so.profile_file_prefix = "myprof"
    session = _session(make_registry, sess_options=so)
    assert before <= session.get_profiling_start_time_ns() <= time.time_ns()
    session.run(None, {"x": X})
    name = session.end_profiling()
    assert name.startswith("myprof") and name.endswith(".json")
    assert any(e["cat"] == "Node" for e in json.loads((tmp_path / name).read_text()))


# -- module functions ---------------------------------------------------------------------------
def test_module_functions():
    assert ort.get_device() in ("CPU", "GPU")
    assert ort.get_version_string() == ort.__version__ == ort.version
    assert ort.get_version_string() in ort.get_build_info()
    ort.set_default_logger_severity(3)
    import logging

    assert logging.getLogger("epoxy").level == logging.ERROR
    ort.set_default_logger_severity(2)
    with pytest.raises(ValueError):
        ort.set_default_logger_severity(9)


def test_set_seed_repeats_unseeded_random_draws():
    from epoxy.kit.random import unseeded_generator

    ort.set_seed(7)
    first = [unseeded_generator().random() for _ in range(3)]
    ort.set_seed(7)
    assert [unseeded_generator().random() for _ in range(3)] == first
    ort.set_seed(None)


# -- exception classes -------------------------------------------------------------------------
def test_errors_are_onnxruntimes_classes(make_registry, tmp_path):
    session = _session(make_registry)
    with pytest.raises(C.InvalidArgument):
        session.run(None, {"x": np.zeros((2, 3), np.float64)})
    with pytest.raises(C.InvalidArgument):
        session.run(["nope"], {"x": X})
    with pytest.raises(C.NoSuchFile):
        _session(make_registry, str(tmp_path / "missing.onnx"))
    with pytest.raises(C.InvalidProtobuf):
        _session(make_registry, b"\x08\x07\x12\x03abc\xff\xff")
    with pytest.raises(C.NotImplemented):
        _session(make_registry, chain(["Softmax"]))
    for cls in (C.Fail, C.InvalidArgument, C.NoSuchFile, C.InvalidProtobuf, C.NotImplemented, C.InvalidGraph,
                C.EPFail, C.RuntimeException):
        assert issubclass(cls, epoxy.EpoxyError)
    assert issubclass(epoxy.KernelError, C.RuntimeException) and issubclass(epoxy.ProviderError, C.EPFail)


# -- feeds as onnxruntime accepts them -------------------------------------------------------------
def test_python_lists_and_scalars_are_converted(make_registry):
    session = _session(make_registry)
    (y,) = session.run(None, {"x": X.tolist()})
    np.testing.assert_array_equal(y, np.maximum(X, 0))
    int_model = chain(["Identity"])
    int_model.graph.input[0].type.tensor_type.elem_type = TensorProto.INT32
    int_model.graph.output[0].type.tensor_type.elem_type = TensorProto.INT32
    ints = _session(make_registry, int_model)
    (y,) = ints.run(None, {"x": [[1, 2, 3], [4, 5, 6]]})
    assert y.dtype == np.int32
    # onnxruntime truncates 1.5 to 1 silently; epoxy refuses a conversion that changes values
    with pytest.raises(epoxy.InvalidFeedError, match="cannot represent exactly"):
        ints.run(None, {"x": [[1.5, 2, 3], [4, 5, 6]]})
    with pytest.raises(epoxy.InvalidFeedError, match="cannot represent exactly"):
        ints.run(None, {"x": [[2**40, 2, 3], [4, 5, 6]]})


def _string_model() -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Identity", ["s"], ["t"])], "strings",
                              [helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
                              [helper.make_tensor_value_info("t", TensorProto.STRING, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("feed", [["a", "é"], np.array(["a", "é"]), np.array(["a", "é"], dtype=object),
                                  np.array([b"a", "é".encode()]), [b"a", "é".encode()]])
def test_string_feeds(make_registry, feed):
    session = _session(make_registry, _string_model())
    assert session.get_inputs()[0].type == "tensor(string)"
    (t,) = session.run(None, {"s": feed})
    assert t.dtype == object and t.tolist() == ["a", "é"]


def test_non_utf8_bytes_are_refused_with_the_input_named(make_registry):
    session = _session(make_registry, _string_model())
    with pytest.raises(epoxy.InvalidFeedError, match="input 's': bytes that are not UTF-8"):
        session.run(None, {"s": np.array([b"\xbe", b"a"])})


def test_type_strings_are_onnxruntimes(make_registry):
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "types",
        [helper.make_value_info("x", helper.make_sequence_type_proto(
            helper.make_tensor_type_proto(TensorProto.FLOAT, None)))],
        [helper.make_value_info("y", helper.make_sequence_type_proto(
            helper.make_tensor_type_proto(TensorProto.FLOAT, None)))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = _session(make_registry, model)
    assert session.get_inputs()[0].type == "seq(tensor(float))"


def test_session_log_settings_take_effect(make_registry, caplog):
    so = SessionOptions(logid="mine", log_severity_level=0, log_verbosity_level=1)
    with caplog.at_level(0, logger="epoxy"):
        session = _session(make_registry, chain(["Identity", "Relu"]), sess_options=so)
        options = ort.RunOptions()
        options.run_tag, options.log_severity_level = "tagged", 0
        session.run(None, {"x": X}, options)
    records = [r for r in caplog.records if r.name == "epoxy.session.mine"]
    assert any("session created" in r.getMessage() for r in records)
    assert any("tagged" in r.getMessage() for r in records)
    assert any(r.getMessage().startswith("run of ['y'] took") for r in records)  # verbosity > 0


def test_ortvalue_feeds_in_plain_run(make_registry):
    session = _session(make_registry)
    (y,) = session.run(None, {"x": ort.OrtValue.ortvalue_from_numpy(X)})
    np.testing.assert_array_equal(y, np.maximum(X, 0))


def test_run_options_derived_for_bindings_share_terminate():
    options = ort.RunOptions()
    options.run_tag = "t"
    derived = options.with_output_devices({"y": "dev"})
    assert derived.as_dict() == {"output_device": {"y": "dev"}} and derived.run_tag == "t"
    options.terminate = True
    assert derived.terminate


def test_onnxruntime_device_id_option_selects_the_device(make_registry):
    session = InferenceSession(chain(["Relu"]), providers=[("cpu", {"device_id": "0"})], registry=make_registry())
    assert session.get_providers() == ["cpu"]
    with pytest.raises(epoxy.InvalidArgumentError, match="out of range"):
        InferenceSession(chain(["Relu"]), providers=["cpu"], provider_options=[{"device_id": 3}],
                         registry=make_registry())
    with pytest.raises(epoxy.InvalidArgumentError, match="not both"):
        InferenceSession(chain(["Relu"]), providers=[("cpu", {"device_id": 0, "device_index": 0})],
                         registry=make_registry())


def test_provider_options_dict_keyed_by_name_or_alias(make_registry):
    session = InferenceSession(chain(["Relu"]), providers=["cpu"], provider_options={"cpu": {"device_id": 0}},
                               registry=make_registry())
    assert session.get_providers() == ["cpu"]
    with pytest.raises(epoxy.InvalidArgumentError, match="provider_options names 'tpu'"):
        InferenceSession(chain(["Relu"]), providers=["cpu"], provider_options={"tpu": {}}, registry=make_registry())


def test_output_dtype_other_than_declared_is_loud(make_registry):
    """A kernel returning float64 for an output the model declares float (what skl2onnx's
    float64 tree regressors look like) warns once, naming the output."""
    from fakes import Factory

    from epoxy.kit import KernelProvider, KernelRegistry

    wide = KernelRegistry()
    wide.register("Relu", (6, 13, 14))(lambda node: lambda x: np.maximum(x, 0).astype(np.float64))
    registry = make_registry(Factory("wide", lambda d, o: KernelProvider("wide", d, wide, o), 10))
    session = InferenceSession(chain(["Relu"]), providers=["wide"], registry=registry)
    assert session.get_outputs()[0].type == "tensor(float)"
    with pytest.warns(RuntimeWarning, match="output 'y' is declared float32 .* returned float64"):
        (y,) = session.run(None, {"x": X})
    assert y.dtype == np.float64
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        session.run(None, {"x": X})  # once per output
    assert any("declared float32" in n for n in session.partition_report().notes)
