"""Exporter-made bench models: the torch zoo's families as torch.onnx writes them (issue #17).

The models are the ones ``tests/models_torch`` checks for coverage, built by its own code
(``cnn_models``, ``hf_models``, ``specs``, ``exporters``, ``model_cache``): seeded tiny
configs, exported by both torch.onnx exporters (TorchScript at opset 17 and dynamo) with
their dynamic axes kept. The zoo has no ConvNeXt, so a seeded ConvNeXt-style network in
plain torch is defined here. Each model is timed at two feed sizes (``POINTS``: batch 1,
and a larger batch or sequence its axes allow), and each (model, size) has a "fixed" twin:
the same file with the input dims made static and the shapes re-inferred, so the cost of
symbolic dims can be measured on its own.

Everything is written once into ``bench/.cache/exporter-torch<version>/`` (ignored by git)
by a child process, so the timing process never imports torch (its OpenMP pool would share
the cores with numpy's and onnxruntime's). Next to each model a ``.json`` file says how to
feed it: input names, dtypes and shapes with the dynamic axes named.

    /tmp/tvenv/bin/python bench/exporter_models.py                   # build if needed, list
    /tmp/tvenv/bin/python bench/exporter_models.py --profile ts-bert-b4s64,dynamo-llama-b1s16 --ort
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
ZOO_DIR = BENCH_DIR.parent / "tests" / "models_torch"
sys.path.insert(0, str(BENCH_DIR))

from models import CACHE_DIR, BenchModel  # noqa: E402

EXPORTERS = ("ts", "dynamo")
VOCAB = 99  # hf_models.VOCAB, read here without importing torch; checked when building


@dataclass(frozen=True)
class Family:
    """A zoo family: ``spec`` names the zoo function that makes its ``specs.Spec``
    (``"convnext"`` is this module's own); ``points`` are the sizes of its dynamic axes it is
    timed at; ``pad`` is where a padded row of ``attention_mask`` has its zeros."""

    name: str
    model: str
    spec: str
    points: tuple[Mapping[str, int], ...]
    pad: str = "tail"


_IMAGES = ({"batch": 1}, {"batch": 8})
_TEXT = ({"batch": 1, "sequence": 16}, {"batch": 4, "sequence": 64})  # 64: the position tables' size
_DECODE = ({"batch": 1, "sequence": 1, "past_sequence": 15, "total_sequence": 16},
           {"batch": 4, "sequence": 1, "past_sequence": 63, "total_sequence": 64})

FAMILIES: tuple[Family, ...] = (
    Family("resnet", "ResNet-style CNN (zoo cnn_models)", "cnn:resnet", _IMAGES),
    Family("mobilenetv2", "MobileNetV2-style CNN (zoo cnn_models)", "cnn:mobilenetv2", _IMAGES),
    Family("mobilenetv3", "MobileNetV3-style CNN, mobilenet_v3_small's layout (zoo cnn_models)", "cnn:mobilenetv3",
           _IMAGES),
    Family("efficientnet", "EfficientNet-style CNN (zoo cnn_models)", "cnn:efficientnet", _IMAGES),
    Family("convnext", "ConvNeXt-style CNN (bench/exporter_models.py)", "convnext", _IMAGES),
    Family("bert", "BertModel, sdpa (zoo hf_models)", "hf:bert", _TEXT),
    Family("gpt2-past", "GPT2LMHeadModel, one decoding step with past (zoo hf_models)", "hf:gpt2_with_past",
           _DECODE, pad="head"),
    Family("vit", "ViTModel 16x16 images (zoo hf_models)", "hf:vit", _IMAGES),
    Family("whisper", "Whisper encoder + classifier, 16 mel x 40 frames (zoo hf_models)", "hf:whisper", _IMAGES),
    Family("llama", "LlamaForCausalLM, 2 KV heads (zoo hf_models)", "hf:llama", _TEXT),
)


def _torch_version() -> str:
    """torch's version here, else that of the interpreter that builds the models (the timing
    process usually has no torch), else ``none``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        pass
    builder = os.environ.get("EPOXY_BENCH_TORCH_PYTHON")
    if builder:
        probe = subprocess.run([builder, "-c", "import importlib.metadata as m; print(m.version('torch'))"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip():
            return probe.stdout.strip()
    return "none"


def store_dir() -> Path:
    """Per torch version: another exporter writes other files."""
    return CACHE_DIR / f"exporter-torch{_torch_version().replace('+', '_')}"


def point_label(point: Mapping[str, int]) -> str:
    """``{"batch": 4, "sequence": 64}`` -> ``b4s64``; a decoding step is ``b4p63``."""
    label = f"b{point['batch']}"
    if "past_sequence" in point:
        return label + f"p{point['past_sequence']}"
    return label + (f"s{point['sequence']}" if "sequence" in point else "")


def key(exporter: str, family: Family) -> str:
    return f"{exporter}-{family.name}"


# -- feeds: from the layout written beside each model -------------------------------------------
def feed_shapes(layout: Mapping[str, Any], point: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
    """Input name -> concrete shape: each named axis takes the point's size."""
    return {name: tuple(point[d] if isinstance(d, str) else d for d in spec["shape"])
            for name, spec in layout["inputs"].items()}


def make_feeds_factory(layout: Mapping[str, Any], point: Mapping[str, int],
                       pad: str) -> Callable[[np.random.Generator], dict[str, np.ndarray]]:
    """Seeded feeds as the zoo makes them: token ids below the vocabulary, token types 0
    then 1, an attention mask of ones with the second row's three tokens padded (at the end,
    or for a decoding step at the start), float tensors from a standard normal."""
    shapes = feed_shapes(layout, point)

    def make(rng: np.random.Generator) -> dict[str, np.ndarray]:
        feeds = {}
        for name, spec in layout["inputs"].items():
            shape, dtype = shapes[name], np.dtype(spec["dtype"])
            if name == "input_ids":
                value = rng.integers(0, layout.get("vocab", VOCAB), shape).astype(dtype)
            elif name == "token_type_ids":
                value = np.zeros(shape, dtype)
                value[:, shape[1] // 2:] = 1
            elif name == "attention_mask":
                value = np.ones(shape, dtype)
                if shape[0] > 1:
                    value[1, slice(None, 3) if pad == "head" else slice(-3, None)] = 0
            elif dtype.kind == "f":
                value = rng.standard_normal(shape).astype(dtype)
            else:
                value = rng.integers(0, 2, shape).astype(dtype)
            feeds[name] = value
        return feeds

    return make


# -- building (child process: torch, transformers and the zoo's code) -------------------------------
def _zoo() -> Any:
    """The zoo's modules (top-level names on its own path, as its conftest arranges)."""
    if str(ZOO_DIR) not in sys.path:
        sys.path.insert(0, str(ZOO_DIR))
    import cnn_models
    import exporters
    import hf_models
    import model_cache
    import specs

    assert hf_models.VOCAB == VOCAB, "hf_models.VOCAB changed: update exporter_models.VOCAB"
    return cnn_models, exporters, hf_models, model_cache, specs


def _spec(family: Family) -> Any:
    cnn_models, _, hf_models, _, specs = _zoo()
    kind, _, name = family.spec.partition(":")
    if kind == "cnn":
        return specs.cnn_spec(name)
    if kind == "hf":
        return getattr(hf_models, name)()
    return specs.image_spec(build_convnext, cnn_models.IMAGE, ("y",))


CONVNEXT_SEED = 0


def build_convnext() -> Any:
    """A ConvNeXt-style network at the zoo's scale (3x32x32 in, 10 classes), seeded:
    torchvision's layout (4x4 stride-4 patchify stem + LayerNorm2d; blocks of 7x7
    depthwise conv, channels-last LayerNorm, Linear 4x + GELU + Linear, layer scale,
    residual; LayerNorm2d + 2x2 stride-2 conv downsampling; pool, LayerNorm, Linear). Layer
    scale is drawn around 0.5, not torchvision's 1e-6, so the blocks are not identities."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class LayerNorm2d(nn.LayerNorm):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x.permute(0, 2, 3, 1)
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps).permute(0, 3, 1, 2)

    class Block(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
            self.scale = nn.Parameter(torch.empty(dim, 1, 1).uniform_(0.3, 0.7))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.norm(self.dwconv(x).permute(0, 2, 3, 1))
            y = self.fc2(F.gelu(self.fc1(y))).permute(0, 3, 1, 2)
            return x + self.scale * y

    class ConvNeXt(nn.Module):
        def __init__(self, classes: int = 10) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 16, 4, 4), LayerNorm2d(16, eps=1e-6), Block(16), Block(16),
                LayerNorm2d(16, eps=1e-6), nn.Conv2d(16, 32, 2, 2), Block(32), Block(32))
            self.norm = nn.LayerNorm(32, eps=1e-6)
            self.fc = nn.Linear(32, classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = F.adaptive_avg_pool2d(self.features(x), 1).flatten(1)
            return self.fc(self.norm(x))

    torch.manual_seed(CONVNEXT_SEED)
    model = ConvNeXt()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
    return model.eval()


def _layout(spec: Any) -> dict[str, Any]:
    example = spec.example()
    inputs = {}
    for name, tensor in zip(spec.inputs, example):
        axes = spec.dynamic.get(name, {})
        shape = [axes.get(i, size) for i, size in enumerate(tensor.shape)]
        inputs[name] = {"dtype": str(tensor.numpy().dtype), "shape": shape}
    return {"inputs": inputs, "outputs": list(spec.outputs), "vocab": VOCAB}


def fix_dims(src: Path, dst: Path, shapes: Mapping[str, tuple[int, ...]],
             outputs: Mapping[str, tuple[int, ...]]) -> None:
    """Write ``src`` with every input and output dim static and the intermediate shapes
    re-inferred from them (the exporter's symbolic ``value_info`` dropped)."""
    import onnx

    model = onnx.load(str(src))
    for values, dims in ((model.graph.input, shapes), (model.graph.output, outputs)):
        for value in values:
            if value.name not in dims:
                continue
            shape = value.type.tensor_type.shape
            del shape.dim[:]
            for size in dims[value.name]:
                shape.dim.add().dim_value = int(size)
    del model.graph.value_info[:]
    model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))


def build_all() -> list[Path]:
    """Export every family with both exporters and write the fixed twins (what is missing)."""
    import onnxruntime as ort

    _, exporters, _, model_cache, _ = _zoo()
    store = model_cache.ModelStore(store_dir())
    written = []
    for family in FAMILIES:
        for exporter in EXPORTERS:
            write = exporters.torchscript if exporter == "ts" else exporters.dynamo
            k = key(exporter, family)
            layout_path = store.root / f"{k}.json"
            if not layout_path.exists():
                layout_path.write_text(json.dumps(_layout(_spec(family)), indent=1))
            layout = json.loads(layout_path.read_text())
            path = store.get(k, lambda p, f=family, w=write: w(_spec(f), p))
            written.append(path)
            sess = None
            for point in family.points:
                fixed = store.root / f"{k}-{point_label(point)}-fixed.onnx"
                if fixed.exists():
                    continue
                sess = sess or ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
                feeds = make_feeds_factory(layout, point, family.pad)(np.random.default_rng(0))
                outs = dict(zip(layout["outputs"], sess.run(layout["outputs"], feeds)))
                fix_dims(path, fixed, feed_shapes(layout, point), {n: v.shape for n, v in outs.items()})
                written.append(fixed)
    return written


# -- the bench set ----------------------------------------------------------------------------------
@dataclass
class ExporterModel(BenchModel):
    """A bench model with its fixed-dims twin (same graph, static input shapes)."""

    fixed_path: Path | None = None
    family: str = ""
    exporter: str = ""
    point: str = ""


def _missing() -> list[Path]:
    root = store_dir()
    out = []
    for family in FAMILIES:
        for exporter in EXPORTERS:
            k = key(exporter, family)
            out += [root / f"{k}.onnx", root / f"{k}.json"]
            out += [root / f"{k}-{point_label(p)}-fixed.onnx" for p in family.points]
    return [p for p in out if not p.exists()]


def ensure_built(python: str | None = None) -> None:
    """Build what is missing in a child process (torch stays out of this one): ``python``,
    else ``$EPOXY_BENCH_TORCH_PYTHON``, else this interpreter, needs torch and transformers."""
    if not _missing():
        return
    python = python or os.environ.get("EPOXY_BENCH_TORCH_PYTHON") or sys.executable
    cmd = [python, str(Path(__file__).resolve()), "--build-only"]
    print(f"building the exporter-made models into {store_dir()} (once, ~1-3 min) ...", file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=sys.stderr)


def exporter_models(filter_spec: str | None = None) -> list[ExporterModel]:
    """The set, in family order: ``{exporter}-{family}-{point}`` (e.g. ``ts-bert-b1s16``).
    ``filter_spec``: comma-separated words, a model is kept when its name contains one
    (``exporter`` alone, or nothing, keeps all)."""
    wanted = [w.strip().lower() for w in (filter_spec or "").split(",") if w.strip() and w.strip() != "exporter"]
    ensure_built()
    root = store_dir()
    out = []
    for family in FAMILIES:
        for exporter in EXPORTERS:
            k = key(exporter, family)
            layout = json.loads((root / f"{k}.json").read_text())
            for point in family.points:
                name = f"{k}-{point_label(point)}"
                if wanted and not any(w in name for w in wanted):
                    continue
                out.append(ExporterModel(
                    name=name, path=root / f"{k}.onnx", make_feeds=make_feeds_factory(layout, point, family.pad),
                    note=family.model, tags=("exporter", exporter, family.name),
                    fixed_path=root / f"{name}-fixed.onnx", family=family.name, exporter=exporter,
                    point=point_label(point)))
    if wanted and not out:
        raise SystemExit(f"no exporter-made model matches {filter_spec!r}")
    return out


def profile(names: str, threads: int, runs: int, top: int, with_ort: bool) -> None:
    """``bench/profile_ops.py``'s per-op tables for exporter-made models (and their fixed twins)."""
    import profile_ops
    from threadpoolctl import threadpool_limits

    for model in exporter_models(names):
        feeds = model.make_feeds(np.random.default_rng(0))
        with threadpool_limits(limits=threads):
            for label, path in ((model.name, model.path), (f"{model.name} fixed", model.fixed_path)):
                per_node, wall = profile_ops.profile_epoxy(path, dict(feeds), threads, runs, 2)
                profile_ops.table(f"{label} epoxy", per_node, wall, top, 5)
            if with_ort:
                per_node, wall = profile_ops.profile_ort(model.path, dict(feeds), threads, runs, 2)
                profile_ops.table(f"{model.name} onnxruntime", per_node, wall, top, 5)
        sys.stdout.flush()


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-only", action="store_true", help="export what is missing, print nothing else")
    ap.add_argument("--models", default=None, help="comma-separated filter for the listing")
    ap.add_argument("--profile", default=None, metavar="MODELS", help="per-op profiles of these models")
    ap.add_argument("--ort", action="store_true", help="with --profile: onnxruntime's per-op profile too")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
    if args.build_only:
        for p in build_all():
            print(f"wrote {p}")
        raise SystemExit(0)
    if args.profile:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)
        profile(args.profile, args.threads, args.runs, args.top, args.ort)
        raise SystemExit(0)
    for m in exporter_models(args.models):
        size = m.path.stat().st_size / 2**10
        print(f"{m.name:28s} {size:8.0f} KiB  {m.note}")
