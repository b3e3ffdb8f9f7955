"""Provider surface on any OS: discovery, options, laziness, quiet conversion, cache, declines, grouping."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
from coreml_harness import convert, declined_reason, model, rand
from onnx import TensorProto, helper

import epoxy
from epoxy.errors import InvalidArgumentError
from epoxy_ep_coreml.factory import CoreMLProviderFactory
from epoxy_ep_coreml.options import parse_options

N = helper.make_node
LINUX_ONLY = pytest.mark.skipif(sys.platform == "darwin", reason="checks the non-macOS behaviour")


@LINUX_ONLY
def test_listed_unavailable_with_reason():
    from epoxy.plugins import ProviderRegistry

    entry = ProviderRegistry().get("coreml")
    assert entry is not None, "the epoxy.providers entry point 'coreml' is not installed"
    assert entry.distribution == "epoxy-ep-coreml"
    assert not entry.available
    assert entry.unavailable_reason == "Core ML runs on macOS only"


@LINUX_ONLY
def test_devices_raise_provider_unavailable():
    with pytest.raises(epoxy.contract.ProviderUnavailable, match="macOS only"):
        CoreMLProviderFactory().devices()


@LINUX_ONLY
def test_session_falls_back_to_cpu():
    feeds = {"x": rand(2, 3)}
    m = model(N("Relu", ["x"], ["y"]), feeds)
    with pytest.warns(RuntimeWarning, match="Core ML runs on macOS only"):
        sess = epoxy.InferenceSession(m, providers=["coreml", "cpu"])
    assert sess.get_providers() == ["cpu"]
    np.testing.assert_array_equal(sess.run(None, feeds)[0], np.maximum(feeds["x"], 0))


def test_plugin_import_does_not_import_coremltools():
    code = ("import sys, epoxy_ep_coreml, epoxy_ep_coreml.plugin, epoxy_ep_coreml.factory; "
            "from epoxy.plugins import ProviderRegistry; ProviderRegistry().get('coreml').devices(); "
            "print('coremltools' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_conversion_is_quiet(tmp_path):
    """No coremltools import warnings, no progress bars: only what the CLI prints itself."""
    path = tmp_path / "m.onnx"
    import onnx

    onnx.save(model(N("Relu", ["x"], ["y"]), {"x": rand(2, 3)}), path)
    code = ("import sys; from epoxy_ep_coreml.compile_tool import main; "
            f"sys.exit(main([{str(path)!r}, '-o', {str(tmp_path / 'out')!r}]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    assert "1/1 nodes converted in 1 group(s)" in out.stdout
    assert "Failed to load" not in out.stdout and "Running MIL" not in out.stdout


@pytest.mark.parametrize("options,match", [
    ({"compute_unit": "ALL"}, "unknown options \\['compute_unit'\\]"),
    ({"compute_units": "NPU"}, "compute_units"),
    ({"compute_precision": "int8"}, "compute_precision"),
    ({"minimum_deployment_target": "iOS14"}, "minimum_deployment_target"),
    ({"minimum_deployment_target": 17}, r"minimum_deployment_target=17; expected one of \['iOS15'"),
    ({"cache_dir": 3}, "cache_dir"),
])
def test_bad_options_raise_invalid_argument(options, match):
    with pytest.raises(InvalidArgumentError, match=match):
        parse_options(options)


def test_options_are_normalized():
    opts = parse_options({"compute_units": "cpu_and_ne", "compute_precision": "float16",
                          "minimum_deployment_target": "macos14"})
    assert (opts.compute_units, opts.compute_precision, opts.minimum_deployment_target) == (
        "CPU_AND_NE",
        "fp16",
        "macOS14",
    )
    assert opts.opset == 17
    assert parse_options({}).compute_precision == "fp32"


def test_factory_create_validates_options():
    device = epoxy.contract.Device("coreml", "apple")
    with pytest.raises(InvalidArgumentError, match="unknown options"):
        CoreMLProviderFactory().create(device, {"bogus": 1})


def test_cache_reuses_packages_and_keys_on_options(tmp_path):
    feeds = {"x": rand(1, 2, 5, 5)}
    m = model([N("Conv", ["x", "w"], ["c"]), N("Relu", ["c"], ["y"])], feeds, consts={"w": rand(3, 2, 3, 3)})
    first = convert(m, tmp_path)
    again = convert(m, tmp_path)
    assert [g["cached"] for g in first.groups] == [False]
    assert [g["cached"] for g in again.groups] == [True]
    assert first.packages == again.packages
    fp16 = convert(m, tmp_path, {"compute_precision": "fp16"})
    assert fp16.packages != first.packages
    units = convert(m, tmp_path, {"compute_units": "CPU_ONLY"})  # load-time only: same package
    assert units.packages == first.packages
    target = convert(m, tmp_path, {"minimum_deployment_target": "iOS17"})
    assert target.packages != first.packages
    other = convert(model([N("Conv", ["x", "w"], ["c"]), N("Relu", ["c"], ["y"])], feeds,
                          consts={"w": rand(3, 2, 3, 3)}), tmp_path)
    assert other.packages != first.packages  # different weights, different key


def test_manifest_and_summary(tmp_path):
    feeds = {"in/put:0": rand(2, 3)}
    m = model([N("Relu", ["in/put:0"], ["r"]), N("Sigmoid", ["r"], ["out.0"])], feeds, outputs=["out.0", "r"])
    result = convert(m, tmp_path)
    (package,) = result.packages
    manifest = json.loads(package.with_suffix(".json").read_text())
    assert manifest["inputs"] == [{"onnx": "in/put:0", "coreml": "input_0", "dtype": "float32", "shape": [2, 3]}]
    assert [(o["onnx"], o["coreml"]) for o in manifest["outputs"]] == [("r", "output_0"), ("out.0", "output_1")]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["coreml_nodes"] == 2 and summary["groups"] == 1
    packages, small = result  # tuple-unpacking form
    assert packages == result.packages and small["nodes"] == 2


def test_cli_reports_declines(tmp_path, capsys):
    import onnx

    from epoxy_ep_coreml.compile_tool import main

    feeds = {"x": rand(2, 3)}
    path = tmp_path / "m.onnx"
    onnx.save(model([N("Relu", ["x"], ["r"]), N("Round", ["r"], ["y"])], feeds), path)
    assert main([str(path), "-o", str(tmp_path / "out"), "--report"]) == 0
    text = capsys.readouterr().out
    assert "1/2 nodes converted" in text
    assert "not converted: Round: Round has no Core ML (MIL) translation" in text
    assert main([str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "out")]) == 1


def test_compile_model_rejects_cache_dir_option(tmp_path):
    with pytest.raises(InvalidArgumentError, match="out_dir"):
        convert(model(N("Relu", ["x"], ["y"]), {"x": rand(2)}), tmp_path, {"cache_dir": str(tmp_path)})


def _dynamic_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    g = helper.make_graph([N("Relu", ["x"], ["y"])], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("build,op,reason", [
    (_dynamic_model, "Relu", "dynamic shape"),
    (lambda: model(N("Relu", ["x"], ["y"]), {"x": np.ones((2, 3), np.float64)}), "Relu", "dtype float64"),
    (lambda: model(N("Conv", ["x", "w"], ["y"]), {"x": rand(1, 2, 5, 5), "w": rand(3, 2, 3, 3)}), "Conv",
     "must be a constant"),
    (lambda: model(N("NonZero", ["x"], ["y"]), {"x": rand(2, 3)}), "NonZero", "no Core ML (MIL) translation"),
    (lambda: model(N("Resize", ["x", "", "s"], ["y"], mode="nearest"), {"x": rand(1, 1, 4, 4)},
                   consts={"s": np.array([1, 1, 1.5, 1.5], np.float32)}, opset=13), "Resize", "integer upscales"),
    (lambda: model(N("Dropout", ["x", "r", "t"], ["y"]), {"x": rand(2, 3)},
                   consts={"r": np.array(0.5, np.float32), "t": np.array(True)}, opset=13), "Dropout", "training mode"),
    (lambda: model(N("Div", ["a", "b"], ["y"]), {"a": np.ones((2, 3), np.int64), "b": np.ones((2, 3), np.int64)}),
     "Div", "truncates"),
    (lambda: model(N("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2]), {"x": rand(1, 1, 4, 4)}, outputs=["y", "i"]),
     "MaxPool", "output 1"),
    (lambda: model(N("Relu", ["x"], ["y"]), {"x": rand(1, 1, 1, 1, 1, 2)}), "Relu", "rank 6 > 5"),
])
def test_decline_reasons(build, op, reason, tmp_path):
    assert reason in declined_reason(build(), tmp_path, op)


def test_groups_are_convex_around_unsupported_nodes(tmp_path):
    # r feeds both the cpu-only Round and the Add that also reads Round's output:
    # {Relu, Add} would not be convex, so they must land in separate groups.
    feeds = {"x": rand(2, 3)}
    m = model([N("Relu", ["x"], ["r"]), N("Round", ["r"], ["u"]), N("Add", ["r", "u"], ["a"]),
               N("Sigmoid", ["a"], ["y"])], feeds)
    result = convert(m, tmp_path)
    groups = sorted(sorted(g["nodes"]) for g in result.groups)
    assert len(groups) == 2
    assert [len(g) for g in groups] == [1, 2] or [len(g) for g in groups] == [2, 1]
    placed = {d.node: d.provider for d in result.report.nodes}
    assert placed["Round_1"] == "cpu"


def test_independent_branches_share_a_group(tmp_path):
    # a cpu node on one branch does not split nodes that do not depend on it
    feeds = {"x": rand(2, 3)}
    m = model([N("Relu", ["x"], ["r"]), N("Sigmoid", ["r"], ["s"]), N("Tanh", ["r"], ["t"]),
               N("Add", ["s", "t"], ["y"]), N("Round", ["x"], ["z"])], feeds, outputs=["y", "z"])
    result = convert(m, tmp_path)
    assert len(result.groups) == 1 and len(result.groups[0]["nodes"]) == 4


def test_constant_only_chain_is_left_to_cpu_and_baked(tmp_path):
    # ConstantOfShape reading an initializer is folded; alone it would be a group without
    # run-time inputs, so it stays on cpu while the consumer group bakes its value
    feeds = {"x": rand(2, 3)}
    m = model([N("ConstantOfShape", ["shape"], ["c"], value=helper.make_tensor("v", 1, [1], [2.0])),
               N("Round", ["x"], ["r"]), N("Mul", ["r", "c"], ["y"])], feeds,
              consts={"shape": np.array([2, 3], np.int64)})
    result = convert(m, tmp_path)
    placed = {d.op_type: d.provider for d in result.report.nodes}
    assert placed["Round"] == "cpu" and placed["Mul"] == "coreml"
    # the core optimizer may already fold it into an initializer; either way it is baked in
    assert placed.get("ConstantOfShape", "cpu") == "cpu"
    assert result.groups[0]["baked_inputs"] == ["c"]


def test_session_report_names_coreml_declines():
    # on any OS a session that lists coreml says why nodes did not go there (or that it is unavailable)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = epoxy.InferenceSession(model(N("Relu", ["x"], ["y"]), {"x": rand(2)}), providers=["coreml", "cpu"])
    text = str(sess.partition_report())
    assert "coreml" in text
