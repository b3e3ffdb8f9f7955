"""Ahead-of-time compiled models (#18): write, read back, and every way a blob is not used."""

from __future__ import annotations

import json
import mmap
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from aot_fakes import aot_factory
from fakes import Factory
from onnx import TensorProto, helper

import epoxy
from epoxy.aot.format import CONTEXT_DOMAIN, METADATA_KEY
from epoxy.errors import ModelLoadError

GROUP = ["add", "relu"]


@pytest.fixture(autouse=True)
def _own_key(tmp_path_factory, monkeypatch):
    """Signatures with a key of this test session, never the user's."""
    monkeypatch.setenv("EPOXY_COMPILE_KEY", str(tmp_path_factory.getbasetemp() / "compile.key"))


def _model(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4], [0.5, -1.0, 2.0, -0.25])
    nodes = [helper.make_node("Add", ["x", "w"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Neg", ["r"], ["n"], name="neg"),
             helper.make_node("Mul", ["n", "x"], ["y"], name="mul")]
    graph = helper.make_graph(nodes, "g", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


FEED = {"x": np.arange(-6, 6, dtype=np.float32).reshape(3, 4)}


def _compile(tmp_path, make_registry, embed=True, **kw):
    factory = aot_factory([GROUP])
    registry = make_registry(factory)
    out = tmp_path / "out" / "m.compiled.onnx"
    summary = epoxy.compile_model(_model(tmp_path / "m.onnx"), out, providers=["fuser", "cpu"], embed=embed,
                                  registry=registry, **kw)
    return out, summary, factory


def _load(out, make_registry, **behaviour):
    factory = aot_factory([GROUP], **behaviour)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = epoxy.InferenceSession(str(out), providers=["fuser", "cpu"], registry=make_registry(factory))
    return session, factory.made[0], [str(w.message) for w in caught]


def _expected(tmp_path, make_registry):
    fresh = epoxy.InferenceSession(str(_model(tmp_path / "fresh.onnx")), providers=["fuser", "cpu"],
                                   registry=make_registry(aot_factory([GROUP])))
    return fresh.run(None, FEED)[0]


def test_compiled_model_is_valid_onnx_with_one_context_node(tmp_path, make_registry):
    out, summary, factory = _compile(tmp_path, make_registry)
    proto = onnx.load(out)
    onnx.checker.check_model(proto)
    calls = [n for n in proto.graph.node if n.domain == CONTEXT_DOMAIN]
    assert len(calls) == 1 and [g["label"] for g in summary.groups] == ["fused0"]
    (function,) = proto.functions
    assert [n.name for n in function.node] == GROUP  # the kept nodes
    assert {n.name for n in proto.graph.node} == {"epoxy_context/fused0", "neg", "mul"}
    record = json.loads(next(p.value for p in proto.metadata_props if p.key == METADATA_KEY))
    assert record["partition"] == {"add": "fuser", "relu": "fuser", "neg": "cpu", "mul": "cpu"}
    assert factory.made[0].compiled == [tuple(GROUP)]


def test_loading_uses_the_blob_instead_of_compiling(tmp_path, make_registry):
    out, _, _ = _compile(tmp_path, make_registry)
    session, provider, caught = _load(out, make_registry)
    assert provider.compiled == [] and provider.imported == [tuple(GROUP)]
    assert provider.capability_calls == 0  # the partition recorded at compile time is used
    assert provider.seen_trust == [True]  # signed with this test session's key
    status = session.partition_report().artifacts["fused0"]
    assert status.startswith("loaded from the compiled blob"), status
    assert session.applied_passes == [] and not caught
    np.testing.assert_array_equal(session.run(None, FEED)[0], _expected(tmp_path, make_registry))
    assert "compiled group fused0: loaded" in session.partition_report().format()


def test_onnxruntime_runs_the_kept_nodes(tmp_path, make_registry):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle here (installed in CI's core session)")
    out, _, _ = _compile(tmp_path, make_registry)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, FEED)[0]
    np.testing.assert_allclose(got, _expected(tmp_path, make_registry), rtol=0, atol=0)


def test_side_file_blob_round_trip_and_inspect(tmp_path, make_registry):
    out, summary, _ = _compile(tmp_path, make_registry, embed=False)
    (side,) = summary.files
    assert side.parent == out.parent and side.name == "m.compiled.fused0.blob"
    info = epoxy.inspect_model(out)
    (group,) = info["groups"]
    assert group["status"] == "ok" and group["blob"] == side.name and group["signed_by_this_user"]
    session, provider, _ = _load(out, make_registry)
    assert provider.imported and not provider.compiled


@pytest.mark.parametrize(("damage", "reason"), [
    (lambda side: side.write_bytes(side.read_bytes()[:-3]), "the record says"),  # cut short
    (lambda side: side.write_bytes(b"X" + side.read_bytes()[1:]), "sha256 differs"),
    (lambda side: side.unlink(), "is missing"),
])
def test_damaged_side_file_is_compiled_again(tmp_path, make_registry, damage, reason):
    out, summary, _ = _compile(tmp_path, make_registry, embed=False)
    damage(summary.files[0])
    session, provider, caught = _load(out, make_registry)
    assert provider.compiled == [tuple(GROUP)] and provider.imported == []
    assert provider.capability_calls == 1  # a blob that cannot be used: the provider is asked again
    status = session.partition_report().artifacts["fused0"]
    assert status.startswith("compiled again") and reason in status, status
    assert any("fused0" in w for w in caught)
    np.testing.assert_array_equal(session.run(None, FEED)[0], _expected(tmp_path, make_registry))


def _edit(out: Path, edit) -> None:
    proto = onnx.load(out)
    edit(proto)
    onnx.save(proto, out)


def _call(proto):
    return next(n for n in proto.graph.node if n.domain == CONTEXT_DOMAIN)


def _set_attr(node, name, value):
    for attr in node.attribute:
        if attr.name == name:
            node.attribute.remove(attr)
            break
    node.attribute.append(helper.make_attribute(name, value))


@pytest.mark.parametrize("path", ["../escape.blob", "/etc/passwd", "sub/../../x.blob"])
def test_blob_path_leaving_the_folder_is_refused(tmp_path, make_registry, path):
    out, _, _ = _compile(tmp_path, make_registry, embed=False)
    _edit(out, lambda p: _set_attr(_call(p), "blob_path", path))
    with pytest.raises(ModelLoadError, match="blob path"):
        _load(out, make_registry)


def test_edited_kept_nodes_are_not_matched_with_the_blob(tmp_path, make_registry):
    out, _, _ = _compile(tmp_path, make_registry)

    def edit(proto):
        proto.functions[0].node[1].op_type = "Neg"  # the body now differs from what was compiled

    _edit(out, edit)
    session, provider, _ = _load(out, make_registry)
    assert provider.imported == [] and "kept nodes differ" in session.partition_report().artifacts["fused0"]
    x = FEED["x"]
    twice_negated = (x + np.float32([0.5, -1.0, 2.0, -0.25])) * x
    np.testing.assert_array_equal(session.run(None, FEED)[0], twice_negated)


def test_edited_record_loses_trust_but_not_integrity(tmp_path, make_registry):
    out, _, _ = _compile(tmp_path, make_registry)
    _edit(out, lambda p: _set_attr(_call(p), "target", "elsewhere"))
    session, provider, _ = _load(out, make_registry)
    assert provider.seen_trust == [False]  # the signature no longer covers the record
    assert "built for 'elsewhere'" in session.partition_report().artifacts["fused0"]


def test_another_users_key_means_untrusted(tmp_path, make_registry, monkeypatch):
    out, _, _ = _compile(tmp_path, make_registry)
    monkeypatch.setenv("EPOXY_COMPILE_KEY", str(tmp_path / "other.key"))
    _, provider, _ = _load(out, make_registry)
    assert provider.seen_trust == [False] and provider.imported  # this provider accepts data blobs


@pytest.mark.parametrize(("behaviour", "says"), [
    ({"refuse": "stale options"}, "refused the blob: stale options"),
    ({"crash": True}, "import_compiled raised RuntimeError: import exploded"),
    ({"target": "gpu"}, "built for 'host'"),
])
def test_refused_or_failing_import_compiles_again(tmp_path, make_registry, behaviour, says):
    out, _, _ = _compile(tmp_path, make_registry)
    session, provider, caught = _load(out, make_registry, **behaviour)
    assert provider.compiled == [tuple(GROUP)]
    assert says in session.partition_report().artifacts["fused0"]
    assert any(says in w for w in caught)
    np.testing.assert_array_equal(session.run(None, FEED)[0], _expected(tmp_path, make_registry))


def test_other_provider_version_compiles_again(tmp_path, make_registry):
    out, _, _ = _compile(tmp_path, make_registry)
    factory = aot_factory([GROUP], version="0.0.2")
    with pytest.warns(RuntimeWarning, match="compiled by fuser 0.0.1, this is 0.0.2"):
        epoxy.InferenceSession(str(out), providers=["fuser", "cpu"], registry=make_registry(factory))
    assert factory.made[0].compiled == [tuple(GROUP)] and factory.made[0].imported == []


def test_session_without_the_provider_runs_the_kept_nodes(tmp_path, make_registry):
    out, _, _ = _compile(tmp_path, make_registry)
    with pytest.warns(RuntimeWarning, match="does not use"):
        session = epoxy.InferenceSession(str(out), providers=["cpu"], registry=make_registry())
    assert set(session.partition_report().summary()) == {"cpu"}
    np.testing.assert_array_equal(session.run(None, FEED)[0], _expected(tmp_path, make_registry))


def test_provider_without_export_keeps_plain_nodes(tmp_path, make_registry):
    from fakes import fuser_factory

    out = tmp_path / "plain.onnx"
    summary = epoxy.compile_model(_model(tmp_path / "m.onnx"), out, providers=["fuser", "cpu"],
                                  registry=make_registry(fuser_factory([GROUP])))
    assert summary.groups == [] and "cannot export" in summary.kept[0]["reason"]
    proto = onnx.load(out)
    assert not any(n.domain == CONTEXT_DOMAIN for n in proto.graph.node) and not proto.functions
    session = epoxy.InferenceSession(str(out), providers=["cpu"], registry=make_registry())
    np.testing.assert_array_equal(session.run(None, FEED)[0], _expected(tmp_path, make_registry))


def test_compile_device_lets_a_provider_without_devices_compile(tmp_path, make_registry):
    from aot_fakes import AotFuser

    from epoxy.contract import Device, ProviderUnavailable

    class ConverterOnly(Factory):
        def devices(self):
            raise ProviderUnavailable("runs on another OS only")

        def compile_devices(self):
            return [Device(self.name, "converter", 0, "converter")]

    factory = ConverterOnly("fuser", lambda d, o: AotFuser(d, [GROUP]), 80)
    out = tmp_path / "c.onnx"
    summary = epoxy.compile_model(_model(tmp_path / "m.onnx"), out, providers=["fuser", "cpu"],
                                  registry=make_registry(factory))
    assert [g["label"] for g in summary.groups] == ["fused0"]
    with pytest.warns(RuntimeWarning, match="runs on another OS only"):  # a plain session cannot use it
        epoxy.InferenceSession(str(out), providers=["fuser", "cpu"], registry=make_registry(factory))


def test_output_must_not_overwrite_the_model(tmp_path, make_registry):
    path = _model(tmp_path / "m.onnx")
    with pytest.raises(epoxy.InvalidArgumentError, match="overwrite"):
        epoxy.compile_model(path, path, providers=["cpu"], registry=make_registry())


def test_missing_function_is_a_load_error(tmp_path, make_registry):
    out, _, _ = _compile(tmp_path, make_registry)
    _edit(out, lambda p: p.functions.pop())
    with pytest.raises(ModelLoadError, match="does not define"):
        _load(out, make_registry)


def test_recorded_partition_is_not_trusted_for_another_graph(tmp_path, make_registry):
    out, _, _ = _compile(tmp_path, make_registry)
    def rename(proto):
        next(n for n in proto.graph.node if n.name == "neg").name = "renamed"

    _edit(out, rename)
    session, provider, _ = _load(out, make_registry)
    assert provider.capability_calls == 1 and provider.imported == [tuple(GROUP)]
    np.testing.assert_array_equal(session.run(None, FEED)[0], _expected(tmp_path, make_registry))


# -- the CLI ------------------------------------------------------------------------------------
@pytest.fixture
def default_with_fuser(make_registry, monkeypatch):
    from epoxy import plugins

    monkeypatch.setattr(plugins, "_default_registry", make_registry(aot_factory([GROUP])))


def test_cli_compile_then_inspect(tmp_path, default_with_fuser, capsys):
    from epoxy.cli.main import main

    model, out = _model(tmp_path / "m.onnx"), tmp_path / "c.onnx"
    assert main(["compile", str(model), "-o", str(out), "--providers", "fuser,cpu", "--external"]) == 0
    captured = capsys.readouterr()
    assert "compiling fused0 on fuser (2 nodes)" in captured.err  # progress
    assert "1 compiled group(s)" in captured.out and "in c.fused0.blob" in captured.out
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "fused0: fuser 0.0.1, 2 nodes" in text and "signed by this user" in text and text.rstrip().endswith("ok")
    (tmp_path / "c.fused0.blob").write_bytes(b"tampered")
    assert main(["inspect", str(out), "--json"]) == 1  # a group that would be compiled again
    info = json.loads(capsys.readouterr().out)
    assert "the record says" in info["groups"][0]["status"]


def test_cli_compile_refuses_a_bad_option(tmp_path, default_with_fuser, capsys):
    from epoxy.cli.main import main

    model = _model(tmp_path / "m.onnx")
    assert main(["compile", str(model), "-o", str(tmp_path / "c.onnx"), "--option", "nodot=1"]) == 1
    assert "expected PROVIDER.KEY=VALUE" in capsys.readouterr().err


def test_inspect_a_plain_model(tmp_path, capsys):
    from epoxy.cli.main import main

    assert main(["inspect", str(_model(tmp_path / "m.onnx"))]) == 0
    assert "not an epoxy compiled model" in capsys.readouterr().out


# -- onnxruntime's EPContext session config entries ----------------------------------------------
@pytest.mark.parametrize("embed", ["1", "0"])
def test_ep_context_enable_writes_the_compiled_model(tmp_path, make_registry, embed):
    options = epoxy.SessionOptions()
    options.add_session_config_entry("ep.context_enable", "1")
    options.add_session_config_entry("ep.context_embed_mode", embed)
    model = _model(tmp_path / "m.onnx")
    session = epoxy.InferenceSession(str(model), options, providers=["fuser", "cpu"],
                                     registry=make_registry(aot_factory([GROUP])))
    written = tmp_path / "m_ctx.onnx"  # onnxruntime's default name
    assert written.exists() and f"compiled model written to {written} (1 compiled group(s))" in \
        session.partition_report().notes
    assert (tmp_path / "m_ctx.fused0.blob").exists() == (embed == "0")
    np.testing.assert_array_equal(session.run(None, FEED)[0], _expected(tmp_path, make_registry))
    _, provider, _ = _load(written, make_registry)
    assert provider.imported == [tuple(GROUP)] and provider.compiled == []


def test_ep_context_file_path_and_bytes(tmp_path, make_registry):
    options = epoxy.SessionOptions()
    options.add_session_config_entry("ep.context_enable", "1")
    data = _model(tmp_path / "m.onnx").read_bytes()
    with pytest.raises(epoxy.InvalidArgumentError, match="set ep.context_file_path"):
        epoxy.InferenceSession(data, options, providers=["fuser", "cpu"], registry=make_registry(aot_factory([GROUP])))
    options.add_session_config_entry("ep.context_file_path", str(tmp_path / "sub" / "ctx.onnx"))
    epoxy.InferenceSession(data, options, providers=["fuser", "cpu"], registry=make_registry(aot_factory([GROUP])))
    assert onnx.load(tmp_path / "sub" / "ctx.onnx").functions


# -- onnxruntime's compile API: ModelCompiler and SessionOptions.add_provider --------------------
def test_model_compiler_with_add_provider(tmp_path, make_registry):
    options = epoxy.SessionOptions()
    options.add_provider("fuser", {})
    assert options.has_providers()
    registry = make_registry(aot_factory([GROUP]))
    model = _model(tmp_path / "m.onnx")
    compiler = epoxy.ModelCompiler(options, str(model), embed_compiled_data_into_model=True, registry=registry)
    compiler.compile_to_file()
    written = tmp_path / "m_ctx.onnx"
    assert [n.op_type for n in onnx.load(written).graph.node if n.domain == CONTEXT_DOMAIN] == ["fused0"]
    assert options.graph_optimization_level == epoxy.GraphOptimizationLevel.ORT_ENABLE_ALL  # put back
    chunks: list[bytes] = []
    compiler.compile_to_stream(chunks.append)
    session = epoxy.InferenceSession(b"".join(chunks), options, registry=make_registry(aot_factory([GROUP])))
    assert session.partition_report().artifacts["fused0"].startswith("loaded from the compiled blob")
    with pytest.raises(epoxy.InvalidArgumentError, match="ERROR_IF_OUTPUT_FILE_EXISTS"):
        epoxy.ModelCompiler(options, str(model), flags=epoxy.OrtCompileApiFlags.ERROR_IF_OUTPUT_FILE_EXISTS,
                            registry=registry).compile_to_file(written)


def test_model_compiler_error_if_nothing_compiled(tmp_path, make_registry):
    options = epoxy.SessionOptions()
    options.add_provider("cpu")
    out = tmp_path / "none.onnx"
    compiler = epoxy.ModelCompiler(options, str(_model(tmp_path / "m.onnx")), registry=make_registry(),
                                   flags=epoxy.OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED)
    with pytest.raises(epoxy.InvalidArgumentError, match="no nodes were compiled"):
        compiler.compile_to_file(out)
    assert not out.exists()
    with pytest.raises(epoxy.InvalidArgumentError, match="added already"):
        options.add_provider("cpu")


def test_context_function_calling_itself_is_a_clear_error(tmp_path, make_registry):
    domain = CONTEXT_DOMAIN
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)]
    body = [helper.make_node("g0", ["x"], ["y"], domain=domain, name="inner")]
    function = helper.make_function(domain, "g0", ["x"], ["y"], body, opsets, attributes=[])
    call = helper.make_node("g0", ["x"], ["y"], domain=domain, name="outer")
    model = helper.make_model(helper.make_graph([call], "g", [x], [y]), opset_imports=opsets, functions=[function])
    model.ir_version = 9
    with pytest.raises(epoxy.EpoxyError, match="recursive|does not define"):
        epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"], registry=make_registry())


def test_recorded_partition_answers_for_every_provider_it_names(tmp_path, make_registry):
    from aot_fakes import CountingKernels, counting_cpu_factory

    out, _, _ = _compile(tmp_path, make_registry)
    CountingKernels.capability_calls = 0
    registry = make_registry(aot_factory([GROUP]), counting_cpu_factory(), with_cpu=False)
    session = epoxy.InferenceSession(str(out), providers=["fuser", "cpu"], registry=registry)
    assert CountingKernels.capability_calls == 0  # cpu answered at compile time, same version
    assert session.partition_report().summary() == {"fuser": 2, "cpu": 2}
    np.testing.assert_array_equal(session.run(None, FEED)[0], _expected(tmp_path, make_registry))
    with pytest.warns(RuntimeWarning, match="does not use"):  # another provider set: asked again
        epoxy.InferenceSession(str(out), providers=["cpu"], registry=registry)
    assert CountingKernels.capability_calls == 1


def test_small_blobs_are_embedded_large_ones_go_beside(tmp_path, make_registry, monkeypatch):
    from epoxy.aot import writer

    out, summary, _ = _compile(tmp_path, make_registry, embed=None)
    assert summary.groups[0]["where"] == "embedded" and not summary.files
    monkeypatch.setattr(writer, "EMBED_LIMIT_BYTES", 10)
    out, summary, _ = _compile(tmp_path, make_registry, embed=None)
    assert summary.groups[0]["where"].startswith("in ") and summary.files


def test_weights_only_compiled_groups_read_stay_in_the_file(tmp_path):
    from epoxy.aot.reader import CompiledModelReader
    from epoxy.load.wire import load_mapped

    big = np.arange(1 << 16, dtype=np.float32)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(CONTEXT_DOMAIN, 1)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1 << 16])
    nodes = [helper.make_node("g", ["x", "only_group"], ["a"], domain=CONTEXT_DOMAIN, name="ctx"),
             helper.make_node("Add", ["a", "shared"], ["y"], name="add")]
    inits = [onnx.numpy_helper.from_array(big, "only_group"), onnx.numpy_helper.from_array(big + 1, "shared")]
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=opsets)
    assert CompiledModelReader.file_backed(model.graph) == {"only_group"}
    onnx.save(model, tmp_path / "m.onnx")
    _, arrays = load_mapped(tmp_path / "m.onnx", CompiledModelReader.file_backed)
    def file_backed(array):
        while array is not None and not isinstance(array, mmap.mmap):
            array = array.obj if isinstance(array, memoryview) else getattr(array, "base", None)
        return array is not None

    assert file_backed(arrays["only_group"]) and not file_backed(arrays["shared"])  # a view vs a copy
    np.testing.assert_array_equal(arrays["only_group"], big)
