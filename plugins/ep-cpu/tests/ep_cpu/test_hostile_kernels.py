"""Hostile attribute and input values the cpu kernels refuse before allocating or looping
(issue #16): an InvalidGraphError for a value the spec does not allow, a ResourceLimitError
for a size no machine can hold, at session creation where the size is static, else before
the run allocates; each names the node and the attribute or input. Cases that used to hang
run in a subprocess with a time limit, so a regression fails instead of stalling pytest."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from _hostile import In, one_node, refusal, run_epoxy, run_reference, same

from epoxy.errors import InvalidGraphError, ResourceLimitError

#: more bytes than MAX_OUTPUT_BYTES (2**48): refused on any machine, without a memory limit
HUGE = 1 << 40


def f32(*shape: int) -> np.ndarray:
    return np.random.default_rng(3).standard_normal(shape).astype(np.float32)


def i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def assert_refused(case, kind: type, *words: str, at_creation: bool | None = None, limit: int | None = None) -> None:
    found = refusal(case, limit)
    assert isinstance(found.error, kind), f"{type(found.error).__name__}: {found.error}"
    message = str(found.error)
    assert "'n0'" in message, message
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    if at_creation is not None:
        assert found.at_creation is at_creation, f"refused at {'creation' if found.at_creation else 'run'}: {message}"


def finishes(case, seconds: float = 60.0) -> list[np.ndarray]:
    """Run ``case`` through epoxy in a child process, killed after ``seconds``."""
    code = textwrap.dedent("""
        import io, sys, numpy as np, onnx, epoxy
        data = sys.stdin.buffer.read()
        model_len = int.from_bytes(data[:8], "little")
        model, feeds = data[8:8 + model_len], dict(np.load(io.BytesIO(data[8 + model_len:])))
        outs = epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)
        buf = io.BytesIO(); np.savez(buf, *outs); sys.stdout.buffer.write(buf.getvalue())
    """)
    model = case.model.SerializeToString()
    feeds = __import__("io").BytesIO()
    np.savez(feeds, **case.feeds)
    payload = len(model).to_bytes(8, "little") + model + feeds.getvalue()
    try:
        done = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, timeout=seconds)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case.model.graph.node[0].op_type} did not finish within {seconds} s")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    arrays = np.load(__import__("io").BytesIO(done.stdout))
    return [arrays[f"arr_{i}"] for i in range(len(arrays.files))]


# ------------------------------------------------------------------------------------- LRN


@pytest.mark.parametrize("size", [0, -3])
def test_lrn_size_below_one_is_refused_at_creation(size):
    assert_refused(one_node("LRN", [f32(1, 3, 4, 4)], {"size": size}, 13), InvalidGraphError, "'size'", f"{size}",
                   at_creation=True)


@pytest.mark.parametrize("size", [2**31 - 1, 2**40, 2])
def test_lrn_huge_or_even_size_finishes_with_the_spec_window(size):
    """A huge size used to loop over every offset (hours); only offsets inside the channel
    axis add anything. Even sizes are defined by the spec: channels c - floor((size-1)/2)
    to c + ceil((size-1)/2). (The reference evaluator's LRN loops over the batch instead of
    the channels, so the spec's formula is the oracle here.)"""
    x = f32(1, 5, 3, 3)
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    sq = np.stack([np.sum(x[:, max(0, c - lo): min(5, c + hi + 1)] ** 2, axis=1) for c in range(5)], axis=1)
    expected = x / (1 + 1e-4 / size * sq) ** 0.75
    got = finishes(one_node("LRN", [x], {"size": size}, 13))[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------- RNN / GRU / LSTM

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _recurrent(op: str, hidden_size: int, *, symbolic: bool = False, **attrs) -> object:
    gates, h = _GATES[op], 2
    x, w, r = f32(2, 1, 3), f32(1, gates * h, 3), f32(1, gates * h, h)
    if symbolic:  # shapes unknown at creation: the kernel checks the fed weights
        weights = [In(w, ["dw", "gw", "iw"]), In(r, ["dr", "gr", "hr"])]
    else:
        weights = [In(w, const=True), In(r, const=True)]
    return one_node(op, [x, *weights], {"hidden_size": hidden_size, **attrs}, 14, n_out=2)


@pytest.mark.parametrize("op", sorted(_GATES))
def test_recurrent_hidden_size_unlike_the_weights_is_refused_at_creation(op):
    assert_refused(_recurrent(op, HUGE), InvalidGraphError, "'hidden_size'", str(HUGE), "R's last dim is 2",
                   at_creation=True)
    assert_refused(_recurrent(op, 0), InvalidGraphError, "'hidden_size' = 0", at_creation=True)


@pytest.mark.parametrize("op", sorted(_GATES))
def test_recurrent_hidden_size_is_checked_against_fed_weights_before_allocating(op):
    assert_refused(_recurrent(op, HUGE, symbolic=True), InvalidGraphError, "'hidden_size'", "R's last dim is 2",
                   at_creation=False)


@pytest.mark.parametrize("op", sorted(_GATES))
def test_recurrent_layout_outside_0_1_is_refused(op):
    """layout is a choice between two tensor layouts, not a flag: the reference reads 7 as
    1 for the inputs and as 0 for the outputs, so no reading of it is right."""
    assert_refused(_recurrent(op, 2, layout=7), InvalidGraphError, "'layout' = 7", at_creation=True)


# ----------------------------------------------------------------------------- AffineGrid

_THETA = np.array([[[1, 0, 0], [0, 1, 0]]], np.float32)


def test_affine_grid_huge_constant_size_is_refused_at_creation():
    case = one_node("AffineGrid", [_THETA, In(i64(1, 1, 2**25, 2**25), const=True)], {}, 20)
    assert_refused(case, ResourceLimitError, "AffineGrid", at_creation=True)


def test_affine_grid_huge_fed_size_is_refused_before_allocating():
    assert_refused(one_node("AffineGrid", [_THETA, i64(1, 1, 2**25, 2**25)], {}, 20), ResourceLimitError,
                   "output shape", at_creation=False)


def test_affine_grid_negative_size_is_refused():
    assert_refused(one_node("AffineGrid", [_THETA, i64(1, 1, -5, 4)], {}, 20), InvalidGraphError, "'size'", "-5")


# --------------------------------------------------------------------------------- Resize

_X4 = f32(1, 3, 4, 4)


@pytest.mark.parametrize("const", [True, False])
def test_resize_negative_sizes_are_refused(const):
    case = one_node("Resize", [_X4, None, None, In(i64(1, 3, -4, 4), const=const)], {}, 19)
    assert_refused(case, InvalidGraphError, "'sizes'", "-4", at_creation=const)


@pytest.mark.parametrize("scale", [-2.0, 0.0, np.nan, np.inf])
@pytest.mark.parametrize("const", [True, False])
def test_resize_scales_must_be_finite_and_positive(scale, const):
    scales = np.array([1, 1, scale, 2], np.float32)
    case = one_node("Resize", [_X4, None, In(scales, const=const)], {"mode": "linear"}, 19)
    assert_refused(case, InvalidGraphError, "'scales'", at_creation=const)


def test_upsample_attribute_scales_are_checked_at_creation():
    case = one_node("Upsample", [_X4], {"scales": [1.0, 1.0, -1.0, 2.0]}, 7)
    assert_refused(case, InvalidGraphError, "'scales'", at_creation=True)


# ------------------------------------------------------------------------ normalizations


@pytest.mark.parametrize("op,opset", [("LayerNormalization", 17), ("RMSNormalization", 23)])
def test_normalization_axis_outside_the_rank_is_refused_before_running(op, opset):
    """With the rank unknown at load the kernel is the one to check (the loader checks
    what it can see): the axis is refused before any reduction over it."""
    case = one_node(op, [In(f32(2, 3), None), In(f32(3), None)], {"axis": 5}, opset)
    assert_refused(case, InvalidGraphError, "'axis' = 5", "[-2, 1]", at_creation=False)


@pytest.mark.parametrize("groups", [0, -1, 3, HUGE])
def test_group_normalization_groups_must_split_the_channels(groups):
    x = f32(1, 4, 2)
    assert_refused(one_node("GroupNormalization", [x, f32(4), f32(4)], {"num_groups": groups}, 21),
                   InvalidGraphError, "'num_groups'", at_creation=True)
    symbolic = [In(x, ["n", "c", "s"]), In(f32(4), ["c"]), In(f32(4), ["c"])]
    assert_refused(one_node("GroupNormalization", symbolic, {"num_groups": groups}, 21), InvalidGraphError,
                   "'num_groups'")


# ---------------------------------------------------------------------- conv and pooling

_W = f32(2, 3, 2, 2)


@pytest.mark.parametrize("attr,value", [("kernel_shape", [0, 2]), ("strides", [0, 1]), ("dilations", [0, 1])])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool", "Conv", "ConvTranspose"])
def test_window_attributes_below_one_are_refused_at_creation(op, attr, value):
    attrs = {"kernel_shape": [2, 2], attr: value}
    inputs = [_X4] if op.endswith("Pool") else [_X4, In(_W if op == "Conv" else f32(3, 2, 2, 2), const=True)]
    assert_refused(one_node(op, inputs, attrs, 19 if op.endswith("Pool") else 11), InvalidGraphError, f"'{attr}'",
                   at_creation=True)


def test_conv_group_zero_is_refused():
    assert_refused(one_node("Conv", [_X4, In(_W, const=True)], {"group": 0}, 11), InvalidGraphError, "'group' = 0",
                   at_creation=True)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool", "Conv"])
def test_huge_pads_are_refused_before_padding(op):
    attrs = {"kernel_shape": [2, 2], "pads": [HUGE, HUGE, 0, 0]}
    weights = [] if op.endswith("Pool") else [In(_W, const=True)]
    assert_refused(one_node(op, [_X4, *weights], attrs, 18 if op.endswith("Pool") else 11), ResourceLimitError,
                   "padded input", at_creation=True)
    symbolic = one_node(op, [In(_X4, ["n", "c", "h", "w"]), *weights], attrs, 18 if op.endswith("Pool") else 11)
    assert_refused(symbolic, ResourceLimitError, "padded input", at_creation=False)


@pytest.mark.parametrize("attrs", [{"output_shape": [2**25, 2**25]}, {"strides": [HUGE, HUGE]},
                                   {"output_padding": [HUGE, 0], "strides": [2, 2]}])
def test_conv_transpose_sizes_from_attributes_are_refused_at_creation(attrs):
    case = one_node("ConvTranspose", [_X4, In(f32(3, 2, 2, 2), const=True)], attrs, 11)
    assert_refused(case, ResourceLimitError, "accumulation buffer", at_creation=True)


# ----------------------------------------------------------------- sizes from attributes


@pytest.mark.parametrize("op", ["RandomNormal", "RandomUniform"])
def test_random_shape_attribute_too_large_is_refused_at_creation(op):
    assert_refused(one_node(op, [], {"shape": [2**25, 2**25]}, 22), ResourceLimitError, "output shape",
                   at_creation=True)


def test_multinomial_sample_size_too_large_is_refused_at_creation():
    assert_refused(one_node("Multinomial", [f32(1, 3)], {"sample_size": 2**50}, 22), ResourceLimitError,
                   "output shape", at_creation=True)


def test_roi_align_output_size_too_large_is_refused_before_allocating():
    case = one_node("RoiAlign", [_X4, np.array([[0, 0, 1, 1]], np.float32), i64(0)],
                    {"output_height": 2**24, "output_width": 2**24}, 16)
    assert_refused(case, ResourceLimitError, "output shape")


def test_feature_vectorizer_dimensions_too_large_are_refused_before_allocating():
    case = one_node("FeatureVectorizer", [f32(1, 2)], {"inputdimensions": [2**50]}, 1, domain="ai.onnx.ml")
    assert_refused(case, ResourceLimitError, "output shape")


def test_quantize_linear_huge_block_size_does_not_repeat_the_scale():
    """ceil(4 / 2**40) = 1 block: valid, and the same as block_size 4 (the scale used to be
    repeated block_size times before being cut to the axis)."""
    x, scale = f32(2, 4), np.full((2, 1), 0.05, np.float32)
    got = run_epoxy(one_node("QuantizeLinear", [x, scale], {"axis": 1, "block_size": HUGE}, 21), limit=None)
    want = run_reference(one_node("QuantizeLinear", [x, scale], {"axis": 1, "block_size": 4}, 21))
    assert same(got, want)


def test_tfidf_huge_gram_length_and_skip_count_finish():
    """Loops ran to max_gram_length and max_skip_count (2**40 each); only the pool's
    lengths and the skips that fit in a row can match, so the answer is the bounded one's."""
    attrs = {"mode": "TF", "min_gram_length": 1, "ngram_counts": [0, 2], "ngram_indexes": [0, 1, 2],
             "pool_int64s": [1, 2, 1, 3]}
    x = i64(1, 2, 5, 1, 3, 2)
    got = finishes(one_node("TfIdfVectorizer", [x], {**attrs, "max_gram_length": HUGE, "max_skip_count": HUGE}, 9))
    want = run_reference(one_node("TfIdfVectorizer", [x], {**attrs, "max_gram_length": 2, "max_skip_count": 5}, 9))
    assert same(got, want)


@pytest.mark.parametrize("op", ["SpaceToDepth", "DepthToSpace"])
def test_blocksize_below_one_is_refused(op):
    assert_refused(one_node(op, [_X4], {"blocksize": 0}, 13), InvalidGraphError, "'blocksize' = 0", at_creation=True)


@pytest.mark.parametrize("axis", [4, -4])
def test_flatten_axis_outside_the_rank_is_refused(axis):
    assert_refused(one_node("Flatten", [f32(2, 3, 4)], {"axis": axis}, 13), InvalidGraphError, "'axis'",
                   "[-3, 3]", at_creation=True)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_axis_outside_the_rank_is_refused(op):
    assert_refused(one_node(op, [In(f32(2, 3), None)], {"axis": 2}, 13), InvalidGraphError, "'axis' = 2",
                   at_creation=False)
