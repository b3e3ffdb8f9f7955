"""com.microsoft quantized and fused-matmul ops (MatMulNBits, DynamicQuantizeMatMul,
MatMulIntegerToFloat, FusedMatMul, QGemm, QLinear*) against onnxruntime, which defines them."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from _contrib_oracle import feeds_of, single_node

import epoxy
from epoxy_sdk.conformance.onnxruntime_oracle import weight_codes

ort = pytest.importorskip("onnxruntime")

# one-node models and their feeds: the helpers the other contrib tests use
_model = single_node
_feeds = feeds_of


def run_both(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(epoxy's outputs, onnxruntime's outputs); every node must run on cpu."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = epoxy.InferenceSession(model, providers=["cpu"])
    report = sess.partition_report()
    assert {d.provider for d in report.nodes} == {"cpu"}, report.format()
    got = sess.run(None, feeds)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    want = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    return got, want


def check(op: str, inputs: list[np.ndarray | None], attrs: dict | None = None, consts: tuple[int, ...] = (),
          exact: bool = False, rtol: float = 1e-5, atol: float = 1e-5) -> list[np.ndarray]:
    got, want = run_both(_model(op, inputs, attrs, consts), _feeds(inputs, consts))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        if exact:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)
    return got


# ============================================================================ MatMulNBits
def quantize_nbits(w: np.ndarray, bits: int, block_size: int, symmetric: bool, zp_kind: str = "packed"):
    """Block-quantize ``w`` (K, N) into MatMulNBits' packed layout: B (N, k_blocks, blob),
    scales (N * k_blocks), zero points (packed uint8, float, or None)."""
    k, n = w.shape
    kb = -(-k // block_size)
    padded = np.zeros((kb * block_size, n), np.float32)
    padded[:k] = w
    blocks = padded.T.reshape(n, kb, block_size)
    qmax = (1 << bits) - 1
    if symmetric:
        amax = np.abs(blocks).max(-1)
        scale = np.where(amax > 0, amax / (1 << (bits - 1)), 1.0).astype(np.float32)
        zp = np.full((n, kb), 1 << (bits - 1), np.int64)
    else:
        lo, hi = np.minimum(blocks.min(-1), 0), np.maximum(blocks.max(-1), 0)
        scale = np.where(hi > lo, (hi - lo) / qmax, 1.0).astype(np.float32)
        zp = np.clip(np.rint(-lo / scale), 0, qmax).astype(np.int64)
    q = np.clip(np.rint(blocks / scale[..., None]) + zp[..., None], 0, qmax).astype(np.uint8)
    per_byte = 8 // bits
    shifts = np.arange(per_byte, dtype=np.uint8) * bits
    b = (q.reshape(n, kb, -1, per_byte) << shifts).sum(-1, dtype=np.uint8) if bits < 8 else q
    if symmetric and zp_kind != "float":
        zps = None
    elif zp_kind == "float":
        zps = zp.astype(np.float32).reshape(-1)
    else:
        nbytes = -(-kb * bits // 8)
        zpad = np.zeros((n, nbytes * per_byte), np.uint8)
        zpad[:, :kb] = zp
        zps = (zpad.reshape(n, nbytes, per_byte) << shifts).sum(-1, dtype=np.uint8).reshape(-1)
    return np.ascontiguousarray(b), scale.reshape(-1), zps


@pytest.mark.parametrize("bits", [4, 8, 2])
@pytest.mark.parametrize("k,block_size", [(64, 32), (50, 16), (33, 32), (128, 128)])
@pytest.mark.parametrize("zp", ["none", "packed", "float"])
@pytest.mark.parametrize("accuracy_level", [0, 4])
def test_matmul_nbits(bits, k, block_size, zp, accuracy_level):
    # level 4: onnxruntime rounds A to int8 per block (float zero points: it stays in float)
    if bits == 8 and zp == "float":
        pytest.skip("onnxruntime's cpu MatMulNBits refuses 8-bit weights with float zero points")
    rng = np.random.default_rng(bits * 1000 + k)
    n = 24
    w = rng.standard_normal((k, n)).astype(np.float32)
    b, scales, zps = quantize_nbits(w, bits, block_size, symmetric=zp == "none", zp_kind=zp)
    a = rng.standard_normal((2, 3, k)).astype(np.float32)
    attrs = {"K": k, "N": n, "bits": bits, "block_size": block_size, "accuracy_level": accuracy_level}
    got = check("MatMulNBits", [a, b, scales, zps], attrs, consts=(1, 2, 3), rtol=1e-4, atol=1e-4)
    if bits >= 4:  # the packing really encodes w
        ref = a @ w
        assert np.linalg.norm(got[0] - ref) < (0.2 if bits == 4 else 0.03) * np.linalg.norm(ref)


@pytest.mark.parametrize("const", [True, False])
def test_matmul_nbits_bias_and_runtime_weights(const):
    rng = np.random.default_rng(7)
    k, n, bs = 40, 16, 16
    b, scales, zps = quantize_nbits(rng.standard_normal((k, n)).astype(np.float32), 4, bs, False)
    bias = rng.standard_normal(n).astype(np.float32)
    a = rng.standard_normal((5, k)).astype(np.float32)
    attrs = {"K": k, "N": n, "bits": 4, "block_size": bs, "accuracy_level": 4}
    check("MatMulNBits", [a, b, scales, zps, None, bias], attrs,
          consts=(1, 2, 3, 5) if const else (), rtol=1e-4, atol=1e-4)


def test_matmul_nbits_g_idx():
    rng = np.random.default_rng(8)
    k, n, bs = 64, 8, 16
    b, scales, _ = quantize_nbits(rng.standard_normal((k, n)).astype(np.float32), 4, bs, True)
    g_idx = rng.permutation(np.arange(k) // bs).astype(np.int32)
    zps = rng.uniform(6, 10, scales.size).astype(np.float32)
    a = rng.standard_normal((3, k)).astype(np.float32)
    check("MatMulNBits", [a, b, scales, zps, g_idx], {"K": k, "N": n, "bits": 4, "block_size": bs},
          consts=(1, 2, 3, 4), rtol=1e-4, atol=1e-4)


def test_matmul_nbits_float16():
    rng = np.random.default_rng(9)
    k, n, bs = 64, 16, 32
    b, scales, zps = quantize_nbits(rng.standard_normal((k, n)).astype(np.float32), 4, bs, False)
    a = rng.standard_normal((4, k)).astype(np.float16)
    check("MatMulNBits", [a, b, scales.astype(np.float16), zps], {"K": k, "N": n, "bits": 4, "block_size": bs},
          consts=(1, 2, 3), rtol=1e-2, atol=2e-2)


# ============================================================================ FusedMatMul
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("tba,tbb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_fused_matmul(trans_a, trans_b, tba, tbb):
    rng = np.random.default_rng(trans_a + 2 * trans_b + 4 * tba + 8 * tbb)
    m, k, n, b1 = 3, 5, 4, 6

    def operand(rows, cols, trans, tb):
        shape = (cols, rows) if trans else (rows, cols)
        # with transBatch the leading axis is the one moved to just before the last
        full = (shape[0], b1, shape[1]) if tb else (b1, shape[0], shape[1])
        return rng.standard_normal(full).astype(np.float32)

    a = operand(m, k, trans_a, tba)
    b = operand(k, n, trans_b, tbb)
    attrs = {"alpha": 0.5, "transA": trans_a, "transB": trans_b, "transBatchA": tba, "transBatchB": tbb}
    check("FusedMatMul", [a, b], attrs)


def test_fused_matmul_4d_broadcast_and_2d():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = rng.standard_normal((3, 6, 5)).astype(np.float32)
    check("FusedMatMul", [a, b], {"transB": 1, "alpha": 2.0})
    a2 = rng.standard_normal((5, 4)).astype(np.float32)
    b2 = rng.standard_normal((5, 6)).astype(np.float32)
    check("FusedMatMul", [a2, b2], {"transA": 1})


# ============================================================================ integer matmuls
@pytest.mark.parametrize("b_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("with_zp,with_bias", [(False, False), (True, True), (True, False)])
def test_dynamic_quantize_matmul(b_dtype, per_column, with_zp, with_bias):
    rng = np.random.default_rng(11)
    k, n = 16, 6
    a = rng.standard_normal((2, 3, k)).astype(np.float32)
    b = weight_codes(rng, b_dtype, (k, n))  # A is quantized to uint8
    shape = (n,) if per_column else ()
    b_scale = rng.uniform(0.001, 0.02, shape).astype(np.float32)
    b_zp = rng.integers(0, 10, shape).astype(b_dtype) if with_zp else None
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    check("DynamicQuantizeMatMul", [a, b, b_scale, b_zp, bias], consts=(1, 2, 3, 4), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_dtype,b_dtype", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("with_zp", [False, True])
def test_matmul_integer_to_float(a_dtype, b_dtype, per_column, with_zp):
    rng = np.random.default_rng(12)
    k, n = 10, 5
    ia = np.iinfo(a_dtype)
    a = rng.integers(ia.min, ia.max + 1, (3, k)).astype(a_dtype)
    b = weight_codes(rng, b_dtype, (k, n), activation=a_dtype)
    shape = (n,) if per_column else ()
    a_scale = np.array(0.03, np.float32)
    b_scale = rng.uniform(0.001, 0.02, shape).astype(np.float32)
    a_zp = np.array(3, a_dtype) if with_zp else None
    b_zp = rng.integers(0, 5, shape).astype(b_dtype) if with_zp else None
    bias = rng.standard_normal(n).astype(np.float32)
    check("MatMulIntegerToFloat", [a, b, a_scale, b_scale, a_zp, b_zp, bias], consts=(1, 3, 5, 6))


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 1), (0, 1)])
@pytest.mark.parametrize("out", ["float", "uint8", "int8"])
@pytest.mark.parametrize("with_c", [False, True])
@pytest.mark.parametrize("per_column", [False, True])
def test_qgemm(trans_a, trans_b, out, with_c, per_column):
    rng = np.random.default_rng(13)
    m, k, n = 4, 12, 6
    # onnxruntime's quantized output has A's type
    a_dtype = np.int8 if out == "int8" else np.uint8
    a = rng.integers(np.iinfo(a_dtype).min, np.iinfo(a_dtype).max + 1, (k, m) if trans_a else (m, k)).astype(a_dtype)
    b = weight_codes(rng, np.int8, (n, k) if trans_b else (k, n), activation=a_dtype)
    shape = (n,) if per_column else ()
    b_scale = rng.uniform(0.001, 0.01, shape).astype(np.float32)
    b_zp = np.zeros(shape, np.int8)
    c = rng.integers(-2000, 2000, (n,)).astype(np.int32) if with_c else None
    y_scale = y_zp = None
    if out != "float":
        y_scale = np.array(0.3, np.float32)
        y_zp = np.array(128 if out == "uint8" else 0, np.uint8 if out == "uint8" else np.int8)
    inputs = [a, np.array(0.02, np.float32), np.array(12, a_dtype), b, b_scale, b_zp, c, y_scale, y_zp]
    check("QGemm", inputs, {"alpha": 0.75, "transA": trans_a, "transB": trans_b},
          consts=(3, 4, 5, 6), exact=out != "float")


# ============================================================================ QLinear element-wise
def _qparams(rng, dtype):
    info = np.iinfo(dtype)
    return np.array(rng.uniform(0.01, 0.1), np.float32), np.array(rng.integers(info.min // 2, info.max // 2), dtype)


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shapes", [((3, 4, 5), (3, 4, 5)), ((3, 4, 5), (5,)), ((1, 5), (4, 1))])
def test_qlinear_binary(op, dtype, shapes):
    rng = np.random.default_rng(21)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max + 1, shapes[0]).astype(dtype)
    b = rng.integers(info.min, info.max + 1, shapes[1]).astype(dtype)
    (sa, za), (sb, zb), (sc, zc) = _qparams(rng, dtype), _qparams(rng, dtype), _qparams(rng, dtype)
    check(op, [a, sa, za, b, sb, zb, sc, zc], exact=True)


@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1}),
                                      ("QLinearLeakyRelu", {})])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_unary(op, attrs, dtype):
    rng = np.random.default_rng(22)
    info = np.iinfo(dtype)
    x = np.arange(info.min, info.max + 1).astype(dtype).reshape(16, 16)
    (sx, zx), (sy, zy) = _qparams(rng, dtype), _qparams(rng, dtype)
    if op == "QLinearSigmoid":
        sy = np.array(1 / 256, np.float32)
        zy = np.array(info.min, dtype)
    check(op, [x, sx, zx, sy, zy], attrs, exact=True)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("axis", [1, -1])
def test_qlinear_concat(dtype, axis):
    rng = np.random.default_rng(23)
    info = np.iinfo(dtype)
    ys, yz = _qparams(rng, dtype)
    x0 = rng.integers(info.min, info.max + 1, (2, 3, 4)).astype(dtype)
    x1 = rng.integers(info.min, info.max + 1, (2, 3, 4)).astype(dtype)
    (s1, z1) = _qparams(rng, dtype)
    check("QLinearConcat", [ys, yz, x0, ys, yz, x1, s1, z1], {"axis": axis}, exact=True)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_global_average_pool(dtype, channels_last):
    rng = np.random.default_rng(24)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (2, 5, 7, 3) if channels_last else (2, 3, 5, 7)).astype(dtype)
    (sx, zx), (sy, zy) = _qparams(rng, dtype), _qparams(rng, dtype)
    check("QLinearGlobalAveragePool", [x, sx, zx, sy, zy], {"channels_last": channels_last}, exact=True)


def test_matmul_nbits_constant_weight_dequantized_once(monkeypatch):
    from epoxy_ep_cpu.ops import contrib_matmul

    calls = []
    real = contrib_matmul.dequantize_nbits
    monkeypatch.setattr(contrib_matmul, "dequantize_nbits", lambda *a, **k: calls.append(1) or real(*a, **k))
    rng = np.random.default_rng(10)
    k, n, bs = 64, 8, 32
    b, scales, zps = quantize_nbits(rng.standard_normal((k, n)).astype(np.float32), 4, bs, False)
    model = _model("MatMulNBits", [np.zeros((2, k), np.float32), b, scales, zps],
                   {"K": k, "N": n, "bits": 4, "block_size": bs}, consts=(1, 2, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = epoxy.InferenceSession(model, providers=["cpu"])
    for _ in range(3):
        sess.run(None, {"x0": rng.standard_normal((2, k)).astype(np.float32)})
    assert len(calls) == 1
