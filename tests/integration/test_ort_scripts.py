"""onnxruntime user code, unchanged but for the import line, gives what onnxruntime gives.

Each script below is ordinary onnxruntime code (the kind its docs, tutorials and users
write). It runs twice in a fresh namespace: once as written under onnxruntime, once with
its import lines rewritten to epoxy (``import onnxruntime as ort`` -> ``import epoxy as
ort``, ``from onnxruntime.capi.onnxruntime_pybind11_state import Fail`` -> ``from
epoxy.capi...``); nothing else changes. A script leaves what it observed in ``RESULT`` and
the two dicts must agree (arrays by value, dtype and shape; everything else equal).

A script that fails on epoxy because of a bug or a missing piece is marked
``xfail(strict=True)`` with the cause, so it turns into a failure the day it passes and
must be moved back. Where epoxy differs on purpose (docs/ORT_COMPAT.md, "Deliberate
differences"), a test at the end asserts epoxy's documented behaviour instead.

The models are built here with onnx.helper (fixed seeds) and saved to a temporary folder;
scripts find them in ``MODELS`` (name -> path).
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import textwrap
import types
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime")

F, I64, S, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.STRING, TensorProto.BOOL


# -- models ------------------------------------------------------------------------------------
def _model(graph: onnx.GraphProto, opset: int = 17, **fields: Any) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **fields)
    model.ir_version = 8  # every onnxruntime release since 1.10 reads it
    return model


def _mlp() -> onnx.ModelProto:
    """x[batch, 4] -> MatMul/Add/Relu -> MatMul/Add -> logits, Softmax -> probs."""
    rng = np.random.default_rng(0)
    weights = {"w1": rng.standard_normal((4, 8)), "b1": rng.standard_normal(8),
               "w2": rng.standard_normal((8, 3)), "b2": rng.standard_normal(3)}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"], name="dense1"),
             helper.make_node("Add", ["h0", "b1"], ["h1"], name="bias1"),
             helper.make_node("Relu", ["h1"], ["h"], name="relu"),
             helper.make_node("MatMul", ["h", "w2"], ["l0"], name="dense2"),
             helper.make_node("Add", ["l0", "b2"], ["logits"], name="bias2"),
             helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1)]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", F, ["batch", 4])],
        [
            helper.make_tensor_value_info("logits", F, ["batch", 3]),
            helper.make_tensor_value_info("probs", F, ["batch", 3]),
        ],
        initializer=[numpy_helper.from_array(w.astype(np.float32), n) for n, w in weights.items()],
    )
    graph.input[0].type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    return _model(graph, producer_name="compat-tests")


def _counter() -> onnx.ModelProto:
    """A Loop adding 1 to ``start`` ``n`` times: runs as long as asked (for terminate)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]), helper.make_node("Add", ["acc", "one"], ["acc_out"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond", B, []),
         helper.make_tensor_value_info("acc", F, [1])],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_value_info("acc_out", F, [1])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "start"], ["total"], body=body, name="count")], "counter",
        [helper.make_tensor_value_info("n", I64, []), helper.make_tensor_value_info("start", F, [1])],
        [helper.make_tensor_value_info("total", F, [1])],
        initializer=[numpy_helper.from_array(np.ones(1, np.float32), "one")])
    return _model(graph)


def _scaler() -> onnx.ModelProto:
    """y = x * scale + offset; ``scale`` is an initializer that is also a graph input (an
    overridable initializer); the model carries metadata."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["scaled"]), helper.make_node("Add", ["scaled", "offset"], ["y"])],
        "scaler",
        [helper.make_tensor_value_info("x", F, ["n"]), helper.make_tensor_value_info("scale", F, [])],
        [helper.make_tensor_value_info("y", F, ["n"])],
        initializer=[numpy_helper.from_array(np.array(2.0, np.float32), "scale"),
                     numpy_helper.from_array(np.array(0.5, np.float32), "offset")],
        doc_string="scales and shifts")
    model = _model(graph, producer_name="compat-tests", producer_version="3.1", domain="ai.compat", model_version=7,
                   doc_string="a linear map")
    helper.set_model_props(model, {"author": "epoxy", "license": "MIT"})
    return model


def _sequences() -> onnx.ModelProto:
    """SequenceConstruct / SequenceAt / SequenceLength; the sequence is also an output."""
    seq_type = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, [2, 3]))
    graph = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["a", "b"], ["seq"]),
         helper.make_node("SequenceAt", ["seq", "index"], ["picked"]),
         helper.make_node("SequenceLength", ["seq"], ["length"])],
        "sequences",
        [helper.make_tensor_value_info("a", F, [2, 3]), helper.make_tensor_value_info("b", F, [2, 3]),
         helper.make_tensor_value_info("index", I64, [])],
        [helper.make_value_info("seq", seq_type), helper.make_tensor_value_info("picked", F, [2, 3]),
         helper.make_tensor_value_info("length", I64, [])])
    return _model(graph)


def _sequence_input() -> onnx.ModelProto:
    """A sequence of float tensors (any shape) in, one element and the count out."""
    seq_type = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None))
    graph = helper.make_graph(
        [helper.make_node("SequenceAt", ["tensors", "index"], ["item"]),
         helper.make_node("SequenceLength", ["tensors"], ["count"])],
        "sequence_input",
        [helper.make_value_info("tensors", seq_type), helper.make_tensor_value_info("index", I64, [])],
        [helper.make_tensor_value_info("item", F, [None]), helper.make_tensor_value_info("count", I64, [])])
    return _model(graph)


def _strings() -> onnx.ModelProto:
    """Two string inputs: their concatenation, and the first passed through."""
    graph = helper.make_graph(
        [
            helper.make_node("Concat", ["words", "more"], ["joined"], axis=0),
            helper.make_node("Identity", ["words"], ["same"]),
        ],
        "strings",
        [helper.make_tensor_value_info("words", S, ["n"]), helper.make_tensor_value_info("more", S, ["m"])],
        [helper.make_tensor_value_info("joined", S, [None]), helper.make_tensor_value_info("same", S, ["n"])],
    )
    return _model(graph)


def _string_vocabulary() -> onnx.ModelProto:
    """String initializers: ``words == vocabulary`` (Equal on strings, opset 19) and the
    vocabulary appended to the words."""
    vocabulary = np.array(["cat", "dog", "émeu"], dtype=object)
    graph = helper.make_graph(
        [helper.make_node("Equal", ["words", "vocabulary"], ["known"]),
         helper.make_node("Concat", ["words", "vocabulary"], ["all_words"], axis=0)],
        "vocabulary",
        [helper.make_tensor_value_info("words", S, [3])],
        [helper.make_tensor_value_info("known", B, [3]), helper.make_tensor_value_info("all_words", S, [6])],
        initializer=[numpy_helper.from_array(vocabulary, "vocabulary")])
    return _model(graph, opset=19)


def _symbolic() -> onnx.ModelProto:
    """x[batch, ?, 4] (a named, an unnamed and a fixed dim) summed over the last axis."""
    graph = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["x", "axes"], ["total"], keepdims=0),
            helper.make_node("Shape", ["x"], ["dims"]),
        ],
        "symbolic",
        [helper.make_tensor_value_info("x", F, ["batch", "seq", 4])],
        [helper.make_tensor_value_info("total", F, ["batch", "seq"]), helper.make_tensor_value_info("dims", I64, [3])],
        initializer=[numpy_helper.from_array(np.array([-1], np.int64), "axes")],
    )
    return _model(graph)


def _unknown_dims() -> onnx.ModelProto:
    """Inputs and outputs with dims that have neither a size nor a name."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0])],
        "unknown_dims",
        [helper.make_tensor_value_info("x", F, [None, 4])],
        [helper.make_tensor_value_info("y", F, [None, 4]), helper.make_tensor_value_info("t", F, [4, None])])
    return _model(graph)


def _no_output_shape() -> onnx.ModelProto:
    """An output declared without any shape (unknown rank), as many exporters write them."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "no_output_shape",
        [helper.make_tensor_value_info("x", F, [2, 3])], [helper.make_tensor_value_info("y", F, None)])
    return _model(graph)


def _casts() -> onnx.ModelProto:
    """int64 x cast to many element types (each output's type string and numpy dtype)."""
    targets = [TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16,
               TensorProto.UINT16, TensorProto.INT32, TensorProto.UINT32, TensorProto.UINT64, TensorProto.BOOL]
    names = [helper.tensor_dtype_to_string(t).removeprefix("TensorProto.").lower() for t in targets]
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], [f"as_{n}"], to=t) for n, t in zip(names, targets)], "casts",
        [helper.make_tensor_value_info("x", I64, ["n", 2])],
        [helper.make_tensor_value_info(f"as_{n}", t, ["n", 2]) for n, t in zip(names, targets)])
    return _model(graph)


def _maps() -> onnx.ModelProto:
    """A dict in (DictVectorizer), a list of dicts out (ZipMap), as scikit-learn exports have them."""
    words = ["cat", "dog", "emu"]
    graph = helper.make_graph(
        [helper.make_node("DictVectorizer", ["counts"], ["dense"], domain="ai.onnx.ml", string_vocabulary=words),
         helper.make_node("Mul", ["dense", "two"], ["scores"]),
         helper.make_node("ZipMap", ["scores"], ["by_word"], domain="ai.onnx.ml", classlabels_strings=words)],
        "maps",
        [helper.make_value_info("counts", helper.make_map_type_proto(S, helper.make_tensor_type_proto(F, [])))],
        [helper.make_tensor_value_info("dense", F, [1, 3]),
         helper.make_value_info("by_word", helper.make_sequence_type_proto(
             helper.make_map_type_proto(S, helper.make_tensor_type_proto(F, []))))],
        initializer=[numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 8
    return model


MODEL_BUILDERS = {
    "mlp": _mlp, "counter": _counter, "scaler": _scaler, "sequences": _sequences, "sequence_input": _sequence_input,
    "strings": _strings, "string_vocabulary": _string_vocabulary, "symbolic": _symbolic,
    "unknown_dims": _unknown_dims, "no_output_shape": _no_output_shape, "casts": _casts, "maps": _maps,
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("ort_models")
    paths = {}
    for name, build in MODEL_BUILDERS.items():
        path = folder / f"{name}.onnx"
        onnx.save(build(), str(path))
        paths[name] = str(path)
    return paths


@pytest.fixture(scope="module", autouse=True)
def _restore_blas_threads() -> Iterator[None]:
    """``intra_op_num_threads`` sets numpy's BLAS threads for the whole process in epoxy;
    put them back so later tests in this worker run as they would have."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=None):
        yield


# -- running a script under both runtimes -------------------------------------------------------
_IMPORT = re.compile(r"^\s*(import|from)\s+onnxruntime\b")


def as_epoxy(source: str) -> str:
    """The script with only its onnxruntime import lines changed to import epoxy."""
    lines = source.splitlines(keepends=True)
    return "".join(re.sub(r"\bonnxruntime\b", "epoxy", line) if _IMPORT.match(line) else line for line in lines)


@contextmanager
def _inside(folder: Path) -> Iterator[None]:
    previous = os.getcwd()
    folder.mkdir(parents=True, exist_ok=True)
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def run_script(name: str, source: str, models: dict[str, str], folder: Path) -> tuple[dict[str, Any], list[str]]:
    """Run ``source`` in a fresh namespace inside ``folder``; returns the namespace (its
    ``RESULT`` may hold views of memory the script's objects own: keep it until compared)
    and the messages of the warnings it raised."""
    namespace: dict[str, Any] = {"__name__": f"ort_script_{name}", "MODELS": dict(models), "RESULT": {}}
    with _inside(folder), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(source, f"<script {name} in {folder.name}>", "exec"), namespace)  # noqa: S102 - the test's point
    return namespace, [str(w.message) for w in caught]


def run_script_in_a_new_process(name: str, source: str, models: dict[str, str], folder: Path
                                ) -> tuple[dict[str, Any], list[str]]:
    """``run_script`` in a fresh interpreter, for scripts whose outcome depends on what
    this process has imported already."""
    folder.mkdir(parents=True, exist_ok=True)
    program = (f"MODELS = {dict(models)!r}\nRESULT = {{}}\n{source}\n"
               "import pickle\nwith open('RESULT.pickle', 'wb') as f:\n    pickle.dump(RESULT, f)\n")
    done = subprocess.run([sys.executable, "-c", program], cwd=folder, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"script {name} failed in {folder.name}:\n{done.stderr[-3000:]}"
    with open(folder / "RESULT.pickle", "rb") as f:
        return {"RESULT": pickle.load(f)}, []  # noqa: S301 - our own file


def assert_same(want: Any, got: Any, where: str = "RESULT") -> None:
    """``got`` (epoxy) equals ``want`` (onnxruntime): arrays by dtype, shape and value."""
    if isinstance(want, (np.ndarray, np.generic)):
        assert isinstance(got, (np.ndarray, np.generic)), f"{where}: onnxruntime gave an array, epoxy {got!r}"
        want, got = np.asarray(want), np.asarray(got)
        assert (got.dtype, got.shape) == (want.dtype, want.shape), \
            f"{where}: onnxruntime {want.dtype} {want.shape}, epoxy {got.dtype} {got.shape}"
        if want.dtype == object:
            assert got.tolist() == want.tolist(), f"{where}: onnxruntime {want.tolist()}, epoxy {got.tolist()}"
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=where)
    elif isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: onnxruntime gave a dict, epoxy {got!r}"
        assert sorted(got, key=repr) == sorted(want, key=repr), f"{where}: keys {sorted(want)} vs {sorted(got)}"
        for key in want:
            assert_same(want[key], got[key], f"{where}[{key!r}]")
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, type(want)), f"{where}: onnxruntime gave a {type(want).__name__}, epoxy {got!r}"
        assert len(got) == len(want), f"{where}: onnxruntime {len(want)} items, epoxy {len(got)}: {got!r}"
        for i, (w, g) in enumerate(zip(want, got)):
            assert_same(w, g, f"{where}[{i}]")
    elif isinstance(want, float):
        assert isinstance(got, float) and got == pytest.approx(want, rel=1e-5), f"{where}: {want!r} vs {got!r}"
    else:
        assert type(got) is type(want) and got == want, f"{where}: onnxruntime {want!r}, epoxy {got!r}"


def compare(name: str, models: dict[str, str], tmp_path: Path) -> list[str]:
    """Run script ``name`` under onnxruntime, then under epoxy, and compare; returns the
    warnings epoxy raised."""
    source = textwrap.dedent(SCRIPTS[name])
    run = run_script_in_a_new_process if name in NEW_PROCESS else run_script
    on_onnxruntime, _ = run(name, source, models, tmp_path / "onnxruntime")
    assert on_onnxruntime["RESULT"], f"script {name} recorded nothing under onnxruntime"
    on_epoxy, epoxy_warnings = run(name, as_epoxy(source), models, tmp_path / "epoxy")
    assert_same(on_onnxruntime["RESULT"], on_epoxy["RESULT"])
    return epoxy_warnings


# -- the scripts ---------------------------------------------------------------------------------
SCRIPTS: dict[str, str] = {}

SCRIPTS["load_and_inspect"] = """
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["mlp"], providers=["CPUExecutionProvider"])
    RESULT["inputs"] = [(i.name, i.shape, i.type) for i in sess.get_inputs()]
    RESULT["outputs"] = [(o.name, o.shape, o.type) for o in sess.get_outputs()]

    input_name = sess.get_inputs()[0].name
    label_name = sess.get_outputs()[1].name
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    logits, probs = sess.run(None, {input_name: x})
    RESULT["logits"] = logits
    RESULT["probs"] = probs
    RESULT["rows_sum_to_one"] = probs.sum(axis=1)
    RESULT["run_with_empty_list"] = sess.run([], {input_name: x})
    RESULT["run_one_output"] = sess.run([label_name], {input_name: x})[0]
    RESULT["run_reordered"] = sess.run(["probs", "logits"], {input_name: x})
    RESULT["one_row"] = sess.run(None, {input_name: x[:1]})[0]
    RESULT["result_types"] = [type(r).__name__ for r in sess.run(None, {input_name: x})]
    RESULT["ortvalue feed"] = sess.run(None, {input_name: ort.OrtValue.ortvalue_from_numpy(x)})

    with open(MODELS["mlp"], "rb") as f:
        model_bytes = f.read()
    from_bytes = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    RESULT["from_bytes"] = from_bytes.run(None, {"x": x})
    RESULT["no_overridable"] = from_bytes.get_overridable_initializers()
    RESULT["profiling_off"] = from_bytes.end_profiling()
"""

SCRIPTS["session_options"] = """
    import numpy as np
    import onnxruntime as ort

    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    defaults = ort.SessionOptions()
    RESULT["defaults"] = {
        "graph_optimization_level": defaults.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "execution_mode": defaults.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL,
        "execution_order": defaults.execution_order == ort.ExecutionOrder.DEFAULT,
        "threads": (defaults.intra_op_num_threads, defaults.inter_op_num_threads),
        "logging": (defaults.log_severity_level, defaults.log_verbosity_level, defaults.logid),
        "memory": (defaults.enable_cpu_mem_arena, defaults.enable_mem_pattern, defaults.enable_mem_reuse),
        "profiling": defaults.enable_profiling,
        "optimized_model_filepath": defaults.optimized_model_filepath,
        "deterministic": defaults.use_deterministic_compute,
        "per_session_threads": defaults.use_per_session_threads,
    }

    levels = [ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, ort.GraphOptimizationLevel.ORT_ENABLE_ALL]
    for level in levels:
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        sess = ort.InferenceSession(MODELS["mlp"], sess_options=so, providers=["CPUExecutionProvider"])
        RESULT[level.name] = sess.run(None, {"x": x})
        RESULT[level.name + " value"] = int(sess.get_session_options().graph_optimization_level)

    so = ort.SessionOptions()
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    so.inter_op_num_threads = 2
    so.intra_op_num_threads = 2
    so.enable_mem_pattern = False
    so.enable_cpu_mem_arena = False
    so.log_severity_level = 3
    so.logid = "compat"
    sess = ort.InferenceSession(MODELS["mlp"], so, ["CPUExecutionProvider"])
    RESULT["parallel"] = sess.run(None, {"x": x})
    RESULT["read_back"] = (so.execution_mode == ort.ExecutionMode.ORT_PARALLEL, so.execution_mode.name,
                           so.intra_op_num_threads, so.inter_op_num_threads, so.enable_mem_pattern,
                           so.enable_cpu_mem_arena, so.log_severity_level, so.logid)
    RESULT["enum_values"] = [int(level) for level in levels] + [int(ort.ExecutionMode.ORT_PARALLEL)]
    RESULT["enum_from_int"] = ort.GraphOptimizationLevel(1) == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    try:
        so.graph_optimisation_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL  # misspelt
        RESULT["misspelt attribute"] = "accepted"
    except AttributeError:
        RESULT["misspelt attribute"] = "AttributeError"
"""

SCRIPTS["profiling"] = """
    import json

    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = "mlp_profile"
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # one event per model node
    sess = ort.InferenceSession(MODELS["mlp"], options, providers=["CPUExecutionProvider"])
    start_ns = sess.get_profiling_start_time_ns()
    x = np.ones((2, 4), dtype=np.float32)
    for _ in range(3):
        sess.run(None, {"x": x})
    profile_file = sess.end_profiling()
    with open(profile_file) as f:
        trace = json.load(f)

    RESULT["file name"] = (profile_file.startswith("mlp_profile"), profile_file.endswith(".json"))
    RESULT["start time"] = isinstance(start_ns, int) and start_ns > 0
    RESULT["is a list"] = isinstance(trace, list)
    RESULT["event fields"] = all({"cat", "name", "ph", "ts", "dur", "pid", "tid", "args"} <= set(e) for e in trace)
    RESULT["complete events"] = {e["ph"] for e in trace}
    RESULT["categories"] = sorted({e["cat"] for e in trace})
    session_events = {e["name"] for e in trace if e["cat"] == "Session"}
    RESULT["session events"] = sorted(session_events & {"model_loading_uri", "session_initialization", "model_run"})
    RESULT["model runs"] = sum(e["name"] == "model_run" for e in trace)
    kernels = [e for e in trace if e["cat"] == "Node" and e["name"].endswith("_kernel_time")]
    RESULT["kernel events"] = sorted({e["name"] for e in kernels})
    RESULT["kernel calls"] = len(kernels)
    RESULT["op names"] = sorted({e["args"]["op_name"] for e in kernels})
    RESULT["providers"] = sorted({e["args"]["provider"] for e in kernels})
    RESULT["times are ints"] = all(isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["dur"] >= 0
                                   for e in trace)
    RESULT["ended twice"] = sess.end_profiling()
"""

SCRIPTS["optimized_model_file"] = """
    import os

    import numpy as np
    import onnx
    import onnxruntime as ort

    x = np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = "mlp.optimized.onnx"
    sess = ort.InferenceSession(MODELS["mlp"], options, providers=["CPUExecutionProvider"])
    RESULT["written"] = os.path.exists("mlp.optimized.onnx")
    optimized = onnx.load("mlp.optimized.onnx")
    RESULT["interface"] = ([i.name for i in optimized.graph.input], [o.name for o in optimized.graph.output])
    RESULT["fewer nodes"] = 0 < len(optimized.graph.node) < 6
    reloaded = ort.InferenceSession("mlp.optimized.onnx", providers=["CPUExecutionProvider"])
    RESULT["reloaded"] = reloaded.run(None, {"x": x})
    RESULT["original"] = sess.run(None, {"x": x})
"""

SCRIPTS["config_entries_and_free_dimensions"] = """
    import numpy as np
    import onnxruntime as ort
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    RESULT["entry"] = options.get_session_config_entry("session.intra_op.allow_spinning")
    options.add_free_dimension_override_by_name("batch", 3)
    sess = ort.InferenceSession(MODELS["mlp"], options, providers=["CPUExecutionProvider"])
    RESULT["input shape"] = sess.get_inputs()[0].shape
    RESULT["output shapes"] = [o.shape for o in sess.get_outputs()]
    RESULT["run"] = sess.run(None, {"x": np.full((3, 4), 0.5, dtype=np.float32)})
    try:
        sess.run(None, {"x": np.zeros((5, 4), dtype=np.float32)})
        RESULT["other batch"] = "ran"
    except InvalidArgument:
        RESULT["other batch"] = "InvalidArgument"

    by_denotation = ort.SessionOptions()
    by_denotation.add_free_dimension_override_by_denotation("DATA_BATCH", 2)
    sess = ort.InferenceSession(MODELS["mlp"], by_denotation, providers=["CPUExecutionProvider"])
    RESULT["denotation shape"] = sess.get_inputs()[0].shape
"""

SCRIPTS["initializers"] = """
    import numpy as np
    import onnxruntime as ort

    x = np.ones((2, 4), dtype=np.float32)
    zero_bias = np.zeros(3, dtype=np.float32)
    bias_value = ort.OrtValue.ortvalue_from_numpy(zero_bias)  # must outlive the session
    options = ort.SessionOptions()
    options.add_initializer("b2", bias_value)
    sess = ort.InferenceSession(MODELS["mlp"], options, providers=["CPUExecutionProvider"])
    RESULT["with zero bias"] = sess.run(["logits"], {"x": x})[0]
    plain = ort.InferenceSession(MODELS["mlp"], providers=["CPUExecutionProvider"])
    RESULT["plain"] = plain.run(["logits"], {"x": x})[0]

    sess = ort.InferenceSession(MODELS["scaler"], providers=["CPUExecutionProvider"])
    RESULT["inputs"] = [(i.name, i.shape, i.type) for i in sess.get_inputs()]
    RESULT["overridable"] = [(i.name, i.shape, i.type) for i in sess.get_overridable_initializers()]
    values = np.array([1.0, -1.0, 4.0], dtype=np.float32)
    RESULT["default scale"] = sess.run(None, {"x": values})[0]
    RESULT["scale fed"] = sess.run(None, {"x": values, "scale": np.array(10.0, dtype=np.float32)})[0]

    offset_value = ort.OrtValue.ortvalue_from_numpy(np.array(-3.0, dtype=np.float32))
    options = ort.SessionOptions()
    options.add_initializer("offset", offset_value)
    sess = ort.InferenceSession(MODELS["scaler"], options, providers=["CPUExecutionProvider"])
    RESULT["new offset"] = sess.run(None, {"x": values})[0]
"""

SCRIPTS["providers"] = """
    import numpy as np
    import onnxruntime as ort

    x = np.full((2, 4), 0.25, dtype=np.float32)
    RESULT["cpu available"] = "CPUExecutionProvider" in ort.get_available_providers()
    RESULT["cpu known"] = "CPUExecutionProvider" in ort.get_all_providers()
    RESULT["device"] = ort.get_device()

    if "CUDAExecutionProvider" in ort.get_available_providers():
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    else:
        providers = ["CPUExecutionProvider"]
    sess = ort.InferenceSession(MODELS["mlp"], providers=providers)
    RESULT["idiom runs"] = sess.run(None, {"x": x})
    everything = ort.InferenceSession(MODELS["mlp"], providers=ort.get_available_providers())
    RESULT["all available providers"] = everything.run(None, {"x": x})

    sess = ort.InferenceSession(MODELS["mlp"], providers=["CPUExecutionProvider"])
    RESULT["providers"] = sess.get_providers()
    RESULT["provider options"] = sess.get_provider_options()
    sess.set_providers(["CPUExecutionProvider"])
    RESULT["after set_providers"] = sess.get_providers()
    RESULT["run after set_providers"] = sess.run(None, {"x": x})
    sess.disable_fallback()
    sess.enable_fallback()

    with_options = ort.InferenceSession(MODELS["mlp"], providers=[("CPUExecutionProvider", {})])
    RESULT["tuple form"] = with_options.get_providers()
    separate = ort.InferenceSession(MODELS["mlp"], providers=["CPUExecutionProvider"], provider_options=[{}])
    RESULT["provider_options argument"] = separate.get_providers()
"""

SCRIPTS["model_metadata"] = """
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["scaler"], providers=["CPUExecutionProvider"])
    meta = sess.get_modelmeta()
    RESULT["meta"] = {
        "producer_name": meta.producer_name,
        "graph_name": meta.graph_name,
        "graph_description": meta.graph_description,
        "domain": meta.domain,
        "description": meta.description,
        "version": meta.version,
        "custom_metadata_map": dict(meta.custom_metadata_map),
    }
    RESULT["author"] = meta.custom_metadata_map.get("author", "unknown")
"""

SCRIPTS["terminate_from_a_thread"] = """
    import threading
    import time

    import numpy as np
    import onnxruntime as ort
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail

    sess = ort.InferenceSession(MODELS["counter"], providers=["CPUExecutionProvider"])
    run_options = ort.RunOptions()
    run_options.logid = "long-run"
    outcome = []

    def long_run():
        try:
            sess.run(None, {"n": np.array(10**9, dtype=np.int64), "start": np.zeros(1, np.float32)}, run_options)
            outcome.append("finished")
        except Fail:
            outcome.append("Fail")

    worker = threading.Thread(target=long_run, daemon=True)
    worker.start()
    time.sleep(0.2)
    run_options.terminate = True
    worker.join(timeout=60)
    RESULT["stopped"] = not worker.is_alive()
    RESULT["outcome"] = outcome
    RESULT["flag"] = run_options.terminate

    run_options.terminate = False
    RESULT["usable again"] = sess.run(None, {"n": np.array(4, np.int64), "start": np.zeros(1, np.float32)},
                                      run_options)
    early = ort.RunOptions()
    early.terminate = True
    try:
        sess.run(None, {"n": np.array(4, np.int64), "start": np.zeros(1, np.float32)}, early)
        RESULT["terminated before start"] = "ran"
    except Fail:
        RESULT["terminated before start"] = "Fail"
"""

SCRIPTS["run_options"] = """
    import numpy as np
    import onnxruntime as ort

    run_options = ort.RunOptions()
    RESULT["defaults"] = (run_options.log_severity_level, run_options.log_verbosity_level, run_options.logid,
                          run_options.terminate, run_options.only_execute_path_to_fetches)
    run_options.log_severity_level = 3
    run_options.log_verbosity_level = 1
    run_options.logid = "request-42"
    run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    RESULT["entry"] = run_options.get_run_config_entry("memory.enable_memory_arena_shrinkage")
    RESULT["set"] = (run_options.log_severity_level, run_options.log_verbosity_level, run_options.logid)
    sess = ort.InferenceSession(MODELS["mlp"], providers=["CPUExecutionProvider"])
    RESULT["run"] = sess.run(["probs"], {"x": np.ones((1, 4), np.float32)}, run_options)
"""

SCRIPTS["wrong_inputs_raise"] = """
    import numpy as np
    import onnxruntime as ort
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument, InvalidProtobuf, NoSuchFile

    sess = ort.InferenceSession(MODELS["mlp"], providers=["CPUExecutionProvider"])
    good = np.zeros((2, 4), dtype=np.float32)
    attempts = {
        "float64 feed": lambda: sess.run(None, {"x": good.astype(np.float64)}),
        "int32 feed": lambda: sess.run(None, {"x": good.astype(np.int32)}),
        "wrong rank": lambda: sess.run(None, {"x": good[0]}),
        "wrong dim": lambda: sess.run(None, {"x": np.zeros((2, 5), np.float32)}),
        "unknown output": lambda: sess.run(["nope"], {"x": good}),
        "unknown input": lambda: sess.run(None, {"x": good, "extra": good}),
    }
    for what, attempt in attempts.items():
        try:
            attempt()
            RESULT[what] = "ran"
        except InvalidArgument:
            RESULT[what] = "InvalidArgument"
    try:
        sess.run(None, {})
    except ValueError:
        RESULT["missing input"] = "ValueError"
    try:
        ort.InferenceSession("no/such/model.onnx", providers=["CPUExecutionProvider"])
    except NoSuchFile:
        RESULT["missing file"] = "NoSuchFile"
    try:
        ort.InferenceSession(b"this is not an onnx model", providers=["CPUExecutionProvider"])
    except InvalidProtobuf:
        RESULT["bad bytes"] = "InvalidProtobuf"
    RESULT["still usable"] = sess.run(None, {"x": good})
"""

SCRIPTS["python_list_feeds"] = """
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["mlp"], providers=["CPUExecutionProvider"])
    RESULT["float list"] = sess.run(None, {"x": [[0.5, -1.0, 2.0, 0.25], [1.0, 1.5, -0.75, 0.0]]})
    RESULT["int list into float input"] = sess.run(None, {"x": [[1, 2, 3, 4]]})
    casts = ort.InferenceSession(MODELS["casts"], providers=["CPUExecutionProvider"])
    RESULT["int list into int64 input"] = casts.run(["as_int32", "as_double"], {"x": [[1, 2], [3, -4]]})
    listed = ort.InferenceSession(MODELS["sequence_input"], providers=["CPUExecutionProvider"])
    RESULT["list as sequence"] = listed.run(None, {"tensors": [np.ones(2, np.float32), np.arange(3, dtype=np.float32)],
                                                   "index": np.array(1, np.int64)})
"""

SCRIPTS["python_float_list_feeds"] = """
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["mlp"], providers=["CPUExecutionProvider"])
    RESULT["probs"] = sess.run(["probs"], {"x": [[0.1, 0.2, 0.3, 0.4]]})[0]
"""

SCRIPTS["string_tensors"] = """
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["strings"], providers=["CPUExecutionProvider"])
    RESULT["types"] = [i.type for i in sess.get_inputs()] + [o.type for o in sess.get_outputs()]
    feeds = {
        "unicode array": {"words": np.array(["alpha", "béta"]), "more": np.array(["γ"])},
        "object array": {"words": np.array(["alpha", "béta"], dtype=object), "more": np.array(["γ"], dtype=object)},
        "lists": {"words": ["alpha", "béta"], "more": ["γ", ""]},
    }
    for what, feed in feeds.items():
        joined, same = sess.run(None, feed)
        RESULT[what] = (joined, same, joined.dtype.kind, [type(s).__name__ for s in joined])
"""

SCRIPTS["string_initializers"] = """
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["string_vocabulary"], providers=["CPUExecutionProvider"])
    known, all_words = sess.run(None, {"words": np.array(["dog", "emu", "émeu"], dtype=object)})
    RESULT["known"] = known
    RESULT["all words"] = all_words
"""

SCRIPTS["sequences"] = """
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["sequences"], providers=["CPUExecutionProvider"])
    RESULT["output types"] = [(o.name, o.type) for o in sess.get_outputs()]
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = -a
    seq, picked, length = sess.run(None, {"a": a, "b": b, "index": np.array(1, dtype=np.int64)})
    RESULT["seq"] = seq
    RESULT["seq is a list"] = isinstance(seq, list)
    RESULT["picked"] = picked
    RESULT["length"] = length
    RESULT["negative index"] = sess.run(["picked"], {"a": a, "b": b, "index": np.array(-2, np.int64)})[0]

    sess = ort.InferenceSession(MODELS["sequence_input"], providers=["CPUExecutionProvider"])
    RESULT["input types"] = [(i.name, i.type) for i in sess.get_inputs()]
    tensors = [np.ones(2, np.float32), np.arange(3, dtype=np.float32), np.zeros(1, np.float32)]
    RESULT["item"], RESULT["count"] = sess.run(None, {"tensors": tensors, "index": np.array(-1, np.int64)})

    sess = ort.InferenceSession(MODELS["sequences"], providers=["CPUExecutionProvider"])
    feeds = {"a": ort.OrtValue.ortvalue_from_numpy(a), "b": ort.OrtValue.ortvalue_from_numpy(b),
             "index": ort.OrtValue.ortvalue_from_numpy(np.array(0, dtype=np.int64))}
    seq_value, picked_value, _ = sess.run_with_ort_values(None, feeds)
    RESULT["sequence ortvalue"] = (seq_value.is_tensor_sequence(), seq_value.is_tensor(), seq_value.data_type(),
                                   seq_value.has_value())
    RESULT["picked ortvalue"] = picked_value.numpy()
"""

SCRIPTS["maps_as_dicts"] = """
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["maps"], providers=["CPUExecutionProvider"])
    RESULT["input types"] = [(i.name, i.type, i.shape) for i in sess.get_inputs()]
    RESULT["output types"] = [(o.name, o.type) for o in sess.get_outputs()]
    dense, by_word = sess.run(None, {"counts": {"dog": 2.0, "emu": 0.5, "yak": 9.0}})
    RESULT["dense"] = dense
    RESULT["by_word"] = by_word
    RESULT["key and value types"] = sorted(
        {(type(k).__name__, type(v).__name__) for d in by_word for k, v in d.items()})
"""

SCRIPTS["nodearg_shape_of_sequence"] = """
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["sequence_input"], providers=["CPUExecutionProvider"])
    RESULT["input shapes"] = [i.shape for i in sess.get_inputs()]
    sess = ort.InferenceSession(MODELS["sequences"], providers=["CPUExecutionProvider"])
    RESULT["output shapes"] = [o.shape for o in sess.get_outputs()]
"""

SCRIPTS["ortvalue_and_run_with_ort_values"] = """
    import numpy as np
    import onnx
    import onnxruntime as ort

    x = (np.arange(12, dtype=np.float32) / 10).reshape(3, 4)
    x_ortvalue = ort.OrtValue.ortvalue_from_numpy(x, "cpu", 0)
    RESULT["device"] = x_ortvalue.device_name()
    RESULT["shape"] = x_ortvalue.shape()
    RESULT["data type"] = x_ortvalue.data_type()
    RESULT["element type"] = x_ortvalue.element_type()
    RESULT["kind"] = (x_ortvalue.is_tensor(), x_ortvalue.has_value(), x_ortvalue.is_tensor_sequence(),
                      x_ortvalue.is_sparse_tensor())
    RESULT["bytes"] = x_ortvalue.tensor_size_in_bytes()
    RESULT["shares the array"] = x_ortvalue.data_ptr() == x.ctypes.data
    RESULT["numpy"] = x_ortvalue.numpy()

    sess = ort.InferenceSession(MODELS["mlp"], providers=["CPUExecutionProvider"])
    outputs = sess.run_with_ort_values(["probs"], {"x": x_ortvalue})
    RESULT["outputs"] = len(outputs)
    RESULT["probs"] = outputs[0].numpy()
    RESULT["probs meta"] = (outputs[0].shape(), outputs[0].data_type(), outputs[0].device_name())
    RESULT["all outputs"] = [v.numpy() for v in sess.run_with_ort_values(None, {"x": x_ortvalue})]

    buffer = ort.OrtValue.ortvalue_from_shape_and_type([3, 4], np.float32, "cpu", 0)
    RESULT["buffer meta"] = (buffer.shape(), buffer.data_type())
    buffer.update_inplace(x * 2)
    RESULT["updated"] = buffer.numpy()
    RESULT["fed a buffer"] = sess.run_with_ort_values(["logits"], {"x": buffer})[0].numpy()

    ints = ort.OrtValue.ortvalue_from_numpy(np.array([[1, 2, 3]], dtype=np.int64))
    RESULT["int64"] = (ints.data_type(), ints.element_type(), ints.shape(), ints.tensor_size_in_bytes())
    halves = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.array([15360, 16384], dtype=np.uint16),
                                                             onnx.TensorProto.FLOAT16)
    RESULT["float16 from bits"] = (halves.data_type(), halves.element_type(), halves.shape())
    by_type_number = ort.OrtValue.ortvalue_from_shape_and_type([2], onnx.TensorProto.INT32)
    RESULT["type number"] = (by_type_number.data_type(), by_type_number.element_type())
"""

SCRIPTS["iobinding_on_cpu"] = """
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["mlp"], providers=["CPUExecutionProvider"])
    x = np.random.default_rng(7).standard_normal((2, 4)).astype(np.float32)
    expected_logits, expected_probs = sess.run(None, {"x": x})

    io_binding = sess.io_binding()
    io_binding.bind_cpu_input("x", x)
    io_binding.bind_output("probs")
    sess.run_with_iobinding(io_binding)
    RESULT["copied"] = io_binding.copy_outputs_to_cpu()
    outputs = io_binding.get_outputs()
    RESULT["ortvalues"] = [(o.device_name(), o.shape(), o.data_type()) for o in outputs]
    RESULT["probs"] = outputs[0].numpy()
    RESULT["as vector"] = [v.numpy() for v in io_binding.get_outputs_as_ortvaluevector()]

    # an output written into memory the caller owns
    logits = np.empty((2, 3), dtype=np.float32)
    io_binding.clear_binding_outputs()
    io_binding.bind_output("logits", "cpu", 0, np.float32, list(logits.shape), logits.ctypes.data)
    sess.run_with_iobinding(io_binding)
    RESULT["preallocated"] = logits.copy()

    # inputs from raw memory and from an OrtValue, output into an OrtValue
    io_binding.clear_binding_inputs()
    io_binding.clear_binding_outputs()
    doubled = x * 2
    io_binding.bind_input(name="x", device_type="cpu", device_id=0, element_type=np.float32,
                          shape=doubled.shape, buffer_ptr=doubled.ctypes.data)
    result = ort.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32, "cpu", 0)
    io_binding.bind_ortvalue_output("probs", result)
    io_binding.bind_output("logits", "cpu")
    io_binding.synchronize_inputs()
    sess.run_with_iobinding(io_binding)
    io_binding.synchronize_outputs()
    RESULT["into ortvalue"] = result.numpy()
    RESULT["output order"] = [o.shape() for o in io_binding.get_outputs()]

    io_binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(-x))
    sess.run_with_iobinding(io_binding)
    RESULT["rebound input"] = io_binding.copy_outputs_to_cpu()
    RESULT["plain run agrees"] = [expected_logits, expected_probs]
"""

SCRIPTS["concurrent_runs"] = """
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["mlp"], providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(11)
    requests = [rng.standard_normal((int(rng.integers(1, 6)), 4)).astype(np.float32) for _ in range(24)]

    def infer(x):
        return sess.run(["probs"], {"x": x})[0]

    with ThreadPoolExecutor(max_workers=6) as pool:
        RESULT["threaded"] = list(pool.map(infer, requests))
    RESULT["sequential"] = [infer(x) for x in requests]
"""

SCRIPTS["run_async"] = """
    import threading

    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["mlp"], providers=["CPUExecutionProvider"])
    done = threading.Event()
    calls = {}

    def callback(results, user_data, err):
        calls[user_data] = (results, err)
        if len(calls) == 2:
            done.set()

    x = np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4)
    sess.run_async(None, {"x": x}, callback, "good")
    sess.run_async(["probs"], {"x": x.astype(np.float64)}, callback, "bad")
    RESULT["both called back"] = done.wait(30)
    results, err = calls["good"]
    RESULT["results"] = results
    RESULT["no error"] = err
    results, err = calls["bad"]
    RESULT["failed run"] = (results, isinstance(err, str) and len(err) > 0)
"""

SCRIPTS["symbolic_dims"] = """
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["symbolic"], providers=["CPUExecutionProvider"])
    RESULT["input"] = [(i.name, i.shape) for i in sess.get_inputs()]
    RESULT["outputs"] = [(o.name, o.shape) for o in sess.get_outputs()]
    batch_dim = sess.get_inputs()[0].shape[0]
    RESULT["symbol is a str"] = isinstance(batch_dim, str)
    for batch, seq in [(1, 1), (2, 5), (7, 3)]:
        x = np.arange(batch * seq * 4, dtype=np.float32).reshape(batch, seq, 4)
        RESULT[f"{batch}x{seq}"] = sess.run(None, {"x": x})
    sess = ort.InferenceSession(MODELS["unknown_dims"], providers=["CPUExecutionProvider"])
    RESULT["unnamed input dim"] = [i.shape for i in sess.get_inputs()]
    RESULT["unnamed run"] = sess.run(None, {"x": np.ones((3, 4), np.float32)})
"""

SCRIPTS["nodearg_shape_of_unknown_dims"] = """
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["unknown_dims"], providers=["CPUExecutionProvider"])
    RESULT["output shapes"] = [o.shape for o in sess.get_outputs()]
"""

SCRIPTS["output_without_shape"] = """
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["no_output_shape"], providers=["CPUExecutionProvider"])
    RESULT["y"] = sess.run(None, {"x": np.array([[-1, 0, 1], [2, -3, 4]], dtype=np.float32)})
"""

SCRIPTS["element_types"] = """
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["casts"], providers=["CPUExecutionProvider"])
    RESULT["types"] = [(o.name, o.type) for o in sess.get_outputs()]
    outputs = sess.run(None, {"x": np.array([[0, 1], [2, 300]], dtype=np.int64)})
    RESULT["dtypes"] = [str(o.dtype) for o in outputs]
    RESULT["values"] = outputs
"""

SCRIPTS["module_functions"] = """
    import onnxruntime as ort

    RESULT["device"] = ort.get_device()
    RESULT["version is text"] = isinstance(ort.get_version_string(), str) and isinstance(ort.__version__, str)
    RESULT["build info is text"] = isinstance(ort.get_build_info(), str)
    ort.set_default_logger_severity(3)
    ort.set_default_logger_verbosity(0)
    ort.set_seed(42)
    ort.set_default_logger_severity(2)
    RESULT["enums"] = sorted(["GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder"])
    RESULT["classes"] = all(callable(c) for c in (ort.InferenceSession, ort.SessionOptions, ort.RunOptions))
"""

SCRIPTS["enum_str"] = """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    RESULT["str"] = str(options.execution_mode)
    RESULT["format"] = f"level {ort.GraphOptimizationLevel.ORT_ENABLE_BASIC}"
"""

SCRIPTS["capi_through_the_module"] = """
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["mlp"], providers=["CPUExecutionProvider"])
    try:
        sess.run(None, {"x": np.zeros((2, 4), np.float64)})
    except ort.capi.onnxruntime_pybind11_state.InvalidArgument:
        RESULT["caught"] = "InvalidArgument"
"""

SCRIPTS["missing_config_entry_is_runtime_error"] = """
    import onnxruntime as ort

    options = ort.SessionOptions()
    try:
        options.get_session_config_entry("session.not.set")
        RESULT["missing entry"] = "returned"
    except RuntimeError:
        RESULT["missing entry"] = "RuntimeError"
"""

SCRIPTS["provider_without_an_epoxy_plugin"] = """
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(MODELS["mlp"], providers=["TensorrtExecutionProvider", "CPUExecutionProvider"])
    RESULT["providers"] = sess.get_providers()
    RESULT["run"] = sess.run(None, {"x": np.ones((1, 4), np.float32)})
"""

#: scripts run in a fresh interpreter (what they check depends on what is imported already)
NEW_PROCESS = {"capi_through_the_module"}

#: scripts epoxy fails today: name -> the cause (file, what); empty since every script passes
XFAIL: dict[str, str] = {}  # every script passes today; a regression is named here with its cause


def _params() -> list[Any]:
    params = []
    for name in SCRIPTS:
        marks = [pytest.mark.xfail(strict=True, reason=XFAIL[name])] if name in XFAIL else []
        params.append(pytest.param(name, marks=marks, id=name))
    return params


@pytest.mark.parametrize("name", _params())
def test_script_gives_what_onnxruntime_gives(name: str, models: dict[str, str], tmp_path: Path) -> None:
    compare(name, models, tmp_path)


def test_scripts_differ_only_in_their_import_lines() -> None:
    for name, source in SCRIPTS.items():
        rewritten = as_epoxy(textwrap.dedent(source))
        changed = [(a, b) for a, b in zip(textwrap.dedent(source).splitlines(), rewritten.splitlines()) if a != b]
        assert changed, f"{name}: no onnxruntime import to rewrite"
        assert all(_IMPORT.match(a) and b.lstrip().startswith(("import epoxy", "from epoxy")) for a, b in changed), name
        assert not re.search(r"\bonnxruntime\b", rewritten), f"{name}: onnxruntime still named after the rewrite"


def test_rewritten_scripts_really_run_on_epoxy(models: dict[str, str], tmp_path: Path) -> None:
    """The harness is not fooled: the rewritten namespace holds epoxy, never onnxruntime."""
    namespace: dict[str, Any] = {"MODELS": models, "RESULT": {}}
    source = textwrap.dedent(SCRIPTS["wrong_inputs_raise"])
    with _inside(tmp_path):
        exec(compile(as_epoxy(source), "<rewritten>", "exec"), namespace)  # noqa: S102
    modules = {v.__name__ for v in namespace.values() if isinstance(v, types.ModuleType)}
    assert "epoxy" in modules and not any(m.startswith("onnxruntime") for m in modules)
    assert namespace["InvalidArgument"].__module__.startswith("epoxy")
    assert type(namespace["sess"]).__module__.startswith("epoxy")


def test_xfail_list_names_real_scripts() -> None:
    assert set(XFAIL) <= set(SCRIPTS)


# -- deliberate differences: epoxy's documented behaviour ---------------------------------------
def _epoxy_session(models: dict[str, str], name: str, **kw: Any) -> Any:
    import epoxy

    return epoxy.InferenceSession(models[name], providers=["CPUExecutionProvider"], **kw)


def test_fractions_into_an_int_input_are_refused(models: dict[str, str]) -> None:
    """onnxruntime truncates [[1.5, 2]] fed to an int64 input to [[1, 2]]; epoxy refuses a
    conversion that changes values, naming the input (an InvalidArgument)."""
    from epoxy.capi.onnxruntime_pybind11_state import InvalidArgument

    sess = _epoxy_session(models, "casts")
    with pytest.raises(InvalidArgument, match="input 'x'.*cannot represent exactly"):
        sess.run(None, {"x": [[1.5, 2], [3, 4]]})
    with pytest.raises(InvalidArgument, match="input 'x'"):
        sess.run(None, {"x": [[2**70, 2], [3, 4]]})  # beyond int64
    (as_int32,) = sess.run(["as_int32"], {"x": [[1.0, 2], [3, 4]]})  # whole numbers convert
    np.testing.assert_array_equal(as_int32, [[1, 2], [3, 4]])


@pytest.mark.parametrize("feed", [
    pytest.param(np.array([b"alpha", "béta".encode()]), id="bytes-array"),
    pytest.param(np.array([b"alpha", "béta".encode()], dtype=object), id="object-array-of-bytes"),
    pytest.param([b"alpha", "béta".encode()], id="list-of-bytes"),
])
def test_bytes_string_feeds_are_decoded_as_utf8(models: dict[str, str], feed: Any) -> None:
    """onnxruntime reads numpy bytes arrays as raw memory (garbage or UnicodeDecodeError)
    and str()s bytes objects ("b'alpha'"); epoxy decodes bytes as UTF-8 text."""
    sess = _epoxy_session(models, "strings")
    joined, same = sess.run(None, {"words": feed, "more": ["γ"]})
    assert same.dtype == object and same.tolist() == ["alpha", "béta"]
    assert joined.tolist() == ["alpha", "béta", "γ"]


def test_non_utf8_bytes_are_refused(models: dict[str, str]) -> None:
    from epoxy.capi.onnxruntime_pybind11_state import InvalidArgument

    sess = _epoxy_session(models, "strings")
    with pytest.raises(InvalidArgument, match="input 'words': bytes that are not UTF-8"):
        sess.run(None, {"words": np.array([b"\xff\xfe"]), "more": ["x"]})


def test_python_scalars_are_fed_as_0d_tensors(models: dict[str, str]) -> None:
    """onnxruntime raises RuntimeError for a Python int or numpy scalar feed; epoxy takes
    it as a 0-d tensor of the input's element type."""
    sess = _epoxy_session(models, "sequences")
    a = np.ones((2, 3), np.float32)
    for index in (1, np.int64(1)):
        (picked,) = sess.run(["picked"], {"a": a, "b": -a, "index": index})
        np.testing.assert_array_equal(picked, -a)


def test_string_ortvalues_are_allowed() -> None:
    """onnxruntime's OrtValue.ortvalue_from_numpy refuses string arrays; epoxy's holds them."""
    import epoxy

    value = epoxy.OrtValue.ortvalue_from_numpy(np.array(["a", "bc"]))
    assert value.data_type() == "tensor(string)" and value.numpy().tolist() == ["a", "bc"]


def test_default_providers_are_named_as_epoxy_names_them(models: dict[str, str]) -> None:
    """Without ``providers=``, onnxruntime's get_providers() is ['CPUExecutionProvider'];
    epoxy's lists its own names (``cpu``). An alias is echoed only when the caller used it.
    get_available_providers() is a list of epoxy's names whose ``in`` also knows aliases."""
    import epoxy

    assert epoxy.InferenceSession(models["mlp"]).get_providers()[-1] == "cpu"
    assert _epoxy_session(models, "mlp").get_providers() == ["CPUExecutionProvider"]
    available = epoxy.get_available_providers()
    assert "cpu" in list(available) and "CPUExecutionProvider" not in list(available)
    assert "CPUExecutionProvider" in available


def test_unused_config_entries_warn(models: dict[str, str], tmp_path: Path) -> None:
    """onnxruntime silently keeps config keys it does not act on; epoxy keeps them and warns
    once per session (RuntimeWarning naming the keys), and warns at run for run entries."""
    warned = compare("config_entries_and_free_dimensions", models, tmp_path)
    assert any("session.intra_op.allow_spinning" in w for w in warned), warned
    warned = compare("run_options", models, tmp_path / "run")
    assert any("memory.enable_memory_arena_shrinkage" in w for w in warned), warned


def test_unknown_provider_options_are_refused(models: dict[str, str]) -> None:
    """onnxruntime ignores options the CPU provider does not know; epoxy refuses them,
    listing the options the provider takes."""
    import epoxy
    from epoxy.capi.onnxruntime_pybind11_state import InvalidArgument

    with pytest.raises(InvalidArgument, match="unknown options.*arena_extend_strategy"):
        epoxy.InferenceSession(models["mlp"], providers=[("CPUExecutionProvider", {"arena_extend_strategy": "x"})])


def test_unknown_provider_names_are_refused(models: dict[str, str]) -> None:
    """onnxruntime warns about a provider name it does not know and runs on CPU; epoxy
    refuses it, listing the installed providers and their aliases."""
    import epoxy
    from epoxy.capi.onnxruntime_pybind11_state import InvalidArgument

    with pytest.raises(InvalidArgument, match=r"unknown provider 'NoSuchProvider'.*cpu \(CPUExecutionProvider\)"):
        epoxy.InferenceSession(models["mlp"], providers=["NoSuchProvider", "CPUExecutionProvider"])


def test_onnxruntime_constructor_keywords_are_refused(models: dict[str, str]) -> None:
    """onnxruntime's InferenceSession takes extra keywords (disabled_optimizers=,
    enable_fallback=, read_config_from_model=); epoxy names them in a TypeError."""
    import epoxy

    with pytest.raises(TypeError, match="disabled_optimizers"):
        epoxy.InferenceSession(models["mlp"], providers=["CPUExecutionProvider"], disabled_optimizers=["GeluFusion"])


def test_execution_order_other_than_default_is_refused() -> None:
    import epoxy
    from epoxy.capi.onnxruntime_pybind11_state import InvalidArgument

    options = epoxy.SessionOptions()
    with pytest.raises(InvalidArgument, match="not offered"):
        options.execution_order = epoxy.ExecutionOrder.PRIORITY_BASED
    options.execution_order = epoxy.ExecutionOrder.DEFAULT


def test_custom_op_libraries_are_refused() -> None:
    import epoxy
    from epoxy.capi.onnxruntime_pybind11_state import InvalidArgument

    with pytest.raises(InvalidArgument, match="not offered"):
        epoxy.SessionOptions().register_custom_ops_library("libmy_ops.so")


def test_use_per_session_threads_off_warns() -> None:
    """epoxy's BLAS threads are per process: turning per-session threads off cannot change
    anything, so it warns instead of doing nothing silently."""
    import epoxy

    with pytest.warns(RuntimeWarning, match="use_per_session_threads"):
        epoxy.SessionOptions().use_per_session_threads = False
