"""com.microsoft transformer ops (the ones onnxruntime's transformer optimizer and Optimum
emit) against onnxruntime: one-node models built with onnx.helper, fixed seeds. BiasAdd and
BiasSplitGelu have no onnxruntime CPU kernel and are checked against numpy."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

import epoxy

ort = pytest.importorskip("onnxruntime")

MS = "com.microsoft"
F32, F16 = np.float32, np.float16


def _model(op: str, inputs: dict[str, np.ndarray | None], n_out: int | list[str], domain: str = MS,
           **attrs: Any) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One node; ``None`` inputs are omitted (``""``); ``n_out`` a count or output names (``""`` skips)."""
    names = [k if v is not None else "" for k, v in inputs.items()]
    while names and not names[-1]:
        names.pop()
    outs = [f"y{i}" for i in range(n_out)] if isinstance(n_out, int) else n_out
    node = helper.make_node(op, names, outs, domain=domain, **attrs)
    feeds = {k: v for k, v in inputs.items() if v is not None}
    g_in = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()
    ]
    g_out = [onnx.ValueInfoProto(name=o) for o in outs if o]
    graph = helper.make_graph([node], "g", g_in, g_out)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model, feeds


def _epoxy(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = epoxy.InferenceSession(model, providers=["cpu"])
    assert {d.provider for d in sess.partition_report().nodes} == {"cpu"}
    return sess.run(None, feeds)


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _tol(dtype: type) -> dict[str, float]:
    return {"rtol": 1e-4, "atol": 1e-5} if dtype == F32 else {"rtol": 1e-2, "atol": 1e-2}


def check(op: str, inputs: dict[str, np.ndarray | None], n_out: int | list[str] = 1, domain: str = MS,
          dtype: type = F32, skip: tuple[int, ...] = (), oracle: dict[str, np.ndarray | None] | None = None,
          **attrs: Any) -> list[np.ndarray]:
    """epoxy on ``inputs`` against onnxruntime on ``oracle`` (equivalent inputs in a form
    onnxruntime's CPU kernel accepts; default ``inputs``); ``skip`` lists outputs compared
    in dtype and shape only."""
    model, feeds = _model(op, inputs, n_out, domain, **attrs)
    got = _epoxy(model, feeds)
    want = _ort(*_model(op, oracle, n_out, domain, **attrs)) if oracle is not None else _ort(model, feeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (i, g.dtype, w.dtype, g.shape, w.shape)
        if i not in skip:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), err_msg=f"output {i}", **_tol(dtype))
    return got


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(list(key))


# ------------------------------------------------------------------------------- activations


@pytest.mark.parametrize("dtype", [F32, F16])
def test_gelu(dtype: type) -> None:
    x = (_rng(1).normal(size=(2, 5, 16)) * 3).astype(dtype)
    check("Gelu", {"X": x}, dtype=dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("with_bias", [False, True])
def test_fast_gelu(dtype: type, with_bias: bool) -> None:
    r = _rng(2)
    x = (r.normal(size=(2, 5, 16)) * 3).astype(dtype)
    check("FastGelu", {"X": x, "bias": r.normal(size=16).astype(dtype) if with_bias else None}, dtype=dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_bias_gelu(dtype: type) -> None:
    r = _rng(3)
    check("BiasGelu", {"A": (r.normal(size=(3, 4, 8)) * 2).astype(dtype), "B": r.normal(size=8).astype(dtype)},
          dtype=dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("alpha", [None, 1.0, -0.5])
def test_quick_gelu(dtype: type, alpha: float | None) -> None:
    x = (_rng(4).normal(size=(2, 3, 10)) * 4).astype(dtype)
    check("QuickGelu", {"X": x}, dtype=dtype, **({} if alpha is None else {"alpha": alpha}))


def _gelu64(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


@pytest.mark.parametrize("dtype", [F32, F16])
def test_bias_add_and_bias_split_gelu(dtype: type) -> None:
    r = _rng(5)
    x, skip, bias = (r.normal(size=s).astype(dtype) for s in ((2, 3, 8), (2, 3, 8), (8,)))
    model, feeds = _model("BiasAdd", {"X": x, "bias": bias, "skip": skip}, 1)
    (y,) = _epoxy(model, feeds)
    assert y.dtype == dtype
    want = x.astype(np.float64) + bias + skip
    np.testing.assert_allclose(y.astype(np.float64), want, **_tol(dtype))
    model, feeds = _model("BiasSplitGelu", {"X": x, "bias": bias}, 1)
    (y,) = _epoxy(model, feeds)
    xb = x.astype(np.float64) + bias
    assert y.shape == (2, 3, 4) and y.dtype == dtype
    np.testing.assert_allclose(y.astype(np.float64), xb[..., :4] * _gelu64(xb[..., 4:]), **_tol(dtype))


# ------------------------------------------------------------------------------- normalizations


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("beta", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("outs", [1, 4, ["y0", "", "", "y3"]])
@pytest.mark.parametrize("skip_shape", ["full", "broadcast"])
def test_skip_layer_normalization(dtype: type, beta: bool, bias: bool, outs: Any, skip_shape: str) -> None:
    r = _rng(6, beta, bias)
    h = 16
    x = r.normal(size=(2, 3, h)).astype(dtype)
    s = r.normal(size=(2, 3, h) if skip_shape == "full" else (1, 3, h)).astype(dtype)
    inputs = {"input": x, "skip": s, "gamma": r.normal(size=h).astype(dtype),
              "beta": r.normal(size=h).astype(dtype) if beta else None,
              "bias": r.normal(size=h).astype(dtype) if bias else None}
    check("SkipLayerNormalization", inputs, outs, dtype=dtype, epsilon=1e-5)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("outs", [1, 4])
def test_skip_simplified_layer_normalization(dtype: type, bias: bool, outs: int) -> None:
    r = _rng(7, bias)
    x, s = r.normal(size=(2, 3, 16)).astype(dtype), r.normal(size=(2, 3, 16)).astype(dtype)
    inputs = {"input": x, "skip": s, "gamma": r.normal(size=16).astype(dtype),
              "bias": r.normal(size=16).astype(dtype) if bias else None}
    check("SkipSimplifiedLayerNormalization", inputs, outs, dtype=dtype, epsilon=1e-6)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("outs", [1, 2])
@pytest.mark.parametrize("axis", [-1, 1])
def test_simplified_layer_normalization(dtype: type, outs: int, axis: int) -> None:
    r = _rng(8)
    x = r.normal(size=(2, 3, 8)).astype(dtype)
    scale = r.normal(size=(3, 8) if axis == 1 else 8).astype(dtype)
    check("SimplifiedLayerNormalization", {"X": x, "scale": scale}, outs, domain="", dtype=dtype, axis=axis)


@pytest.mark.parametrize("segment", [False, True])
@pytest.mark.parametrize("mask", [False, True])
@pytest.mark.parametrize("position_ids", [None, "batch", "one"])
@pytest.mark.parametrize("outs", [2, 3])
def test_embed_layer_normalization(segment: bool, mask: bool, position_ids: str | None, outs: int) -> None:
    r = _rng(9, segment, mask)
    b, s, h = 2, 5, 8
    m = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    pids = None
    if position_ids == "batch":
        pids = r.integers(0, 7, size=(b, s)).astype(np.int32)
    elif position_ids == "one":
        pids = np.arange(2, 2 + s, dtype=np.int32)[None]
    inputs = {"input_ids": r.integers(0, 11, size=(b, s)).astype(np.int32),
              "segment_ids": r.integers(0, 2, size=(b, s)).astype(np.int32) if segment else None,
              "word_embedding": r.normal(size=(11, h)).astype(F32),
              "position_embedding": r.normal(size=(7, h)).astype(F32),
              "segment_embedding": r.normal(size=(2, h)).astype(F32) if segment else None,
              "gamma": r.normal(size=h).astype(F32), "beta": r.normal(size=h).astype(F32),
              "mask": m if mask else None, "position_ids": pids}
    check("EmbedLayerNormalization", inputs, outs, epsilon=1e-5)


# ------------------------------------------------------------------------------- attention


def _mask_index(kind: str, r: np.random.Generator, b: int, s: int, total: int) -> np.ndarray | None:
    if kind == "none":
        return None
    lens = np.array([total - 1, total][:b], np.int32)
    if kind == "1d":
        return lens
    if kind == "1d_start":
        return np.concatenate([lens, np.array([1, 0][:b], np.int32)])
    raw = (np.arange(total)[None, :] < lens[:, None]).astype(np.int32)
    if kind == "2d":
        return raw
    if kind == "3d":
        m = (r.random((b, s, total)) > 0.3).astype(np.int32)
        m[..., 0] = 1
        return m
    if kind == "4d":
        mx = total + 2
        m = (r.random((b, 1, mx, mx)) > 0.3).astype(np.int32)
        m[..., 0] = 1
        return m
    raise AssertionError(kind)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("mask", ["none", "1d", "1d_start", "2d", "3d", "4d"])
@pytest.mark.parametrize("causal_past", [(0, 0), (1, 0), (1, 3), (0, 3)])
def test_attention(dtype: type, mask: str, causal_past: tuple[int, int]) -> None:
    causal, past_len = causal_past
    if dtype == F16 and (mask in ("1d_start", "3d", "4d") or past_len):
        pytest.skip("float16 Attention: one mask form and no past is enough")
    r = _rng(10, causal, past_len)
    b, s, d, n = 2, 4, 16, 2
    total = past_len + s
    inputs = {"input": r.normal(size=(b, s, d)).astype(dtype),
              "weights": (r.normal(size=(d, 3 * d)) * 0.3).astype(dtype),
              "bias": r.normal(size=3 * d).astype(dtype),
              "mask_index": _mask_index(mask, r, b, s, total),
              "past": r.normal(size=(2, b, n, past_len, d // n)).astype(dtype) if past_len else None}
    oracle = None
    if mask == "4d":  # onnxruntime's CPU kernel takes no 4-D mask: the same window as 3-D
        oracle = dict(inputs, mask_index=np.ascontiguousarray(inputs["mask_index"][:, 0, past_len:total, :total]))
    check("Attention", inputs, 2 if past_len else 1, dtype=dtype, oracle=oracle, num_heads=n, unidirectional=causal)


@pytest.mark.parametrize("variant", ["qkv_sizes", "scale", "attention_bias", "no_bias"])
def test_attention_attributes(variant: str) -> None:
    r = _rng(11)
    b, s, d, n = 2, 3, 8, 2
    sizes = [8, 8, 12] if variant == "qkv_sizes" else [8, 8, 8]
    inputs: dict[str, Any] = {"input": r.normal(size=(b, s, d)).astype(F32),
                              "weights": (r.normal(size=(d, sum(sizes))) * 0.3).astype(F32),
                              "bias": None if variant == "no_bias" else r.normal(size=sum(sizes)).astype(F32)}
    attrs: dict[str, Any] = {"num_heads": n}
    if variant == "qkv_sizes":
        attrs["qkv_hidden_sizes"] = sizes
    if variant == "scale":
        attrs["scale"] = 0.7
    if variant == "attention_bias":
        inputs.update(mask_index=None, past=None, attention_bias=r.normal(size=(1, n, s, s)).astype(F32))
    check("Attention", inputs, 1, **attrs)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("layout", ["separate", "packed_qkv", "packed_kv", "cross_bnsh"])
@pytest.mark.parametrize("bias", [False, True])
def test_multi_head_attention_layouts(dtype: type, layout: str, bias: bool) -> None:
    r = _rng(12, bias)
    b, s, l, n, h = 2, 3, 5, 2, 4  # noqa: E741 - l: the key/value sequence length, as in the op's docs
    d = n * h
    lk = s if layout == "packed_qkv" else l
    inputs: dict[str, Any] = {"query": r.normal(size=(b, s, d)).astype(dtype), "key": None, "value": None}
    oracle: dict[str, Any] | None = None
    if layout == "separate":
        inputs["key"], inputs["value"] = (
            r.normal(size=(b, lk, d)).astype(dtype),
            r.normal(size=(b, lk, d)).astype(dtype),
        )
    elif layout == "packed_qkv":  # onnxruntime's CPU kernel takes it unpacked
        inputs["query"] = r.normal(size=(b, s, n, 3, h)).astype(dtype)
        q, k, v = (np.ascontiguousarray(inputs["query"][:, :, :, i]).reshape(b, s, d) for i in range(3))
        oracle = {"query": q, "key": k, "value": v}
    elif layout == "packed_kv":
        inputs["key"] = r.normal(size=(b, lk, n, 2, h)).astype(dtype)
        k, v = (np.ascontiguousarray(inputs["key"][:, :, :, i]).reshape(b, lk, d) for i in range(2))
        oracle = {"query": inputs["query"], "key": k, "value": v}
    else:
        if bias:
            pytest.skip("onnxruntime applies no bias to BNSH keys")
        inputs["key"], inputs["value"] = (r.normal(size=(b, n, lk, h)).astype(dtype) for _ in range(2))
    inputs["bias"] = r.normal(size=3 * d).astype(dtype) if bias else None
    if oracle is not None:
        oracle["bias"] = inputs["bias"]
    check("MultiHeadAttention", inputs, 1, dtype=dtype, oracle=oracle, num_heads=n)


@pytest.mark.parametrize("mask", ["none", "1d", "2d", "3d"])
@pytest.mark.parametrize("attention_bias", [False, True])
@pytest.mark.parametrize("past", [False, True])
@pytest.mark.parametrize("causal", [0, 1])
def test_multi_head_attention_masks(mask: str, attention_bias: bool, past: bool, causal: int) -> None:
    r = _rng(13, attention_bias, past, causal)
    b, s, n, h, p = 2, 3, 2, 4, 2
    d = n * h
    total = s + (p if past else 0)
    inputs = {"query": r.normal(size=(b, s, d)).astype(F32), "key": r.normal(size=(b, s, d)).astype(F32),
              "value": r.normal(size=(b, s, d)).astype(F32), "bias": r.normal(size=3 * d).astype(F32),
              "key_padding_mask": _mask_index(mask, r, b, s, total),
              "attention_bias": r.normal(size=(b, n, s, total)).astype(F32) if attention_bias else None,
              "past_key": r.normal(size=(b, n, p, h)).astype(F32) if past else None,
              "past_value": r.normal(size=(b, n, p, h)).astype(F32) if past else None}
    check("MultiHeadAttention", inputs, 3 if past else 1, num_heads=n, unidirectional=causal, scale=0.4)


def _cos_sin(max_pos: int, half: int, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / (10000 ** (np.arange(half) / half))
    ang = np.arange(max_pos)[:, None] * inv[None, :]
    return np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("pos", ["offset", "ids"])
@pytest.mark.parametrize("layout", ["3d", "4d", "partial"])
def test_rotary_embedding(dtype: type, interleaved: int, pos: str, layout: str) -> None:
    r = _rng(14, interleaved)
    b, s, n, h = 2, 3, 2, 8
    rot = 4 if layout == "partial" else h
    x = r.normal(size=(b, n, s, h) if layout == "4d" else (b, s, n * h)).astype(dtype)
    pids = np.array([2], np.int64) if pos == "offset" else r.integers(0, 9, size=(b, s)).astype(np.int64)
    cos, sin = _cos_sin(10, rot // 2, dtype)
    attrs: dict[str, Any] = {"interleaved": interleaved}
    if layout != "4d":
        attrs["num_heads"] = n
    if layout == "partial":
        attrs["rotary_embedding_dim"] = rot
    check("RotaryEmbedding", {"input": x, "position_ids": pids, "cos_cache": cos, "sin_cache": sin}, dtype=dtype,
          **attrs)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("phase", ["prompt", "decode", "decode_shared"])
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("rotary", [0, 1, 2])
def test_group_query_attention(dtype: type, phase: str, packed: bool, rotary: int) -> None:
    r = _rng(15, packed, rotary)
    b, n, kvn, h = 2, 4, 2, 16  # onnxruntime's rotary wants head_size % 16 == 0
    s = 4 if phase == "prompt" else 1
    past = {"prompt": 0, "decode": 5, "decode_shared": 8}[phase]
    total = s if phase == "prompt" else 6
    q = r.normal(size=(b, s, n * h)).astype(dtype)
    k, v = (r.normal(size=(b, s, kvn * h)).astype(dtype) for _ in range(2))
    inputs: dict[str, Any] = {"query": np.concatenate([q, k, v], axis=-1) if packed else q,
                              "key": None if packed else k, "value": None if packed else v,
                              "past_key": r.normal(size=(b, kvn, past, h)).astype(dtype),
                              "past_value": r.normal(size=(b, kvn, past, h)).astype(dtype),
                              "seqlens_k": np.array([total - 1] * b, np.int32),
                              "total_sequence_length": np.array(total, np.int32)}
    attrs: dict[str, Any] = {"num_heads": n, "kv_num_heads": kvn}
    if rotary:
        inputs["cos_cache"], inputs["sin_cache"] = _cos_sin(16, h // 2, dtype)
        attrs.update(do_rotary=1, rotary_interleaved=rotary - 1)
    # present rows past each batch's length are not written by onnxruntime's shared buffer
    check("GroupQueryAttention", inputs, 3, dtype=dtype, skip=(1, 2) if phase == "decode_shared" else (), **attrs)


@pytest.mark.parametrize("option", ["ragged", "chunk", "window", "softcap", "smooth", "head_sink", "attention_bias",
                                    "position_ids", "scale", "padded_prompt"])
def test_group_query_attention_options(option: str) -> None:
    r = _rng(16)
    b, n, kvn, h = 2, 4, 1, 16
    prompt = option == "padded_prompt"
    if prompt:  # right-padded prompt: batch b holds lens[b] tokens of 5
        s, past, lens = 5, 0, np.array([3, 5], np.int32)
    elif option == "chunk":  # a second prompt chunk after a cached one (batch 1 only)
        b, s, past, lens = 1, 3, 8, np.array([7], np.int32)
    else:  # decoding one token into an 8-slot cache; batch b then holds lens[b] + 1 tokens
        s, past, lens = 1, 8, np.array([4, 6] if option == "ragged" else [6, 6], np.int32)
    total = s if prompt else int(lens.max()) + 1
    inputs: dict[str, Any] = {
        "query": r.normal(size=(b, s, n * h)).astype(F32),
        "key": r.normal(size=(b, s, kvn * h)).astype(F32),
        "value": r.normal(size=(b, s, kvn * h)).astype(F32),
        "past_key": r.normal(size=(b, kvn, past, h)).astype(F32),
        "past_value": r.normal(size=(b, kvn, past, h)).astype(F32),
        "seqlens_k": lens - 1 if prompt else lens,
        "total_sequence_length": np.array(total, np.int32),
    }
    attrs: dict[str, Any] = {"num_heads": n, "kv_num_heads": kvn}
    # cache rows past a batch's length hold whatever onnxruntime's buffer held
    skip: tuple[int, ...] = () if prompt else (1, 2)
    if option == "window":
        attrs["local_window_size"] = 3
    elif option == "softcap":
        attrs["softcap"] = 2.0
    elif option == "smooth":
        attrs["smooth_softmax"] = 1
    elif option == "scale":
        attrs["scale"] = 0.3
    elif option == "head_sink":
        inputs.update(cos_cache=None, sin_cache=None, position_ids=None, attention_bias=None,
                      head_sink=r.normal(size=n).astype(F32))
    elif option == "attention_bias":
        inputs.update(cos_cache=None, sin_cache=None, position_ids=None,
                      attention_bias=r.normal(size=(b, 1, s, total)).astype(F32))
    elif option == "position_ids":
        inputs["cos_cache"], inputs["sin_cache"] = _cos_sin(16, h // 2, F32)
        inputs["position_ids"] = r.integers(0, 16, size=(b, s)).astype(np.int64)
        attrs["do_rotary"] = 1
    if prompt:
        skip = (0, 1, 2)
    got = check("GroupQueryAttention", inputs, 3, skip=skip, **attrs)
    if prompt:
        want = _ort(*_model("GroupQueryAttention", inputs, 3, **attrs))
        for bi, ln in enumerate(lens):
            np.testing.assert_allclose(got[0][bi, :ln], want[0][bi, :ln], rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(got[1][bi, :, :ln], want[1][bi, :, :ln], rtol=1e-4, atol=1e-5)
