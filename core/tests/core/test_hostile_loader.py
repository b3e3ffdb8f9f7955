"""Hostile models at load time (issue #16): what crashed onnx's shape inference, what
allocated from declared sizes before checking them, external data of sparse tensors, and
bare exceptions from the file system and the wire reader. Each model is a minimal
reproducer (hostile_models.py or built here); each test checks the exception class and that
the message names the node, tensor or file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from hostile_models import CRASHERS, REINFER_CRASHERS, F, _model, _vi, gather_nd, layer_norm, split
from onnx import TensorProto, helper, numpy_helper

from epoxy import InvalidGraphError, ModelLoadError, ResourceLimitError
from epoxy.load.loader import MAPPED_FILE_MIN_BYTES, load_model

HERE = Path(__file__).parent

# -- onnx's shape inference: crashes and stalls, each model loaded in a subprocess -------------
_RUNNER = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # a regression fails, never swaps
sys.path.insert(0, sys.argv[1])
from hostile_models import CRASHERS, REINFER_CRASHERS, UNCHECKED
from epoxy.load.functions import reinfer_shapes
from epoxy.load.loader import load_model
for name, (build, _) in [*CRASHERS.items(), *REINFER_CRASHERS.items()]:
    print("START", name, flush=True)
    try:
        loaded = load_model(build(), check="off" if name in UNCHECKED else "warn")
        if name in REINFER_CRASHERS:
            reinfer_shapes(loaded.model)
        result = ["loaded", " ".join(loaded.warnings)]
    except Exception as exc:
        result = [type(exc).__name__, str(exc)]
    print("RESULT", json.dumps([name, *result]), flush=True)
"""


@pytest.fixture(scope="module")
def crash_results() -> dict[str, list[str]]:
    """Every crasher loaded once, in one subprocess; a case the process died in (or timed
    out in) is reported as such, the cases after it as not reached."""
    try:
        proc = subprocess.run([sys.executable, "-c", _RUNNER, str(HERE)], capture_output=True, text=True,
                              timeout=120)
        out, code = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        code = "timeout"
    results: dict[str, list[str]] = {}
    started = None
    for line in out.splitlines():
        if line.startswith("START "):
            started = line[6:]
        elif line.startswith("RESULT "):
            name, *result = json.loads(line[7:])
            results[name] = result
            started = None
    if started is not None:
        results[started] = ["died", f"the loading process ended with {code} while loading this model"]
    return results


@pytest.mark.parametrize("name", [*CRASHERS, *REINFER_CRASHERS])
def test_inference_crashers_end_as_epoxy_errors(crash_results, name):
    expected = {**CRASHERS, **REINFER_CRASHERS}[name][1]
    assert name in crash_results, "not reached: the loading process died on an earlier model"
    got, message = crash_results[name]
    assert got == expected, message
    if expected == "InvalidGraphError":  # names the node, the attribute and its value
        assert "node '" in message and "attribute '" in message and "refused" in message, message


def test_negative_indices_dims_skip_only_that_node(crash_results):
    """GatherND whose indices have a negative dim (declared, or inferred from Expand to
    [2, -10]) is hidden from inference; the note names it."""
    for name in ("gather_nd_declared_negative_dim", "gather_nd_inferred_negative_dim"):
        assert "skipped node(s) 'gather'" in crash_results[name][1]


@pytest.mark.parametrize(("model", "match"), [
    (layer_norm(2**30), r"node 'norm' \(LayerNormalization\): attribute 'axis' = 1073741824 is outside "
                        r"\[-4, 3\] \(input rank 4\)"),
    (layer_norm(4), r"attribute 'axis' = 4 is outside \[-4, 3\] \(input rank 4\)"),
    (layer_norm(-5, after_relu=True), r"'axis' = -5 is outside \[-4, 3\]"),  # rank known from inference
    (layer_norm(-(2**40), op="RMSNormalization"), r"node 'norm' \(RMSNormalization\): attribute 'axis'"),
    (gather_nd(-1), r"node 'gather' \(GatherND\): attribute 'batch_dims' = -1 is outside \[0, 1\]"),
    (gather_nd(2), r"attribute 'batch_dims' = 2 is outside \[0, 1\]"),
    (split(3), r"node 'split' \(Split\): attribute 'num_outputs' = 3 differs from the node's 2 outputs"),
])
def test_attributes_outside_the_spec_are_invalid_graphs(model, match):
    """The same rules, in process, for values that are invalid but do not crash onnx (those
    that do are above, in a subprocess)."""
    with pytest.raises(InvalidGraphError, match=match) as info:
        load_model(model)
    assert info.value.node in ("norm", "gather", "split")


def test_valid_attributes_load_and_hidden_nodes_come_back_inferred():
    for model in (layer_norm(-1), layer_norm(3, after_relu=True), split(2)):
        load_model(model)
    loaded = load_model(gather_nd(1, (2, 1)))  # hidden from the first passes, then revealed
    node = next(iter(loaded.model.graph))
    assert (node.op_type, node.domain) == ("GatherND", "")
    assert list(node.outputs[0].shape) == [2, 4] and not any("skipped" in w for w in loaded.warnings)
    assert list(loaded.model.opset_imports) == [""]


def _inference_passes(monkeypatch) -> list[bool]:
    """Records each of onnx's shape inferences the loader runs (its data_prop flag)."""
    real, calls = onnx.shape_inference.infer_shapes, []

    def counted(model, *args, **kwargs):
        calls.append(bool(kwargs.get("data_prop")))
        return real(model, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", counted)
    return calls


def test_a_hidden_node_whose_inputs_the_first_pass_knows_is_revealed_without_an_extra_inference(monkeypatch):
    """GatherND with fully known indices (as exported transformers hold): two inferences,
    as for a model without it, and the node comes back inferred."""
    calls = _inference_passes(monkeypatch)
    loaded = load_model(gather_nd(1, (2, 1)))
    assert calls == [False, True]
    node = next(iter(loaded.model.graph))
    assert (node.domain, list(node.outputs[0].shape)) == ("", [2, 4])


def test_a_hidden_node_whose_indices_need_data_propagation_waits_for_it(monkeypatch):
    """Indices expanded to a shape computed from another value's shape: the first pass
    (no data propagation) cannot know their dims, so the hidden node waits for the pass that
    propagates them, and is then revealed and inferred; with a negative dim there it stays
    hidden and the note names it."""
    def model(extra_dim: int) -> onnx.ModelProto:
        nodes = [helper.make_node("Shape", ["s"], ["dims"], name="shape"),
                 helper.make_node("Concat", ["dims", "extra"], ["target"], name="concat", axis=0),
                 helper.make_node("Expand", ["z", "target"], ["indices"], name="expand"),
                 helper.make_node("GatherND", ["data", "indices"], ["y"], name="gather")]
        return _model(nodes, [_vi("data", [2, 3, 4]), _vi("z", [1, 1], TensorProto.INT64), _vi("s", [2])],
                      [_vi("y", None)], [numpy_helper.from_array(np.array([extra_dim], np.int64), "extra")])

    calls = _inference_passes(monkeypatch)
    loaded = load_model(model(1))
    assert calls == [False, True, True]
    gather = next(n for n in loaded.model.graph if n.op_type == "GatherND")
    assert (gather.domain, list(gather.outputs[0].shape)) == ("", [2, 3, 4])
    calls.clear()
    loaded = load_model(model(-10))
    assert calls == [False, True, True]
    assert any("skipped node(s) 'gather'" in w for w in loaded.warnings)


def test_a_models_own_node_in_the_hiding_domain_keeps_its_domain(make_registry):
    """The domain nodes are hidden in during inference is the loader's own: a model's node
    written in it is not 'restored' into an ONNX op (it used to run silently as a Relu); it is
    an op no provider knows, said by name."""
    import epoxy

    hidden = "ai.epoxy.hidden_from_inference"
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="relu", domain=hidden)], [_vi("x", [2])],
                   [_vi("y", [2])])
    model.opset_import.append(helper.make_opsetid(hidden, 1))
    loaded = load_model(model)
    assert [(n.op_type, n.domain) for n in loaded.model.graph] == [("Relu", hidden)]
    with pytest.raises(epoxy.UnsupportedOpError, match=rf"node 'relu' \({hidden}::Relu-1\)"):
        epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"], registry=make_registry())


def test_absurd_declared_rank_is_refused_before_it_is_walked():
    """A 100,000-dim input took 4 s to load (inference and the IR walk shapes dim by dim)."""
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_vi("x", [1] * 100_000)], [_vi("y", None)])
    with pytest.raises(InvalidGraphError, match=r"value 'x' is declared with 100,000 dims; ranks above 1024"):
        load_model(model)


# -- sizes taken from declarations, refused before numpy allocates them -----------------------
def _initializer_model(tensor: onnx.TensorProto) -> onnx.ModelProto:
    return _model([helper.make_node("Identity", [tensor.name], ["y"], name="id")], [], [_vi("y", None,
                  tensor.data_type)], [tensor])


@pytest.mark.parametrize(("dtype", "fill"), [
    (TensorProto.INT4, None), (TensorProto.INT4, "raw"), (TensorProto.UINT4, "int32"),
    (TensorProto.FLOAT4E2M1, None), (TensorProto.FLOAT, None), (TensorProto.STRING, None),
])
def test_tensor_with_less_data_than_its_dims_is_refused(dtype, fill):
    """2**50 elements (no machine has the address space): before the fix, numpy tried."""
    tensor = onnx.TensorProto(name="w", data_type=dtype, dims=[2**25, 2**25])
    if fill == "raw":
        tensor.raw_data = bytes(8)
    elif fill == "int32":
        tensor.int32_data.extend([0] * 4)
    with pytest.raises(InvalidGraphError, match=r"initializer 'w' declares dims \[33554432, 33554432\] "
                                                r"\(1,125,899,906,842,624 elements of \w+\) but holds data for \d+"):
        load_model(_initializer_model(tensor).SerializeToString())


def test_negative_initializer_dims_are_refused():
    tensor = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    tensor.dims[:] = [-2, -2]
    with pytest.raises(InvalidGraphError, match=r"initializer 'w' has a negative dim in \[-2, -2\]"):
        load_model(_initializer_model(tensor))


def _sparse_model(dims, indices, values=(1.0, 2.0)) -> onnx.ModelProto:
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array(values, np.float32), "w"),
                                       numpy_helper.from_array(np.array(indices, np.int64), "w_idx"), dims)
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"], name="id")], "sparse", [],
                              [_vi("y", None)], sparse_initializer=[sparse])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_sparse_tensor_too_big_to_densify_is_refused_without_a_limit():
    with pytest.raises(ResourceLimitError, match=r"sparse initializer 'w' \(dims \[33554432, 33554432\]\) needs "
                                                 r"4,503,599,627,370,496 bytes once densified") as info:
        load_model(_sparse_model([2**25, 2**25], [0, 1]))
    assert info.value.value == "w"


def test_sparse_tensor_above_the_memory_limit_is_refused():
    with pytest.raises(ResourceLimitError, match=r"sparse initializer 'w' \(dims \[1024, 1024\]\) needs "
                                                 r"4,194,304 bytes, above memory_limit_bytes=1,048,576"):
        load_model(_sparse_model([1024, 1024], [0, 1]), memory_limit=1 << 20)


@pytest.mark.parametrize(("indices", "match"), [
    ([0, 6], r"an index lies outside \[0, 6\)"),
    ([-1, 0], r"an index lies outside \[0, 6\)"),  # numpy would wrap it silently
    ([[0, 0], [2, 0]], r"an index lies outside the dims \[2, 3\]"),
    ([0, 1, 2], r"3 indices for 2 values"),
])
def test_sparse_layout_errors_name_the_tensor(indices, match):
    with pytest.raises(InvalidGraphError, match=r"sparse initializer 'w': " + match):
        load_model(_sparse_model([2, 3], indices))


def test_sparse_tensor_densifies():
    loaded = load_model(_sparse_model([2, 3], [1, 5]))
    dense = loaded.model.graph.initializers["w"].const_value.numpy()
    np.testing.assert_array_equal(dense, [[0, 1, 0], [0, 0, 2]])


# -- external data of sparse tensors, odd locations --------------------------------------------
def _save_sparse_external(folder: Path, location: str) -> Path:
    """A model whose sparse initializer's values live in ``location`` (relative to ``folder``)."""
    model = _sparse_model([2, 3], [1, 5])
    values = model.graph.sparse_initializer[0].values
    data = values.raw_data
    values.ClearField("raw_data")
    values.data_location = TensorProto.EXTERNAL
    values.external_data.add(key="location", value=location)
    values.external_data.add(key="length", value=str(len(data)))
    target = (folder / location)
    if target.parent.is_dir():
        target.write_bytes(data)
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_sparse_external_data_is_read_beside_the_model(tmp_path, monkeypatch):
    path = _save_sparse_external(tmp_path, "values.bin")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # before the fix, read relative to the working directory
    dense = load_model(path).model.graph.initializers["w"].const_value.numpy()
    np.testing.assert_array_equal(dense, [[0, 1, 0], [0, 0, 2]])


@pytest.mark.parametrize(("location", "match"), [
    ("../values.bin", "outside the model's folder"),
    ("/etc/passwd", "absolute locations are refused"),
    ("link.bin", "outside the model's folder"),
])
def test_sparse_external_data_is_confined_to_the_models_folder(tmp_path, monkeypatch, location, match):
    inner = tmp_path / "model"
    inner.mkdir()
    (tmp_path / "values.bin").write_bytes(np.array([1, 2], np.float32).tobytes())
    (inner / "link.bin").symlink_to(tmp_path / "values.bin")
    path = _save_sparse_external(inner, location)
    monkeypatch.chdir(inner)  # "../values.bin" exists from here: it must not be read
    with pytest.raises(ModelLoadError, match=rf"sparse initializer 'w' values external data '{location}'.*{match}"):
        load_model(path)


def test_overlong_external_location_is_a_model_load_error(tmp_path):
    tensor = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="a" * 5000)
    path = tmp_path / "m.onnx"
    path.write_bytes(_initializer_model(tensor).SerializeToString())
    with pytest.raises(ModelLoadError, match=r"initializer 'w' external data 'a{80}'\.\.\. \(5,000 characters\): "
                                             r"cannot be opened: File name too long"):
        load_model(path)


def test_overlong_model_path_is_a_model_load_error(tmp_path):
    with pytest.raises(ModelLoadError, match=r"cannot open the model file '.*\(\d{1,3},\d{3} characters\): "
                                             r"File name too long"):
        load_model(tmp_path / ("m" * 5000))


# -- memory-mapped model files (>= 1 MiB): the wire reader -------------------------------------
def _large_file(tmp_path: Path, tensor: onnx.TensorProto) -> Path:
    pad = numpy_helper.from_array(np.zeros(MAPPED_FILE_MIN_BYTES // 4, np.float32), "pad")
    model = _model([helper.make_node("Identity", ["w"], ["y"], name="id")], [], [_vi("y", None, F)], [tensor, pad])
    path = tmp_path / "big.onnx"
    path.write_bytes(model.SerializeToString())
    assert path.stat().st_size >= MAPPED_FILE_MIN_BYTES
    return path


@pytest.mark.parametrize("data_type", [0, 999])
def test_mapped_initializer_of_unknown_type_is_the_error_bytes_give(tmp_path, data_type):
    tensor = numpy_helper.from_array(np.zeros((256, 256), np.float32), "w")
    tensor.data_type = data_type
    path = _large_file(tmp_path, tensor)
    with pytest.raises(ModelLoadError) as from_bytes:
        load_model(path.read_bytes())
    with pytest.raises(ModelLoadError) as from_file:  # was a bare KeyError from the wire reader
        load_model(path)
    assert type(from_file.value) is type(from_bytes.value)
    assert str(from_file.value).replace(str(path), "<bytes>") == str(from_bytes.value)
    assert f"initializer 'w' has data type {data_type}" in str(from_file.value)


def test_mapped_4bit_initializer_loads(tmp_path):
    """Packed 4-bit raw data (half a byte per element) is not a size mismatch."""
    values = (np.arange(300_000) % 16 - 8).astype(np.int8)
    tensor = helper.make_tensor("w", TensorProto.INT4, [300_000], values.tolist())
    tensor = numpy_helper.from_array(numpy_helper.to_array(tensor), "w")  # raw, packed
    loaded = load_model(_large_file(tmp_path, tensor))
    np.testing.assert_array_equal(loaded.model.graph.initializers["w"].const_value.numpy().astype(np.int8), values)
