"""The torch zoo's cases: what each model is, how its file is written, what it is fed.

Rows, in table order: the five CNN families through both torch.onnx exporters, the
transformers families through both exporters, then onnxruntime's tools run on some of those
files (each tool's row names the file it read). A case that fails on epoxy today carries a
strict xfail with the precise reason.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import cnn_models
import exporters
import hf_models
import numpy as np
import ort_tools
from model_cache import ModelStore
from specs import Spec, cnn_spec
from torch_harness import Case

Build = Callable[[ModelStore], Path]
EXPORTERS: dict[str, tuple[str, Callable[[Spec, Path], None]]] = {
    "ts": (f"torch.onnx TorchScript (dynamo=False, opset {exporters.TORCHSCRIPT_OPSET})", exporters.torchscript),
    "dynamo": ("torch.onnx dynamo (dynamo=True)", exporters.dynamo),
}
MS = "com.microsoft."


def exported(key: str, spec: Callable[[], Spec], exporter: str) -> Build:
    """Build: ``spec`` through one torch.onnx exporter, once per test run."""
    write = EXPORTERS[exporter][1]
    return lambda store: store.get(key, lambda path: write(spec(), path))


def derived(key: str, source: Build, tool: Callable[[Path, Path], None]) -> Build:
    """Build: an onnxruntime tool run on another case's file."""

    def build(store: ModelStore) -> Path:
        src = source(store)
        return store.get(key, lambda path: tool(src, path))

    return build


# --------------------------------------------------------------------------- torch.onnx

CNN_NAMES = {
    "resnet": "ResNet-style CNN (basic blocks, BatchNorm, residual Add, max pool, adaptive avg pool, Linear)",
    "mobilenetv2": "MobileNetV2-style CNN (inverted residuals, depthwise conv, ReLU6)",
    "mobilenetv3": "MobileNetV3-style CNN (Hardswish, 5x5 depthwise conv, Hardsigmoid squeeze-excitation)",
    "squeezenet": "SqueezeNet-style CNN (fire modules, Concat, ceil-mode max pool)",
    "efficientnet": "EfficientNet-style CNN (MBConv, SiLU, squeeze-excitation)",
    "unet": "UNet-style CNN (ConvTranspose2d and bilinear interpolate up, skip Concat)",
}
CNN_VARIANT = "batch 2 exported, run at 3 and 1"
TEXT_VARIANT = "batch x sequence 2x7 exported, run at 3x11 (a padded row) and 1x11"

#: (key, transformers model, variant, spec)
HF_FAMILIES: list[tuple[str, str, str, Callable[[], Spec]]] = [
    ("bert", "BertModel", f"sdpa attention; {TEXT_VARIANT}", hf_models.bert),
    ("gpt2", "GPT2LMHeadModel", f"no cache; sdpa attention; {TEXT_VARIANT}", hf_models.gpt2),
    ("gpt2-past", "GPT2LMHeadModel", ("past key/values in and out (use_cache); sdpa attention; batch x new x past "
     "2x3x5 exported, run at 3x2x7 (padded past) and 1x2x7"), hf_models.gpt2_with_past),
    ("t5", "T5EncoderModel", f"eager attention; {TEXT_VARIANT}", hf_models.t5_encoder),
    ("vit", "ViTModel", "16x16 images, sdpa attention; batch 2 exported, run at 3 and 1", hf_models.vit),
    ("whisper", "WhisperForAudioClassification", ("16 mel bins x 40 frames, sdpa attention; batch 2 exported, run at "
     "3 and 1"), hf_models.whisper),
    ("llama", "LlamaForCausalLM", f"rotary embeddings, 2 KV heads for 4; sdpa attention; {TEXT_VARIANT}",
     hf_models.llama),
]

#: the eager-attention models onnxruntime's tools read (TorchScript only: the transformer
#: optimizer's Attention fusion matches what TorchScript writes for eager attention)
TOOL_SOURCES: list[tuple[str, str, str, Callable[[], Spec]]] = [
    ("bert-cls-eager", "BertForSequenceClassification", (f"eager attention (read by the ORT tools rows); "
     f"{TEXT_VARIANT}"), hf_models.bert_classifier),
    ("gpt2-eager", "GPT2LMHeadModel", f"no cache; eager attention (read by the ORT tools rows); {TEXT_VARIANT}",
     lambda: hf_models.gpt2("eager")),
]


def torch_cases() -> list[Case]:
    cases = []
    for exporter, (label, _) in EXPORTERS.items():
        for family in cnn_models.FAMILIES:
            key = f"{exporter}-{family}"
            cases.append(Case(key, label, CNN_NAMES[family], CNN_VARIANT,
                              exported(key, lambda f=family: cnn_spec(f), exporter),
                              lambda f=family: cnn_spec(f).feeds()))
    for exporter, (label, _) in EXPORTERS.items():
        families = HF_FAMILIES + (TOOL_SOURCES if exporter == "ts" else [])
        for name, model, variant, spec in families:
            key = f"{exporter}-{name}"
            cases.append(Case(key, label, model, variant, exported(key, spec, exporter), lambda s=spec: s().feeds()))
    return cases


# --------------------------------------------------------------------------- onnxruntime's tools

_TORCH = {case.id: case for case in torch_cases()}


def _from(source: str, key: str, tool: Callable[[Path, Path], None]) -> tuple[Build, Callable[[], dict]]:
    return derived(key, _TORCH[source].build, tool), _TORCH[source].feeds


def _calibration(i: int) -> dict[str, np.ndarray]:
    """Calibration batch ``i`` (2 seeded images) for a CNN's static quantization."""
    rng = np.random.default_rng(100 + i)
    return {"x": rng.standard_normal((2, *cnn_models.IMAGE)).astype(np.float32)}


def _tool_case(key: str, exporter: str, model: str, variant: str, source: str,
               tool: Callable[[Path, Path], None], fused: set[str], **kw: object) -> Case:
    build, feeds = _from(source, key, tool)
    return Case(key, exporter, model, f"{variant}; of `{source}`", build, feeds, frozenset(fused), **kw)


def _tools(name: str) -> Callable[[Path, Path], None]:
    return {
        "bert": lambda s, d: ort_tools.transformer_optimizer(s, d, "bert", hf_models.HEADS, hf_models.HIDDEN),
        "gpt2": lambda s, d: ort_tools.transformer_optimizer(s, d, "gpt2", hf_models.HEADS, hf_models.HIDDEN),
    }[name]


OPTIMIZER = "ORT transformers optimizer (optimize_model)"
DYNAMIC = "ORT quantize_dynamic (int8 weights)"
NBITS = "ORT MatMulNBitsQuantizer (4 bits, block 16, symmetric)"
STATIC_QOP = "ORT quantize_static QOperator (uint8/int8, MinMax)"
STATIC_QDQ = "ORT quantize_static QDQ (uint8/int8, MinMax)"
SESSION = "ORT session graph optimizer (EXTENDED, optimized_model_filepath)"


def tool_cases() -> list[Case]:
    cases = [
        _tool_case("ortopt-bert-cls", OPTIMIZER, "BertForSequenceClassification", "model_type bert",
                   "ts-bert-cls-eager", _tools("bert"),
                   {MS + "Attention", MS + "EmbedLayerNormalization", MS + "SkipLayerNormalization", MS + "BiasGelu"}),
        _tool_case("ortopt-gpt2", OPTIMIZER, "GPT2LMHeadModel", "model_type gpt2", "ts-gpt2-eager", _tools("gpt2"),
                   {MS + "SkipLayerNormalization", MS + "FastGelu"}),
        _tool_case("qdyn-bert-cls", DYNAMIC, "BertForSequenceClassification", "as exported", "ts-bert-cls-eager",
                   ort_tools.dynamic_int8, {"DynamicQuantizeLinear", "MatMulInteger"}, quantized="dynamic"),
        _tool_case("qdyn-gpt2", DYNAMIC, "GPT2LMHeadModel", "as exported", "ts-gpt2-eager",
                   ort_tools.dynamic_int8, {"DynamicQuantizeLinear", "MatMulInteger"}, quantized="dynamic"),
    ]
    optimized = {case.id: case for case in cases}
    cases += [
        Case("qdyn-ortopt-bert-cls", DYNAMIC, "BertForSequenceClassification", "after the transformers optimizer; "
             "of `ortopt-bert-cls`", derived("qdyn-ortopt-bert-cls", optimized["ortopt-bert-cls"].build,
                                             ort_tools.dynamic_int8),
             optimized["ortopt-bert-cls"].feeds, frozenset({MS + "QAttention", MS + "QEmbedLayerNormalization"}),
             quantized="dynamic"),
        Case("qdyn-ortopt-gpt2", DYNAMIC, "GPT2LMHeadModel", "after the transformers optimizer; of `ortopt-gpt2`",
             derived("qdyn-ortopt-gpt2", optimized["ortopt-gpt2"].build, ort_tools.dynamic_int8),
             optimized["ortopt-gpt2"].feeds,
             frozenset({"MatMulInteger", MS + "FastGelu", MS + "SkipLayerNormalization"}), quantized="dynamic"),
        _tool_case("nbits-llama", NBITS, "LlamaForCausalLM", "as exported", "ts-llama", ort_tools.matmul_4bits,
                   {MS + "MatMulNBits"}),
        _tool_case("nbits-bert-cls", NBITS, "BertForSequenceClassification", "as exported", "ts-bert-cls-eager",
                   ort_tools.matmul_4bits, {MS + "MatMulNBits"}),
    ]
    quantized = {case.id: case for case in cases}
    for family, fused in (("resnet", {"QLinearConv", MS + "QLinearAdd", MS + "QLinearGlobalAveragePool"}),
                          ("squeezenet", {"QLinearConv", MS + "QLinearConcat"}),
                          ("efficientnet", {"QLinearConv", MS + "QLinearSigmoid", MS + "QLinearMul"})):
        cases.append(_tool_case(f"qop-{family}", STATIC_QOP, CNN_NAMES[family].split(" (")[0],
                                "4 seeded calibration batches", f"ts-{family}",
                                lambda s, d: ort_tools.static_int8(s, d, _calibration, "QOperator"),
                                fused, quantized="static"))
    cases.append(_tool_case("qdq-resnet", STATIC_QDQ, CNN_NAMES["resnet"].split(" (")[0],
                            "4 seeded calibration batches", "ts-resnet",
                            lambda s, d: ort_tools.static_int8(s, d, _calibration, "QDQ"),
                            {"QuantizeLinear", "DequantizeLinear"}, quantized="static"))
    cases += [
        Case("ortsess-qdyn-bert-cls", SESSION, "BertForSequenceClassification", "of `qdyn-bert-cls`",
             derived("ortsess-qdyn-bert-cls", quantized["qdyn-bert-cls"].build, ort_tools.session_optimized),
             quantized["qdyn-bert-cls"].feeds,
             frozenset({MS + "DynamicQuantizeMatMul", MS + "MatMulIntegerToFloat", MS + "FusedMatMul"}),
             quantized="dynamic"),
        _tool_case("ortsess-llama", SESSION, "LlamaForCausalLM", "as exported", "ts-llama",
                   ort_tools.session_optimized, {"SimplifiedLayerNormalization", MS + "QuickGelu", MS + "FusedMatMul"}),
        _tool_case("ortsess-resnet", SESSION, CNN_NAMES["resnet"].split(" (")[0], "as exported", "ts-resnet",
                   ort_tools.session_optimized, {MS + "FusedConv"}),
    ]
    return cases


CASES: list[Case] = list(_TORCH.values()) + tool_cases()
