"""Benchmark models: the onnx package's ``light_*`` models and a generated BERT-style encoder.

Nothing here is committed: the light models are read from the installed onnx package and
the encoder is generated (random weights, fixed seed) into ``bench/.cache/``.

    python bench/models.py            # list the models, generating the encoder if needed
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
CACHE_DIR = Path(os.environ.get("EPOXY_BENCH_CACHE", BENCH_DIR / ".cache"))

LIGHT_NAMES = (
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
)

# BERT-base sized encoder, cut to 4 layers.
BERT_CONFIG = {
    "vocab": 30522,
    "max_positions": 512,
    "type_vocab": 2,
    "hidden": 768,
    "heads": 12,
    "ffn": 3072,
    "layers": 4,
    "seq": 128,
    "batch": 1,
    "opset": 17,
    "seed": 0,
}

_ONNX_FLOAT = 1
_ONNX_INT64 = 7


@dataclass
class BenchModel:
    """A model to time: ``path`` on disk and a ``make_feeds(rng)`` giving its input dict."""

    name: str
    path: Path
    make_feeds: Callable[[np.random.Generator], dict[str, np.ndarray]]
    note: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)


# -- light_* models from the onnx package ------------------------------------------------------
def light_dir() -> Path:
    import onnx

    return Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"


def _graph_feeds_factory(path: Path) -> Callable[[np.random.Generator], dict[str, np.ndarray]]:
    """Random float inputs for every graph input that has no initializer (all static shapes)."""
    import onnx
    from onnx import helper

    model = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in inits:
            continue
        tt = value.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tt.shape.dim)
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        specs.append((value.name, shape, dtype))

    def make(rng: np.random.Generator) -> dict[str, np.ndarray]:
        feeds = {}
        for name, shape, dtype in specs:
            if np.issubdtype(dtype, np.floating):
                feeds[name] = rng.standard_normal(shape).astype(dtype)
            else:
                feeds[name] = rng.integers(0, 2, size=shape).astype(dtype)
        return feeds

    return make


def light_models() -> list[BenchModel]:
    base = light_dir()
    out = []
    for short in LIGHT_NAMES:
        path = base / f"light_{short}.onnx"
        if not path.exists():
            continue
        out.append(
            BenchModel(
                name=f"light_{short}",
                path=path,
                make_feeds=_graph_feeds_factory(path),
                note="weights from ConstantOfShape (zeros): outputs are trivial",
                tags=("light", short),
            )
        )
    return out


# -- BERT-style encoder ------------------------------------------------------------------------
def bert_path(config: dict | None = None) -> Path:
    cfg = {**BERT_CONFIG, **(config or {})}
    return CACHE_DIR / (
        "bert_h{hidden}_a{heads}_f{ffn}_l{layers}_s{seq}_b{batch}_v{vocab}_op{opset}_seed{seed}.onnx".format(**cfg)
    )


def build_bert(config: dict | None = None):
    """Return an ``onnx.ModelProto``: a BERT-style encoder built from standard ops.

    Inputs: ``input_ids``, ``token_type_ids``, ``attention_mask`` (int64 [batch, seq]).
    Output: ``last_hidden_state`` (float32 [batch, seq, hidden]).
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    cfg = {**BERT_CONFIG, **(config or {})}
    hidden, heads, ffn, layers = cfg["hidden"], cfg["heads"], cfg["ffn"], cfg["layers"]
    seq, batch = cfg["seq"], cfg["batch"]
    head_dim = hidden // heads
    assert head_dim * heads == hidden
    rng = np.random.default_rng(cfg["seed"])

    nodes: list = []
    inits: list = []

    def init(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def weight(name: str, *shape: int, std: float = 0.02) -> str:
        return init(name, (rng.standard_normal(shape) * std).astype(np.float32))

    def node(op: str, inputs: list[str], output: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def layer_norm(x: str, prefix: str) -> str:
        gamma = init(f"{prefix}.gamma", (1.0 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))
        beta = init(f"{prefix}.beta", (0.1 * rng.standard_normal(hidden)).astype(np.float32))
        return node("LayerNormalization", [x, gamma, beta], f"{prefix}.out", axis=-1, epsilon=1e-12)

    def linear(x: str, prefix: str, n_in: int, n_out: int) -> str:
        w = weight(f"{prefix}.weight", n_in, n_out)
        b = weight(f"{prefix}.bias", n_out)
        mm = node("MatMul", [x, w], f"{prefix}.matmul")
        return node("Add", [mm, b], f"{prefix}.out")

    # Shared constants.
    heads_shape = init("const.heads_shape", np.array([0, 0, heads, head_dim], dtype=np.int64))
    merged_shape = init("const.merged_shape", np.array([0, 0, hidden], dtype=np.int64))
    scale = init("const.sqrt_head_dim", np.array(math.sqrt(head_dim), dtype=np.float32))
    one = init("const.one", np.array(1.0, dtype=np.float32))
    half = init("const.half", np.array(0.5, dtype=np.float32))
    sqrt2 = init("const.sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    neg_big = init("const.mask_value", np.array(-10000.0, dtype=np.float32))
    mask_axes = init("const.mask_axes", np.array([1, 2], dtype=np.int64))

    # Embeddings.
    word = weight("embeddings.word", cfg["vocab"], hidden)
    pos = weight("embeddings.position", cfg["max_positions"], hidden)
    typ = weight("embeddings.token_type", cfg["type_vocab"], hidden)
    pos_ids = init("embeddings.position_ids", np.arange(seq, dtype=np.int64)[None, :])
    e_word = node("Gather", [word, "input_ids"], "embeddings.word_out", axis=0)
    e_pos = node("Gather", [pos, pos_ids], "embeddings.position_out", axis=0)
    e_typ = node("Gather", [typ, "token_type_ids"], "embeddings.token_type_out", axis=0)
    e_sum = node("Add", [e_word, e_pos], "embeddings.sum1")
    e_sum = node("Add", [e_sum, e_typ], "embeddings.sum2")
    x = layer_norm(e_sum, "embeddings.ln")

    # Additive mask: (1 - mask) * -10000, shaped [batch, 1, 1, seq].
    m = node("Unsqueeze", ["attention_mask", mask_axes], "mask.unsqueeze")
    m = node("Cast", [m], "mask.float", to=TensorProto.FLOAT)
    m = node("Sub", [one, m], "mask.inverted")
    mask = node("Mul", [m, neg_big], "mask.additive")

    for i in range(layers):
        p = f"layer{i}"
        q = linear(x, f"{p}.attn.q", hidden, hidden)
        k = linear(x, f"{p}.attn.k", hidden, hidden)
        v = linear(x, f"{p}.attn.v", hidden, hidden)
        q = node("Reshape", [q, heads_shape], f"{p}.attn.q_heads")
        q = node("Transpose", [q], f"{p}.attn.q_t", perm=[0, 2, 1, 3])  # [b, h, s, d]
        k = node("Reshape", [k, heads_shape], f"{p}.attn.k_heads")
        k = node("Transpose", [k], f"{p}.attn.k_t", perm=[0, 2, 3, 1])  # [b, h, d, s]
        v = node("Reshape", [v, heads_shape], f"{p}.attn.v_heads")
        v = node("Transpose", [v], f"{p}.attn.v_t", perm=[0, 2, 1, 3])  # [b, h, s, d]
        s = node("MatMul", [q, k], f"{p}.attn.scores")
        s = node("Div", [s, scale], f"{p}.attn.scaled")
        s = node("Add", [s, mask], f"{p}.attn.masked")
        s = node("Softmax", [s], f"{p}.attn.probs", axis=-1)
        c = node("MatMul", [s, v], f"{p}.attn.context")
        c = node("Transpose", [c], f"{p}.attn.context_t", perm=[0, 2, 1, 3])
        c = node("Reshape", [c, merged_shape], f"{p}.attn.context_merged")
        o = linear(c, f"{p}.attn.out", hidden, hidden)
        o = node("Add", [o, x], f"{p}.attn.residual")
        x = layer_norm(o, f"{p}.attn.ln")
        # Feed-forward with exact (Erf) GELU.
        h = linear(x, f"{p}.ffn.in", hidden, ffn)
        g = node("Div", [h, sqrt2], f"{p}.ffn.gelu_div")
        g = node("Erf", [g], f"{p}.ffn.gelu_erf")
        g = node("Add", [g, one], f"{p}.ffn.gelu_add")
        g = node("Mul", [h, g], f"{p}.ffn.gelu_mul")
        g = node("Mul", [g, half], f"{p}.ffn.gelu")
        f = linear(g, f"{p}.ffn.out", ffn, hidden)
        f = node("Add", [f, x], f"{p}.ffn.residual")
        x = layer_norm(f, f"{p}.ffn.ln")

    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="output"))
    graph = helper.make_graph(
        nodes,
        "bert_encoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq]),
            helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, [batch, seq]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [batch, seq]),
        ],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [batch, seq, hidden])],
        initializer=inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", cfg["opset"])],
        producer_name="epoxy-bench",
    )
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def ensure_bert(config: dict | None = None, *, force: bool = False) -> Path:
    """Generate the encoder into the cache (once) and return its path."""
    import onnx

    path = bert_path(config)
    if path.exists() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    model = build_bert(config)
    tmp = path.with_suffix(".onnx.tmp")
    onnx.save(model, str(tmp))
    tmp.replace(path)
    return path


def bert_feeds_factory(config: dict | None = None) -> Callable[[np.random.Generator], dict[str, np.ndarray]]:
    cfg = {**BERT_CONFIG, **(config or {})}
    batch, seq = cfg["batch"], cfg["seq"]

    def make(rng: np.random.Generator) -> dict[str, np.ndarray]:
        ids = rng.integers(0, cfg["vocab"], size=(batch, seq), dtype=np.int64)
        types = np.zeros((batch, seq), dtype=np.int64)
        types[:, seq // 2 :] = 1
        mask = np.ones((batch, seq), dtype=np.int64)
        mask[:, seq - seq // 8 :] = 0  # a padded tail exercises the additive mask
        return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}

    return make


def bert_model(config: dict | None = None) -> BenchModel:
    cfg = {**BERT_CONFIG, **(config or {})}
    return BenchModel(
        name="bert",
        path=ensure_bert(config),
        make_feeds=bert_feeds_factory(config),
        note="BERT-style encoder: hidden {hidden}, {heads} heads, FFN {ffn}, {layers} layers, seq {seq}, "
        "random weights (seed {seed})".format(**cfg),
        tags=("bert", "encoder"),
    )


# -- selection -----------------------------------------------------------------------------
def all_model_names() -> list[str]:
    return [f"light_{n}" for n in LIGHT_NAMES] + ["bert"]


def _matches(name: str, wanted: str) -> bool:
    wanted = wanted.strip().lower()
    return bool(wanted) and (name == wanted or name == f"light_{wanted}" or wanted in name)


def select_models(filter_spec: str | None = None) -> list[BenchModel]:
    """Models whose name matches one of the comma-separated words (all when None/empty).

    ``resnet50`` matches ``light_resnet50``; ``light`` matches every light model.
    The encoder is generated only when selected.
    """
    wanted = [w for w in (filter_spec or "").split(",") if w.strip()]
    names = [n for n in all_model_names() if not wanted or any(_matches(n, w) for w in wanted)]
    if wanted and not names:
        raise SystemExit(f"no model matches {filter_spec!r}; known: {', '.join(all_model_names())}")
    light = {m.name: m for m in light_models()} if any(n.startswith("light_") for n in names) else {}
    out = []
    for n in names:
        if n == "bert":
            out.append(bert_model())
        elif n in light:
            out.append(light[n])
    return out


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=None, help="comma-separated filter (default: all)")
    ap.add_argument("--force", action="store_true", help="regenerate the encoder")
    args = ap.parse_args()
    if args.force:
        ensure_bert(force=True)
    for m in select_models(args.models):
        size = m.path.stat().st_size / 2**20
        print(f"{m.name:22s} {size:8.1f} MiB  {m.path}")
