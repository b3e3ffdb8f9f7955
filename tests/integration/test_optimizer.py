"""The optimizer with the real cpu provider: which passes fire on the light_* models and a
BERT-style encoder, and that outputs agree with the unoptimized session."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy.contract import Device
from epoxy.kit import KernelProvider
from epoxy.testing import registry_with

ROOT = Path(__file__).resolve().parents[2]


def _load_bench_models():  # type: ignore[no-untyped-def]
    # by path: other test directories have a ``models`` module of their own on sys.path
    spec = importlib.util.spec_from_file_location("epoxy_bench_models", ROOT / "bench" / "models.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


bench_models = _load_bench_models()

CORE_PASSES = {
    # passes expected to change each light model at level "basic" (weights come from
    # ConstantOfShape in these IR-3 models: legacy inputs + folding make them constants)
    "bvlc_alexnet": {"LegacyInitializerInputsPass", "DropoutEliminationPass", "ConstantFoldingPass"},
    "densenet121": {"LegacyInitializerInputsPass", "ConstantFoldingPass", "ConvBatchNormFoldPass",
                    "BatchNormAffineFoldPass"},  # the scale after each Conv+BN goes with the BN
    "inception_v1": {"LegacyInitializerInputsPass", "DropoutEliminationPass", "ConstantFoldingPass"},
    "inception_v2": {"LegacyInitializerInputsPass", "ConstantFoldingPass", "ConvBatchNormFoldPass"},
    "resnet50": {"LegacyInitializerInputsPass", "ConstantFoldingPass", "ConvBatchNormFoldPass"},
    "shufflenet": {"LegacyInitializerInputsPass", "ConstantFoldingPass", "ConvBatchNormFoldPass"},
    "squeezenet": {"LegacyInitializerInputsPass", "DropoutEliminationPass", "ConstantFoldingPass"},
    "vgg19": {"LegacyInitializerInputsPass", "DropoutEliminationPass", "ConstantFoldingPass"},
    "zfnet512": {"LegacyInitializerInputsPass", "ConstantFoldingPass"},
}

LIGHT = {m.tags[1]: m for m in bench_models.light_models()}


#: direct convolution summation: the light models' constant weights drive activations to
#: ~1e10 before a softmax, where Winograd's different rounding between prepacked (optimized)
#: and run-time weights would decide the comparison, not the passes under test
EXACT_CPU = [("cpu", {"conv_winograd": "off"})]


def _session(path_or_model, level):  # type: ignore[no-untyped-def]
    return epoxy.InferenceSession(path_or_model, providers=EXACT_CPU,
                                  sess_options=epoxy.SessionOptions(graph_optimization_level=level))


def _with_logits(path: Path) -> onnx.ModelProto:
    """The model with the input of a final Softmax as one more output: the light models'
    constant weights drive logits to ~1e10, where one ulp (~1e3) between two channels turns a
    uniform softmax (0.001) into 0 / 0.002. An unoptimized session's run-time weights go
    through OpenBLAS, whose Haswell kernels (AVX2 CPUs) round the rows of one product
    differently: the logits are then compared, within float rounding, and not their softmax."""
    model = onnx.load(str(path))
    outputs = {o.name for o in model.graph.output}
    for node in model.graph.node:
        if node.op_type == "Softmax" and node.output[0] in outputs:
            model.graph.output.append(onnx.ValueInfoProto(name=node.input[0]))
            model.graph.output.append(onnx.ValueInfoProto(name=node.output[0]))
            model.graph.output.remove(next(o for o in model.graph.output if o.name == node.output[0]))
    return model


@pytest.mark.parametrize("name", sorted(CORE_PASSES))
def test_light_model_passes_and_outputs(name):  # type: ignore[no-untyped-def]
    if name not in LIGHT:
        pytest.skip(f"light_{name} not shipped with this onnx")
    bench = LIGHT[name]
    feeds = bench.make_feeds(np.random.default_rng(0))
    model = _with_logits(bench.path)
    plain = _session(model, "disable")
    basic = _session(model, "basic")
    extended = _session(model, "extended")
    assert set(basic.applied_passes) - {"DeadNodeRemovalPass"} == CORE_PASSES[name]
    assert "CpuFusionPass" in extended.applied_passes
    graph = extended._graph
    ops = [n.op_type for n in graph.nodes]
    assert "ConstantOfShape" not in ops and "Dropout" not in ops and "FusedConv" in ops
    for node in graph.nodes:  # every BatchNormalization after a conv was folded into it
        if node.op_type == "BatchNormalization" and graph.producer(node.inputs[0]) is not None:
            assert graph.nodes[graph.producer(node.inputs[0])].op_type not in ("Conv", "FusedConv")
    assert len(extended._graph.nodes) < len(basic._graph.nodes) < len(plain._graph.nodes)
    names = [o.name for o in model.graph.output]
    logits_of = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Softmax" and n.input[0] in names}
    want = dict(zip(names, plain.run(None, feeds)))
    for session in (basic, extended):
        for name_, got in zip(names, session.run(None, feeds)):
            logits = want.get(logits_of.get(name_, ""))
            if logits is not None and np.abs(logits).max() > 1e6:
                continue  # a softmax of logits where an ulp is > 0.06: the logits are compared
            np.testing.assert_allclose(got, want[name_], rtol=1e-4, atol=1e-5)


SMALL_BERT = {"hidden": 32, "heads": 4, "ffn": 64, "layers": 2, "seq": 8, "vocab": 50, "max_positions": 16}


def test_bert_encoder_fusions():  # type: ignore[no-untyped-def]
    model = bench_models.build_bert(SMALL_BERT)
    feeds = bench_models.bert_feeds_factory(SMALL_BERT)(np.random.default_rng(0))
    plain = _session(model, "disable")
    extended = _session(model, "extended")
    # the Gelu fusion runs as a core pass or, when the cpu passes happen to run first (the
    # order between plugins is not fixed), as a step of CpuFusionPass
    assert "CpuFusionPass" in extended.applied_passes
    ops = [n.op_type for n in extended._graph.nodes]
    assert "Erf" not in ops
    # q, k, v, out, ffn-out: MatMul + bias; ffn-in: MatMul + bias + Gelu
    assert ops.count("FusedMatMul") == 6 * SMALL_BERT["layers"]
    gelu = [n for n in extended._graph.nodes if n.attributes.get("activation") == "Gelu"]
    assert len(gelu) == SMALL_BERT["layers"]
    for a, b in zip(plain.run(None, feeds), extended.run(None, feeds)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4)


def _layer_norm_by_hand():  # type: ignore[no-untyped-def]
    """opset 13 model computing LayerNorm + Erf-GELU with primitive ops (both fuse)."""
    rng = np.random.default_rng(3)
    c = lambda n, v: numpy_helper.from_array(np.asarray(v, np.float32), n)  # noqa: E731
    inits = [c("two", 2.0), c("eps", 1e-6), c("gamma", rng.standard_normal(12)), c("beta", rng.standard_normal(12)),
             c("sqrt2", np.sqrt(2.0)), c("one", 1.0), c("half", 0.5)]
    n = helper.make_node
    nodes = [n("ReduceMean", ["x"], ["mu"], axes=[-1]), n("Sub", ["x", "mu"], ["d"]), n("Pow", ["d", "two"], ["sq"]),
             n("ReduceMean", ["sq"], ["var"], axes=[-1]), n("Add", ["var", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"]),
             n("Div", ["d", "sd"], ["nrm"]), n("Mul", ["nrm", "gamma"], ["g"]), n("Add", ["g", "beta"], ["ln"]),
             n("Div", ["ln", "sqrt2"], ["q"]), n("Erf", ["q"], ["e"]), n("Add", ["e", "one"], ["a"]),
             n("Mul", ["ln", "a"], ["m"]), n("Mul", ["m", "half"], ["y"])]
    g = helper.make_graph(nodes, "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 12])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


class _Refusing(KernelProvider):
    def claims(self, node):  # type: ignore[no-untyped-def]
        if node.op_type in ("Gelu", "LayerNormalization"):
            return "refused for this test"
        return super().claims(node)


class _Factory:
    name, vendor, version, sdk_api, priority = "nofused", "tests", "0", "1.0", 5

    def devices(self):  # type: ignore[no-untyped-def]
        return [Device(self.name, "cpu", 0, "refuses Gelu and LayerNormalization")]

    def create(self, device, options):  # type: ignore[no-untyped-def]
        from epoxy_ep_cpu.registry import load_kernels

        return _Refusing(self.name, device, load_kernels(), options)

    def supported_ops(self):  # type: ignore[no-untyped-def]
        return []


def test_fused_ops_newer_than_the_model_run_natively_or_expanded():  # type: ignore[no-untyped-def]
    model = _layer_norm_by_hand()
    x = np.random.default_rng(4).standard_normal((3, 4, 12)).astype(np.float32)
    want = _session(model, "disable").run(None, {"x": x})[0]
    native = _session(model, "extended")
    ops = [(n.op_type, n.opset) for n in native._graph.nodes]
    assert ("LayerNormalization", 17) in ops and ("Gelu", 20) in ops
    np.testing.assert_allclose(native.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-5)
    # a provider that runs neither: both are expanded back into their function bodies
    registry = registry_with(_Factory(), installed=True, plugin_name="nofused")
    session = epoxy.InferenceSession(model, providers=["nofused"], registry=registry,
                                     sess_options=epoxy.SessionOptions(graph_optimization_level="extended",
                                                                       disable_fallback=True))
    ops = [n.op_type for n in session._graph.nodes]
    assert "LayerNormalization" not in ops and "Gelu" not in ops
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-5)


def test_unknown_custom_domain_is_imported():  # type: ignore[no-untyped-def]
    model = onnx.load(str(LIGHT["squeezenet"].path), load_external_data=False) if "squeezenet" in LIGHT else None
    if model is None:
        pytest.skip("no light_squeezenet")
    session = _session(model, "extended")
    assert session._model.opset_imports.get("com.epoxy.cpu") == 1


def test_a_gpt2_style_linear_layer_runs_as_one_fused_matmul_and_matches_onnxruntime():  # type: ignore[no-untyped-def]
    """GPT-2's Conv1D as TorchScript writes it: Reshape(x, Concat([-1], Shape(x)[-1:])) -> Gemm
    -> Reshape(Concat(Shape(x)[:2], [N])) -> Relu. The static-shape, flattened-Gemm and cpu
    fusion passes leave one FusedMatMul (bias and activation inside); values as onnxruntime's."""
    n = helper.make_node
    rng = np.random.default_rng(6)
    big = np.iinfo(np.int64).max
    inits = [numpy_helper.from_array((rng.standard_normal((16, 24)) * 0.3).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "c")]
    inits += [numpy_helper.from_array(np.array(v, np.int64), name) for name, v in
              (("m1", [-1]), ("big", [big]), ("n24", [24]), ("i0", [0]), ("i2", [2]))]
    nodes = [n("Shape", ["x"], ["xs"]), n("Slice", ["xs", "m1", "big"], ["xk"]),
             n("Concat", ["m1", "xk"], ["flat"], axis=0), n("Reshape", ["x", "flat"], ["rows"]),
             n("Gemm", ["rows", "w", "c"], ["g"]), n("Slice", ["xs", "i0", "i2"], ["lead"]),
             n("Concat", ["lead", "n24"], ["back"], axis=0), n("Reshape", ["g", "back"], ["y0"]),
             n("Relu", ["y0"], ["y"])]
    graph = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", 24])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"])
    kinds = [node.op_type for node in session._graph.nodes]
    assert kinds == ["FusedMatMul"], kinds
    import onnxruntime as ort

    oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in ((2, 3, 16), (1, 7, 16)):
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(session.run(None, {"x": x})[0], oracle.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
